"""The API: ``create_app(settings)``; ``python -m food11_api`` serves it with uvicorn."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from fastapi import Depends, FastAPI
from starlette.formparsers import MultiPartParser

from food11_api import metrics
from food11_api.admission import AdaptiveLimit
from food11_api.callers import CallerKeys
from food11_api.dependencies import get_caller
from food11_api.errors import EXCEPTION_HANDLERS, UNAUTHORIZED
from food11_api.extra_outputs import learn_extra_outputs, with_extra_outputs
from food11_api.middleware import (
    AdmissionMiddleware,
    BodySizeLimitMiddleware,
    CallerKeyMiddleware,
    RequestIdMiddleware,
    StepHealthMiddleware,
)
from food11_api.routes import captioning, health, models, pages
from food11_api.settings import ApiSettings
from food11_api.step_health import StepHealth
from food11_client import AsyncFood11Client


def create_app(settings: ApiSettings | None = None) -> FastAPI:
    """Raises ``CallerKeysError`` when ``settings.keys_file`` cannot be used: the API must not start."""
    settings = settings or ApiSettings()
    keys = CallerKeys.read(settings.keys_file) if settings.keys_file is not None else None

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        # One asyncio gRPC channel for the whole process, opened at start-up, closed at shutdown.
        app.state.client = AsyncFood11Client(
            settings.triton_url,
            settings.model_name,
            timeout_s=settings.deadline_s,
            lb_policy=settings.grpc_lb_policy,
            classify_model=settings.classify_model_name,
        )
        # The ensemble's own outputs, for the schema; the first /caption would learn them too.
        learning = asyncio.create_task(learn_extra_outputs(app.state.client))
        # Whether every model the ensembles are built from is ready, looked at every step_health_interval_s.
        app.state.step_health.start(app.state.client)
        app.state.response_cache_stats.start(app.state.client)
        yield
        await app.state.response_cache_stats.stop()
        await app.state.step_health.stop()
        learning.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await learning
        await app.state.client.close()

    app = FastAPI(
        title="Food-11 captioning",
        description="Upload a food photo: its Food-11 label, the label's probability, and a BLIP caption "
        "conditioned on the label. All model work runs in Triton.",
        version="0.1.0",
        lifespan=lifespan,
        exception_handlers=EXCEPTION_HANDLERS,
        docs_url=None,  # served by routes/pages.py with local assets
        redoc_url=None,
    )
    app.state.settings = settings
    # Uploads stay in memory (the body limit bounds them) instead of spilling past 1 MB into a temp file:
    # no request bytes reach the filesystem.
    MultiPartParser.spool_max_size = max(MultiPartParser.spool_max_size, settings.max_upload_bytes)
    app.add_middleware(BodySizeLimitMiddleware, max_bytes=settings.max_upload_bytes)
    # Outside the body limit: a request over capacity is refused before its body is read.
    app.state.admission = AdaptiveLimit(
        settings.latency_target * settings.deadline_s,
        settings.min_in_flight,
        settings.max_in_flight,
        unmeasured_retry_after_s=settings.retry_after_s,
        caller_share=settings.caller_share,
    )
    app.add_middleware(
        AdmissionMiddleware,
        limit=app.state.admission,
        paths=captioning.CAPTIONING_PATHS,
        refused=lambda by: app.state.refusals.count(by),
    )
    # Outside admission: a request that needs a model that is not ready takes no place in flight.
    app.state.ensemble_calls = captioning.ensemble_calls(settings)
    ensembles = [call.ensemble for call in app.state.ensemble_calls.values()]
    app.state.step_health = StepHealth(ensembles, settings.step_health_interval_s)
    app.add_middleware(
        StepHealthMiddleware,
        health=app.state.step_health,
        calls_by_path=app.state.ensemble_calls,
        retry_after_s=settings.step_down_retry_after_s,
        refused=lambda by: app.state.refusals.count(by),
    )
    if keys is not None:  # outside admission and the body limit: a request without a key takes no place
        app.add_middleware(
            CallerKeyMiddleware,
            keys=keys,
            open_paths=health.PROBE_PATHS | pages.PAGE_PATHS | {metrics.METRICS_PATH, app.openapi_url or ""},
            open_prefixes=(pages.ASSETS_PREFIX,),
        )
    app.add_middleware(RequestIdMiddleware)  # every response, 413 and 401 included, carries the id and timing
    registry = metrics.instrument(app)  # outermost: counts the middlewares' answers too
    app.state.model_answers = metrics.ModelAnswers(registry)
    app.state.refusals = metrics.Refusals(registry)
    metrics.observe_admission(registry, app.state.admission)
    registry.register(metrics.ModelReadiness(app.state.step_health))
    app.state.response_cache_stats = metrics.ResponseCacheStats([settings.model_name, settings.classify_model_name])
    registry.register(app.state.response_cache_stats)

    needs_key: dict[str, Any] = {}
    if keys is not None:
        # The routes that need a key say so in the schema (Swagger's Authorize button) and document 401.
        needs_key = {"dependencies": [Depends(get_caller)], "responses": UNAUTHORIZED}
        metrics.observe_callers(registry, app.state.admission, keys.names)
    app.include_router(captioning.router, **needs_key)
    app.include_router(models.router, **needs_key)
    app.include_router(health.router)
    app.include_router(pages.router)

    base_openapi = app.openapi  # FastAPI's, which caches the schema of the routes

    def openapi() -> dict:
        client = getattr(app.state, "client", None)
        return with_extra_outputs(base_openapi(), client.known_extra_outputs if client else None)

    app.openapi = openapi  # type: ignore[method-assign]
    return app
