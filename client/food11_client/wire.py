"""The ensemble's tensors on the wire: a request's inputs and requested outputs, and Triton's answers read
back into results. Both clients share it; ``module`` is tritonclient's blocking or asyncio gRPC module."""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import fields

import numpy as np

from food11_client.results import CaptionResult, Classification, OutputSpec, ServedModel
from pipeline_src import contract
from pipeline_src.contract import CLASSIFY_OUTPUTS, CORE_OUTPUTS


def image_inputs(module, images: Sequence[bytes]) -> list:
    if not images:
        raise ValueError("no images to caption")
    tensor = module.InferInput(contract.IMAGE, [len(images), 1], "BYTES")
    tensor.set_data_from_numpy(np.array(images, dtype=np.object_).reshape(-1, 1))
    return [tensor]


def requested_outputs(module, extra: Sequence[OutputSpec]) -> list:
    return [module.InferRequestedOutput(name) for name in (*CORE_OUTPUTS, *(spec.name for spec in extra))]


def classify_outputs(module) -> list:
    return [module.InferRequestedOutput(name) for name in CLASSIFY_OUTPUTS]


def triton_timeout_us(timeout_s: float | None) -> int | None:
    """The caller's time left, as the request's timeout in Triton: a step whose queue policy allows the
    override (the vision encoder's, the captioner's) refuses the request once it has waited that long in
    its queue, rather than start work nobody waits for any more. The ensemble hands it to every step."""
    return None if timeout_s is None else max(1, round(timeout_s * 1_000_000))


def extra_output_specs(metadata) -> tuple[OutputSpec, ...]:
    """The outputs of a batched model's metadata beyond the core contract (their shapes lose the batch axis)."""
    return tuple(
        OutputSpec(output.name, output.datatype, tuple(int(size) for size in output.shape[1:]))
        for output in metadata.outputs
        if output.name not in CORE_OUTPUTS
    )


def _json_rows(rows: np.ndarray) -> list:
    """Each photo's row of an output as JSON values: BYTES as text, a one-element row as its value."""
    if rows.dtype == np.object_:
        rows = np.vectorize(lambda value: value.decode("utf-8", "replace"), otypes=[object])(rows)
    one_element = rows.shape[1:] == (1,)
    return [row[0] if one_element else row for row in rows.tolist()]


@functools.lru_cache(maxsize=8)
def _served_models(models_json: bytes) -> tuple[ServedModel, ...]:
    """Every row of every answer of one server carries the same string: parsed once."""
    known = {field.name for field in fields(ServedModel)}
    return tuple(
        ServedModel(**{key: value for key, value in entry.items() if key in known}) for entry in json.loads(models_json)
    )


def caption_results(response, extra: Sequence[OutputSpec]) -> list[CaptionResult]:
    labels, probabilities, captions, statuses, models = (response.as_numpy(name).reshape(-1) for name in CORE_OUTPUTS)
    extras = {spec.name: _json_rows(response.as_numpy(spec.name)) for spec in extra}
    return [
        CaptionResult(
            label.decode(),
            float(probability),
            caption.decode(),
            status.decode(),
            _served_models(served),
            {name: rows[index] for name, rows in extras.items()},
        )
        for index, (label, probability, caption, status, served) in enumerate(
            zip(labels, probabilities, captions, statuses, models)
        )
    ]


def classifications(response) -> list[Classification]:
    labels, probabilities, models = (response.as_numpy(name).reshape(-1) for name in CLASSIFY_OUTPUTS)
    return [
        Classification(label.decode(), float(probability), _served_models(served))
        for label, probability, served in zip(labels, probabilities, models)
    ]


def manifests_of(response) -> list[dict]:
    """The manifests model's one output: each served model's whole manifest."""
    return json.loads(response.as_numpy(contract.MANIFESTS)[0])
