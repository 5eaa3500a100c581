"""GET /healthz (the process), /readyz (Triton and the ensemble) and /models (what Triton serves)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from food11_api.dependencies import Client, Settings
from food11_api.errors import ERROR_RESPONSES, error_body
from food11_api.schemas import Health, ModelState
from food11_client import AsyncFood11Client
from pipeline_src.contract import MANIFESTS_MODEL

log = logging.getLogger("food11_api")

router = APIRouter(tags=["health"])
TRITON_DOWN: dict[int | str, dict[str, Any]] = {503: ERROR_RESPONSES[503]}


@router.get("/healthz", response_model=Health, summary="The API process is alive")
async def healthz() -> Health:
    return Health(status="ok")


@router.get("/readyz", response_model=Health, responses=TRITON_DOWN, summary="Triton is up and the ensemble is ready")
async def readyz(request: Request, client: Client, settings: Settings) -> Health | JSONResponse:
    if await client.is_ready():
        return Health(status="ok")
    # Answered, not raised: a probe polls this while Triton is down, and that is no error to log.
    return error_body(request, 503, f"ensemble {settings.model_name} not ready at {settings.triton_url}")


@router.get(
    "/models",
    response_model=list[ModelState],
    responses=TRITON_DOWN,
    summary="The models Triton serves, each with its build's manifest",
)
async def models(client: Client) -> list[ModelState]:
    index, manifests = await asyncio.gather(client.repository_index(), _manifests(client))
    by_model = {manifest["model"]: manifest for manifest in manifests}
    return [ModelState(**entry, manifest=by_model.get(entry["name"])) for entry in index]


async def _manifests(client: AsyncFood11Client) -> list[dict]:
    """The served models' manifests, or none when the step serving them fails: the index still answers."""
    try:
        return await client.manifests()
    except Exception as exc:
        log.warning("/models: no manifests from Triton's %s step: %s", MANIFESTS_MODEL, exc)
        return []
