"""GET /healthz (the process) and /readyz (Triton and the ensemble): the probes, open without a caller key."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute

from food11_api.dependencies import Client, Settings
from food11_api.errors import TRITON_DOWN, error_body
from food11_api.schemas import Health

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Health, summary="The API process is alive")
async def healthz() -> Health:
    return Health(status="ok")


@router.get("/readyz", response_model=Health, responses=TRITON_DOWN, summary="Triton is up and the ensemble is ready")
async def readyz(request: Request, client: Client, settings: Settings) -> Health | JSONResponse:
    if await client.is_ready():
        return Health(status="ok")
    # Answered, not raised: a probe polls this while Triton is down, and that is no error to log.
    return error_body(request, 503, f"ensemble {settings.model_name} not ready at {settings.triton_url}")


# The probes: a caller key never gates them (an orchestrator's probe has none).
PROBE_PATHS = frozenset(route.path for route in router.routes if isinstance(route, APIRoute))
