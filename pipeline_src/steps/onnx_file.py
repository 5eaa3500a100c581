"""A model file of yours as a step (``food11-new-step NAME --onnx FILE``): what its Triton adapter
(``onnx_file_step.OnnxFileStep``) does beside running ``onnx_runtime.OnnxFileModel``, in plain numpy, so it is
unit-tested without Triton: which requests stack together, and which inputs it refuses."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

Arrays = Mapping[str, np.ndarray]


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
