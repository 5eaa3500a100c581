"""The ensemble's outputs beyond the core contract, in the API's answers and its OpenAPI schema.

The response models carry them in one generic field, ``extra``; once the API has learnt them from Triton's
model metadata, the schema names each with its JSON type, so Swagger shows a step someone added without a
line of API code changing."""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Sequence
from typing import Any

from food11_client import AsyncFood11Client, OutputSpec, PipelineError

log = logging.getLogger("food11_api")

EXTRA_FIELD = "extra"
EXTRA_DOC = (
    "the outputs the ensemble declares beyond the core contract (steps added to it), by name: this photo's "
    "row, a one-element row as its value, others as lists, BYTES as text. Empty for the shipped ensemble"
)
_JSON_TYPES = {"BYTES": "string", "BOOL": "boolean"}  # and INT*/UINT*: integer, FP*/BF16: number


def output_schema(spec: OutputSpec) -> dict[str, Any]:
    """The JSON schema of one row of ``spec``, as the client turns it into JSON values."""
    kind = _JSON_TYPES.get(spec.datatype, "integer" if "INT" in spec.datatype else "number")
    schema: dict[str, Any] = {"type": kind}
    for size in reversed(spec.shape if spec.shape != (1,) else ()):
        schema = {"type": "array", "items": schema, **({"minItems": size, "maxItems": size} if size > 0 else {})}
    return {**schema, "description": f"{spec.datatype} {list(spec.shape)} per photo"}


def with_extra_outputs(schema: dict[str, Any], outputs: Sequence[OutputSpec] | None) -> dict[str, Any]:
    """``schema`` with every response model's ``extra`` field naming ``outputs`` (unchanged while unknown)."""
    if not outputs:
        return schema
    schema = copy.deepcopy(schema)
    for model in schema.get("components", {}).get("schemas", {}).values():
        if EXTRA_FIELD in model.get("properties", {}):
            model["properties"][EXTRA_FIELD] = {
                "type": "object",
                "description": EXTRA_DOC,
                "properties": {spec.name: output_schema(spec) for spec in outputs},
                "required": [spec.name for spec in outputs],
            }
    return schema


async def learn_extra_outputs(client: AsyncFood11Client, retry_s: float = 2.0) -> None:
    """Ask Triton for the ensemble's outputs until it answers (it may start after the API)."""
    while True:
        try:
            outputs = await client.extra_outputs()
        except PipelineError as exc:
            log.debug("ensemble outputs not known yet: %s", exc)
            await asyncio.sleep(retry_s)
            continue
        log.info("ensemble outputs beyond the core contract: %s", [spec.name for spec in outputs] or "none")
        return
