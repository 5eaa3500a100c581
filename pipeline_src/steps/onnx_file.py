"""A model file of yours as a step (``food11-new-step NAME --onnx FILE``): its ONNX Runtime session with any
number of inputs and outputs, run once for the stacked rows of many requests. Plain numpy and ONNX Runtime, so it
is unit-tested without Triton; ``onnx_file_step.OnnxFileStep`` is the Triton adapter around it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from pipeline_src.steps.batching import NUMPY_TYPES
from pipeline_src.steps.onnx_contract import ORT_TO_TRITON
from pipeline_src.steps.onnx_runtime import onnx_session

Arrays = Mapping[str, np.ndarray]


def numpy_type(ort_type: str) -> np.dtype | None:
    """The numpy type of an ONNX Runtime type string (``tensor(float)``), None for one numpy does not hold."""
    name = NUMPY_TYPES.get(ORT_TO_TRITON.get(ort_type, ""))
    return np.dtype(name) if name else None


def non_finite_problem(rows: np.ndarray) -> str | None:
    """The first row of a float input holding NaN or infinity, named; None for any other (or a clean) input."""
    if rows.dtype.kind != "f" or rows.ndim == 0:
        return None
    bad = ~np.isfinite(rows.reshape(len(rows), -1)).all(axis=1)
    if not bad.any():
        return None
    return f"row {int(np.argmax(bad)) + 1} of {len(rows)} holds NaN or infinity (the step's refuse_non_finite)"


def shape_groups(requests: Sequence[Arrays]) -> list[list[int]]:
    """The requests' indices grouped by the shape of one row of each input, in order of first arrival: only
    requests of one row shape stack (a config dim of -1 lets each request bring its own size)."""
    groups: dict[tuple, list[int]] = {}
    for index, arrays in enumerate(requests):
        key = tuple((name, np.shape(array)[1:]) for name, array in arrays.items())
        groups.setdefault(key, []).append(index)
    return list(groups.values())


class OnnxFileModel:
    """One ONNX file, every input fed and the ``outputs`` asked for (default: all the graph's). With
    ``batch_sizes`` (a GPU instance's ``gpu_batch_sizes``, for a batched step) a batch runs zero-padded to the
    smallest that holds it, on that size's own session, and a larger one in chunks of the largest: each session
    sees one shape (as ``onnx_runtime.OnnxModel``, for many inputs)."""

    def __init__(
        self,
        path: str | Path,
        on_gpu: bool = False,
        device_id: int = 0,
        intra_op_threads: int = 0,
        outputs: Sequence[str] = (),
        batch_sizes: Sequence[int] = (),
    ):
        self.batch_sizes = tuple(batch_sizes)
        # No CPU arena: one run per batch, so its activations are not worth keeping for good.
        self.sessions = {
            size: onnx_session(path, on_gpu, device_id, intra_op_threads, cpu_arena=False)
            for size in self.batch_sizes or (None,)
        }
        self.session = next(iter(self.sessions.values()))
        self.inputs = [arg.name for arg in self.session.get_inputs()]
        self.outputs = list(outputs) or [arg.name for arg in self.session.get_outputs()]

    @property
    def providers(self) -> list[str]:
        return self.session.get_providers()

    def __call__(self, batch: Arrays) -> dict[str, np.ndarray]:
        if not self.batch_sizes:
            return self._run(self.session, batch)
        rows, largest = len(next(iter(batch.values()))), self.batch_sizes[-1]
        if rows > largest:
            parts = [
                self({name: array[start : start + largest] for name, array in batch.items()})
                for start in range(0, rows, largest)
            ]
            return {name: np.concatenate([part[name] for part in parts]) for name in self.outputs}
        size = next(size for size in self.batch_sizes if size >= rows)
        padded = {name: _padded(array, size) for name, array in batch.items()}
        return {name: array[:rows] for name, array in self._run(self.sessions[size], padded).items()}

    def _run(self, session, batch: Arrays) -> dict[str, np.ndarray]:
        return dict(zip(self.outputs, session.run(self.outputs, {name: batch[name] for name in self.inputs})))

    def warm_up(self) -> None:
        """Each padded size's session runs once on zeros (its one-time setup for its shape, at load rather than at
        the first request), where every input's row shape is fixed."""
        rows = {arg.name: (arg.shape[1:], numpy_type(arg.type)) for arg in self.session.get_inputs()}
        if all(dtype is not None and all(isinstance(dim, int) for dim in shape) for shape, dtype in rows.values()):
            for size in self.batch_sizes:
                zeros = {name: np.zeros((size, *shape), dtype) for name, (shape, dtype) in rows.items()}
                self._run(self.sessions[size], zeros)


def _padded(array: np.ndarray, size: int) -> np.ndarray:
    """``array`` with zero rows appended up to ``size`` rows (the rows are independent: inference only)."""
    padded = np.zeros((size, *array.shape[1:]), array.dtype)
    padded[: len(array)] = array
    return padded
