"""POST /caption (an upload) and POST /predict (the course's base64 JSON): one photo through the pipeline;
POST /classify: its label only, from the classify ensemble, without the captioning's cost."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, File, Request, Response, UploadFile
from fastapi.routing import APIRoute

from food11_api.dependencies import Client
from food11_api.ensemble_graph import EnsembleCall
from food11_api.errors import ERROR_RESPONSES, ClientDisconnected
from food11_api.schemas import CaptionResponse, ClassifyResponse, PredictRequest, PredictResponse, ServedModelInfo
from food11_api.settings import ApiSettings
from food11_client import CaptionResult, Classification
from pipeline_src.contract import CLASSIFY_OUTPUTS

router = APIRouter(tags=["caption"], responses=ERROR_RESPONSES)
T = TypeVar("T")
A = TypeVar("A", CaptionResult, Classification)  # what caption and classify answer for one photo


async def _until_disconnected(request: Request) -> None:
    """Returns once the client has closed its connection. The endpoint runs after its body was read, so the
    next ASGI message is ``http.disconnect``, which the server delivers as soon as it sees the close (a poll
    of ``is_disconnected`` every 0.25 s missed a client that left before a short call ended)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def unless_disconnected(request: Request, work: Awaitable[T]) -> T:
    """``await work``, unless the client disconnects first: then ``work`` is cancelled (and the Triton call, where
    Triton survives it: food11_client/cancellation.py) and ClientDisconnected raised. A caption takes seconds on a
    CPU; nobody should wait on it for no one."""
    call = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(_until_disconnected(request))
    try:
        done, _ = await asyncio.wait({call, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
        if not call.done():
            call.cancel()
    if call in done:
        return call.result()
    raise ClientDisconnected


async def answer_one(request: Request, response: Response, call: Callable[..., Awaitable[list[A]]], image: bytes) -> A:
    """``call`` (the client's caption or classify) on one photo, with the deadline left, unless the client
    disconnects; the models that answered counted, and Server-Timing the time spent waiting on Triton, so
    callers can tell pipeline from API time."""
    started = time.perf_counter()
    (result,) = await unless_disconnected(request, call([image], timeout_s=deadline_left_s(request)))
    request.app.state.model_answers.count(result.models)
    response.headers["Server-Timing"] = f"triton;dur={(time.perf_counter() - started) * 1000:.2f}"
    return result


def deadline_left_s(request: Request) -> float:
    """The API's deadline counts from the request's admission; its Triton call gets what is left (and
    Triton's queues refuse it once they have held it that long)."""
    deadline_s = request.app.state.settings.deadline_s
    admitted_at = getattr(request.state, "admitted_at", None)
    if admitted_at is None:  # not through the admission middleware
        return deadline_s
    return max(deadline_s - (time.monotonic() - admitted_at), 0.001)


@router.post("/caption", response_model=CaptionResponse, summary="Caption an uploaded photo")
async def caption(
    photo: Annotated[UploadFile, File(description="JPEG, PNG, WebP, BMP or GIF")],
    client: Client,
    request: Request,
    response: Response,
) -> CaptionResponse:
    started = time.perf_counter()
    result = await answer_one(request, response, client.caption, await photo.read())
    return CaptionResponse(
        label=result.label, elapsed_ms=(time.perf_counter() - started) * 1000, **_answer_fields(result)
    )


@router.post(
    "/predict", response_model=PredictResponse, summary="Caption a base64-encoded photo (the course's JSON endpoint)"
)
async def predict(body: PredictRequest, client: Client, request: Request, response: Response) -> PredictResponse:
    result = await answer_one(request, response, client.caption, body.image)
    return PredictResponse(prediction=result.label, **_answer_fields(result))


@router.post(
    "/classify",
    response_model=ClassifyResponse,
    summary="Label an uploaded photo, without a caption",
    description="The Food-11 label and its probability, from the classify ensemble: preprocess, classifier and "
    "label, no vision encoder, no captioner: milliseconds where /caption takes seconds.",
)
async def classify(
    photo: Annotated[UploadFile, File(description="JPEG, PNG, WebP, BMP or GIF")],
    client: Client,
    request: Request,
    response: Response,
) -> ClassifyResponse:
    started = time.perf_counter()
    result = await answer_one(request, response, client.classify, await photo.read())
    return ClassifyResponse(
        label=result.label,
        probability=result.probability,
        warnings=result.warnings,
        models=ServedModelInfo.of(result.models),
        elapsed_ms=(time.perf_counter() - started) * 1000,
    )


def _answer_fields(result: CaptionResult) -> dict[str, Any]:
    """What both endpoints answer beside the label (which /predict calls ``prediction``)."""
    return {
        "probability": result.probability,
        "caption": result.caption,
        "caption_status": result.caption_status,
        "warnings": result.warnings,
        "models": ServedModelInfo.of(result.models),
        "extra": dict(result.extra),
    }


# The requests that cost model time: the adaptive in-flight limit (AdmissionMiddleware) counts these.
CAPTIONING_PATHS = frozenset(route.path for route in router.routes if isinstance(route, APIRoute))


def ensemble_calls(settings: ApiSettings) -> dict[str, EnsembleCall]:
    """By route, the ensemble it calls and the outputs it names (None: every output the ensemble declares, as
    caption() asks): the models it needs follow from them (ensemble_graph.py), for refusing it at once while one
    is not ready and for /readyz?route=."""
    caption = EnsembleCall(settings.model_name)
    return {
        "/caption": caption,
        "/predict": caption,
        "/classify": EnsembleCall(settings.classify_model_name, CLASSIFY_OUTPUTS),
    }
