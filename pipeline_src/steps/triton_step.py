"""What every Python-backend step shares: its config, its files, and errors that name the step.

Imported only inside Triton (``triton_python_backend_utils`` exists only there).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils


class StepContext:
    """The ``args`` Triton passes to ``initialize``, decoded."""

    def __init__(self, args: dict[str, str]):
        self.config: dict[str, Any] = json.loads(args["model_config"])
        self.name: str = self.config["name"]
        self.version_dir = Path(args["model_repository"]) / args["model_version"]
        self.repository = self.version_dir.parent.parent  # the model repository this step was loaded from
        self.on_gpu = args["model_instance_kind"] == "GPU"
        self.device_id = int(args["model_instance_device_id"])
        self.logger = pb_utils.Logger

    @property
    def torch_device(self) -> str:
        return f"cuda:{self.device_id}" if self.on_gpu else "cpu"

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


def input_array(request, name: str):
    return pb_utils.get_input_tensor_by_name(request, name).as_numpy()


def bytes_tensor(name: str, values: list[str]) -> pb_utils.Tensor:
    """A BYTES output of shape [n, 1] from n strings."""
    return pb_utils.Tensor(name, np.array([value.encode("utf-8") for value in values], dtype=np.object_).reshape(-1, 1))


def stack_requests(arrays: list) -> tuple[np.ndarray, list[int]]:
    """The requests' arrays as one batch (no copy for a single request), and each request's row count."""
    return (arrays[0] if len(arrays) == 1 else np.concatenate(arrays)), [len(array) for array in arrays]


def split_rows(batch, sizes: list[int]) -> list:
    """Undo the stacking of requests: the rows of ``batch`` back to each request, in order."""
    return np.split(batch, np.cumsum(sizes)[:-1])
