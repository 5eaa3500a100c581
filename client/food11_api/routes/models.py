"""GET /models: the ensembles the API calls and the models they are built from, each with Triton's state and its
build's manifest, from the APIs Triton opens to every caller (its repository index is an admin API). Not a
probe (it asks Triton for each model and every manifest), so with caller keys on it needs a key, as the
captioning routes do."""

from __future__ import annotations

import asyncio
import logging

from fastapi import APIRouter

from food11_api.dependencies import Client
from food11_api.ensemble_graph import steps_of
from food11_api.errors import TRITON_DOWN
from food11_api.schemas import ModelState
from food11_client import AsyncFood11Client
from pipeline_src.contract import MANIFESTS_MODEL

log = logging.getLogger("food11_api")

router = APIRouter(tags=["health"])


@router.get(
    "/models",
    response_model=list[ModelState],
    responses=TRITON_DOWN,
    summary="The ensembles and the models they are built from, each with its state and its build's manifest",
)
async def models(client: Client) -> list[ModelState]:
    config, manifests = await asyncio.gather(client.model_config(client.model), _manifests(client))
    by_model = {manifest["model"]: manifest for manifest in manifests}
    steps = [step.model for step in steps_of(config)]
    # The models with a manifest include the ones a step calls by BLS (the captioner), which no ensemble names.
    names = dict.fromkeys([client.model, client.classify_model, *steps, *by_model, MANIFESTS_MODEL])
    states = await asyncio.gather(*(client.model_state(name) for name in names))
    return [ModelState(**state, manifest=by_model.get(state["name"])) for state in states]


async def _manifests(client: AsyncFood11Client) -> list[dict]:
    """The served models' manifests, or none when the step serving them fails: the index still answers."""
    try:
        return await client.manifests()
    except Exception as exc:
        log.warning("/models: no manifests from Triton's %s step: %s", MANIFESTS_MODEL, exc)
        return []
