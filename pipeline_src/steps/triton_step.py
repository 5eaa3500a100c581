"""What every Python-backend step shares: its config, its files, and errors that name the step.

Imported only inside Triton (``triton_python_backend_utils`` exists only there).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

from pipeline_src.steps.batching import bytes_rows, compute_stacked

Checks = Mapping[str, Callable[[np.ndarray], str | None]]  # per input: what is wrong with its rows, or None


class StepContext:
    """The ``args`` Triton passes to ``initialize``, decoded."""

    def __init__(self, args: dict[str, str]):
        self.config: dict[str, Any] = json.loads(args["model_config"])
        self.name: str = self.config["name"]
        self.version: str = args["model_version"]
        self.version_dir = Path(args["model_repository"]) / self.version
        self.repository = self.version_dir.parent.parent  # the model repository this step was loaded from
        self.on_gpu = args["model_instance_kind"] == "GPU"
        self.device_id = int(args["model_instance_device_id"])
        self.logger = pb_utils.Logger
        # Each output's config data_type ("TYPE_FP32", ...): every answer is held to the names and the types.
        self.outputs: dict[str, str] = {output["name"]: output["data_type"] for output in self.config.get("output", [])}

    def error(self, message: str, code: int | None = None) -> pb_utils.InferenceResponse:
        """A response that fails this request alone (INVALID_ARG unless ``code`` says otherwise),
        naming the step: an ensemble's error does not say which step failed."""
        if code is None:
            code = pb_utils.TritonError.INVALID_ARG  # TritonError exists only once the stub runs
        return pb_utils.InferenceResponse(error=pb_utils.TritonError(f"{self.name}: {message}", code))

    def internal_errors(self, requests: list, exc: BaseException) -> list:
        """One INTERNAL error per request when a batched run itself failed."""
        self.logger.log_error(f"{self.name}: batch of {len(requests)} request(s) failed: {exc!r}")
        return [self.error(f"internal error: {exc}", pb_utils.TritonError.INTERNAL) for _ in requests]


def input_array(request, name: str, optional: bool = False):
    """An input's array; ``optional``: None where the request does not carry it."""
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return None if optional and tensor is None else tensor.as_numpy()


def input_problem(values: Mapping[str, np.ndarray], checks: Checks) -> str | None:
    """The first of a request's inputs whose check finds a problem, named."""
    return next((f"{name}: {problem}" for name, check in checks.items() if (problem := check(values[name]))), None)


def bytes_tensor(name: str, values: list[str]) -> pb_utils.Tensor:
    return pb_utils.Tensor(name, bytes_rows(values))


def answer_stacked(
    step: StepContext,
    requests: list,
    inputs: Sequence[str],
    compute: Callable[[dict[str, np.ndarray]], Mapping[str, np.ndarray]],
    checks: Checks | None = None,
) -> list:
    """The responses, in order, to requests computed as one stack (``compute_stacked``). Each is checked alone first
    (``checks``): a bad one gets its own INVALID_ARG naming the step and input, as raising would fail every request
    batched with it. A failed run or broken output contract is INTERNAL for each request it held."""
    responses: list = [None] * len(requests)
    served, arrays = [], []
    for index, request in enumerate(requests):
        values = {name: input_array(request, name) for name in inputs}
        if problem := input_problem(values, checks or {}):
            responses[index] = step.error(problem)
        else:
            served.append(index)
            arrays.append(values)
    if not served:
        return responses
    try:
        answers = [
            pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(name, rows) for name, rows in outputs.items()])
            for outputs in compute_stacked(arrays, compute, step.outputs)
        ]
    except Exception as exc:  # the batched run failed: INTERNAL, reported per request
        answers = step.internal_errors([requests[index] for index in served], exc)
    for index, answer in zip(served, answers):
        responses[index] = answer
    return responses
