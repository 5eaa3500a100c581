"""The API: ``create_app(settings)``; ``python -m food11_api`` serves it with uvicorn."""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import time
from contextlib import asynccontextmanager
from importlib.resources import files
from pathlib import Path
from typing import Annotated

from fastapi import Depends, FastAPI, File, Request, Response, UploadFile
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.formparsers import MultiPartParser

from food11_api.disconnect import CLIENT_CLOSED_REQUEST, ClientDisconnected, unless_disconnected
from food11_api.metrics import ModelAnswers, Refusals, instrument
from food11_api.middleware import (AdmissionMiddleware, BodySizeLimitMiddleware, RequestIdMiddleware,
                                   ServerTimingMiddleware, error_response, over_capacity_response)
from food11_api.schemas import (CaptionResponse, ErrorResponse, Health, ModelState, PredictRequest, PredictResponse,
                                ServedModelInfo)
from food11_api.settings import ApiSettings
from food11_client import (AsyncFood11Client, CaptionResult, DeadlineExceededError, InvalidImageError,
                           OverloadedError, PipelineError, ServerUnavailableError)
from food11_client.client import MANIFESTS_MODEL

log = logging.getLogger("food11_api")

REQUEST_ID_EXAMPLE = "3f2b9c0d6e1a4b7c8d9e0f1a2b3c4d5e"


def _error_doc(description: str, detail: str) -> dict:
    example = {"detail": detail, "request_id": REQUEST_ID_EXAMPLE}
    return {"model": ErrorResponse, "description": description,
            "content": {"application/json": {"example": example}}}


ERROR_RESPONSES = {
    400: _error_doc("the photo is empty, undecodable, unsupported or too large in pixels",
                    "in ensemble 'food11_pipeline', preprocess: image 1 of 1: cannot decode: not a JPEG, PNG, WebP, "
                    "BMP or GIF image"),
    413: _error_doc("the request body is over the upload limit", "request body over the 10485760-byte upload limit"),
    422: {"description": "malformed request body"},
    500: _error_doc("unexpected failure; the request id is in the log", f"internal error (request id {REQUEST_ID_EXAMPLE})"),
    503: _error_doc("over capacity (this API's in-flight cap, or a Triton step's queue; the Retry-After header says "
                    "when to retry), or Triton is unreachable or the ensemble is not loaded",
                    "over capacity: this API already serves 8 requests (FOOD11_API_MAX_IN_FLIGHT); retry after 2 s"),
    504: _error_doc("the pipeline did not answer within the deadline", "Deadline Exceeded"),
}
CAPTIONING_PATHS = frozenset({"/caption", "/predict"})  # the requests that cost model time: capped in flight
STATUS_BY_ERROR = {InvalidImageError: 400, ServerUnavailableError: 503, DeadlineExceededError: 504}
INDEX_HTML = files("food11_api").joinpath("index.html").read_text(encoding="utf-8")
# Swagger UI 5 served by this API (from the swagger-ui-py wheel), not from a CDN: /docs works offline.
SWAGGER_UI_DIR = Path(next(iter(importlib.util.find_spec("swagger_ui").submodule_search_locations))) / "static"


def get_client(request: Request) -> AsyncFood11Client:
    return request.app.state.client


Client = Annotated[AsyncFood11Client, Depends(get_client)]


def error_body(request: Request, status: int, detail: str) -> JSONResponse:
    return error_response(status, detail, request.state.request_id)


async def pipeline_error(request: Request, exc: PipelineError) -> JSONResponse:
    status = next((code for kind, code in STATUS_BY_ERROR.items() if isinstance(exc, kind)), 500)
    if isinstance(exc, OverloadedError):  # Triton's queue refused it: the same answer as our own cap
        request.app.state.refusals.count("triton")
        retry_after = request.app.state.settings.retry_after_s
        log.info("request %s: %s %s -> 503 (Triton over capacity): %s", request.state.request_id, request.method,
                 request.url.path, exc)
        return over_capacity_response(str(exc), request.state.request_id, retry_after)
    log_call = log.warning if status < 500 else log.error
    log_call("request %s: %s %s -> %d: %s", request.state.request_id, request.method, request.url.path, status, exc)
    return error_body(request, status, str(exc))


async def client_disconnected(request: Request, exc: ClientDisconnected) -> Response:
    fate = ("was cancelled" if await request.app.state.client.cancels_calls()
            else "runs to its end (this Triton cannot cancel it safely) and its answer is dropped")
    log.info("request %s: %s %s: the client disconnected; its Triton call %s",
             request.state.request_id, request.method, request.url.path, fate)
    return Response(status_code=CLIENT_CLOSED_REQUEST)  # nobody reads it; it is what logs and metrics count


async def unexpected_error(request: Request, exc: Exception) -> JSONResponse:
    log.exception("request %s: %s %s -> 500", request.state.request_id, request.method, request.url.path)
    return error_body(request, 500, f"internal error (request id {request.state.request_id})")


def create_app(settings: ApiSettings | None = None) -> FastAPI:
    settings = settings or ApiSettings()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        # One asyncio gRPC channel for the whole process, opened at start-up, closed at shutdown.
        app.state.client = AsyncFood11Client(settings.triton_url, settings.model_name, timeout_s=settings.deadline_s,
                                             lb_policy=settings.grpc_lb_policy)
        yield
        await app.state.client.close()

    app = FastAPI(
        title="Food-11 captioning",
        description="Upload a food photo: its Food-11 label, the label's probability, and a BLIP caption "
                    "conditioned on the label. All model work runs in Triton.",
        version="0.1.0",
        lifespan=lifespan,
        docs_url=None,  # served below with local assets
        redoc_url=None,
    )
    app.state.settings = settings
    # Uploads stay in memory (the body limit bounds them) instead of spilling past 1 MB into a temp file:
    # no request bytes reach the filesystem.
    MultiPartParser.spool_max_size = max(MultiPartParser.spool_max_size, settings.max_upload_bytes)
    app.add_exception_handler(PipelineError, pipeline_error)
    app.add_exception_handler(ClientDisconnected, client_disconnected)
    app.add_exception_handler(Exception, unexpected_error)
    app.add_middleware(BodySizeLimitMiddleware, max_bytes=settings.max_upload_bytes)
    # Outside the body limit: a request over capacity is refused before its body is read.
    app.add_middleware(AdmissionMiddleware, max_in_flight=settings.max_in_flight,
                       retry_after_s=settings.retry_after_s, paths=CAPTIONING_PATHS,
                       refused=lambda: app.state.refusals.count("api"))
    app.add_middleware(ServerTimingMiddleware)
    app.add_middleware(RequestIdMiddleware)  # every response, 413 included, carries the id
    registry = instrument(app)  # outermost: counts the middlewares' answers too
    model_answers = ModelAnswers(registry)
    app.state.refusals = Refusals(registry)

    async def caption_one(request: Request, client: AsyncFood11Client, image: bytes,
                          response: Response) -> CaptionResult:
        started = time.perf_counter()
        (result,) = await unless_disconnected(request, client.caption([image]))
        model_answers.count(result.models)
        # Server-Timing: the time spent waiting on Triton, so callers can tell pipeline from API time.
        response.headers["Server-Timing"] = f"triton;dur={(time.perf_counter() - started) * 1000:.2f}"
        return result

    @app.post("/caption", response_model=CaptionResponse, responses=ERROR_RESPONSES, tags=["caption"],
              summary="Caption an uploaded photo")
    async def caption(photo: Annotated[UploadFile, File(description="JPEG, PNG, WebP, BMP or GIF")],
                      client: Client, request: Request, response: Response) -> CaptionResponse:
        started = time.perf_counter()
        result = await caption_one(request, client, await photo.read(), response)
        return CaptionResponse(label=result.label, probability=result.probability, caption=result.caption,
                               caption_status=result.caption_status, warnings=result.warnings,
                               models=ServedModelInfo.of(result.models),
                               elapsed_ms=(time.perf_counter() - started) * 1000)

    @app.post("/predict", response_model=PredictResponse, responses=ERROR_RESPONSES, tags=["caption"],
              summary="Caption a base64-encoded photo (the course's JSON endpoint)")
    async def predict(body: PredictRequest, client: Client, request: Request, response: Response) -> PredictResponse:
        result = await caption_one(request, client, body.image, response)
        return PredictResponse(prediction=result.label, probability=result.probability, caption=result.caption,
                               caption_status=result.caption_status, warnings=result.warnings,
                               models=ServedModelInfo.of(result.models))

    @app.get("/healthz", response_model=Health, tags=["health"], summary="The API process is alive")
    async def healthz() -> Health:
        return Health(status="ok")

    @app.get("/readyz", response_model=Health, responses={503: ERROR_RESPONSES[503]}, tags=["health"],
             summary="Triton is up and the ensemble is ready")
    async def readyz(request: Request, client: Client):
        if await client.is_ready():
            return Health(status="ok")
        return error_body(request, 503, f"ensemble {settings.model_name} not ready at {settings.triton_url}")

    @app.get("/models", response_model=list[ModelState], responses={503: ERROR_RESPONSES[503]}, tags=["health"],
             summary="The models Triton serves, each with its build's manifest")
    async def models(client: Client) -> list[ModelState]:
        index, manifests = await asyncio.gather(client.repository_index(), client.manifests(), return_exceptions=True)
        if isinstance(index, BaseException):
            raise index
        if isinstance(manifests, BaseException):
            log.warning("/models: no manifests from Triton's %s step: %s", MANIFESTS_MODEL, manifests)
            manifests = []
        by_model = {manifest["model"]: manifest for manifest in manifests}
        return [ModelState(**entry, manifest=by_model.get(entry["name"])) for entry in index]

    app.mount("/swagger-ui", StaticFiles(directory=SWAGGER_UI_DIR), name="swagger-ui")

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url=app.openapi_url, title=f"{app.title} - Swagger UI",
                                   swagger_js_url="/swagger-ui/swagger-ui-bundle.js",
                                   swagger_css_url="/swagger-ui/swagger-ui.css", swagger_favicon_url="data:,")

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def index() -> str:
        return INDEX_HTML

    return app
