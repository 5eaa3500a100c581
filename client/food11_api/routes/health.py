"""GET /healthz (the process) and /readyz (Triton, the ensembles the API calls and every model they are built
from): the probes, open without a caller key."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute

from food11_api.errors import NOT_READY
from food11_api.middleware import error_response
from food11_api.schemas import Health

router = APIRouter(tags=["health"])

# The routes /readyz?route= answers for (tests/unit/test_step_health.py holds it to captioning.ensemble_calls).
ProbedRoute = Literal["/caption", "/predict", "/classify"]


@router.get("/healthz", response_model=Health, summary="The API process is alive")
async def healthz() -> Health:
    return Health(status="ok")


@router.get(
    "/readyz",
    response_model=Health,
    responses=NOT_READY,
    summary="Triton is up, and the ensembles the API calls and every model they are built from are ready",
    description="From the API's last look at Triton (about once a second; FOOD11_API_STEP_HEALTH_INTERVAL_S): "
    "503 names each model that is not ready. With `route`, only the models that route needs: "
    "`/readyz?route=/classify` is 200 while the captioner or the vision encoder is down.",
)
async def readyz(
    request: Request,
    route: Annotated[
        ProbedRoute | None,
        Query(description="only the models this route needs (its outputs' steps and their BLS callees)"),
    ] = None,
) -> Health | JSONResponse:
    readiness = await request.app.state.step_health.current()
    call = None if route is None else request.app.state.ensemble_calls[route]
    why = readiness.why_not_ready(request.app.state.settings.triton_url, call)
    if why is None:
        return Health(status="ok")
    # Answered, not raised: a probe polls this while Triton is down, and that is no error to log.
    return error_response(503, why, request.state.request_id)


# The probes: a caller key never gates them (an orchestrator's probe has none).
PROBE_PATHS = frozenset(route.path for route in router.routes if isinstance(route, APIRoute))
