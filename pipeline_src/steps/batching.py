"""Many requests, one computation: stack the requests' rows, compute once, split the results back; and for a
model file of yours as a step (``onnx_file_step``), which requests stack together and which inputs it refuses.

Pure numpy, so it is unit-tested without Triton; ``triton_step.answer_stacked`` wraps it in Triton's requests and
responses. ``Refused``: a request failed whole, by the steps that answer one request at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence

import numpy as np

Arrays = Mapping[str, np.ndarray]


def bytes_rows(values: Sequence[str | bytes]) -> np.ndarray:
    """n strings (UTF-8 encoded here) or bytes as the rows of a BYTES tensor, shape [n, 1]."""
    encoded = [value.encode("utf-8") if isinstance(value, str) else value for value in values]
    return np.array(encoded, dtype=np.object_).reshape(-1, 1)


class Refused(Exception):
    """A request failed whole, for a reason its caller can act on. ``code``: a ``pb_utils.TritonError`` code's name."""

    def __init__(self, message: str, code: str = "UNAVAILABLE"):
        super().__init__(message)
        self.code = code


class BatchContractError(RuntimeError):
    """A step's compute broke its contract: outputs other than those declared, other row counts or types."""


# The numpy type each config data_type travels as; BYTES (TYPE_STRING) as objects (bytes) or fixed-size bytes.
NUMPY_TYPES = {
    "TYPE_BOOL": "bool",
    **{f"TYPE_{kind.upper()}{bits}": f"{kind}{bits}" for kind in ("int", "uint") for bits in (8, 16, 32, 64)},
    **{f"TYPE_FP{bits}": f"float{bits}" for bits in (16, 32, 64)},
}
BYTES_KINDS = ("O", "S")  # numpy's kinds a TYPE_STRING output may have


def type_problem(name: str, array: np.ndarray, data_type: str) -> str | None:
    """What is wrong with ``array``'s numpy type as the output ``name`` its config declares ``data_type``."""
    dtype = np.asarray(array).dtype
    wanted = "bytes" if data_type == "TYPE_STRING" else NUMPY_TYPES.get(data_type)
    if wanted is None:
        return None  # a type numpy does not hold (TYPE_BF16): Triton itself checks it
    if dtype.kind in BYTES_KINDS if wanted == "bytes" else dtype == np.dtype(wanted):
        return None
    return f"output {name} is {dtype}, its config declares {data_type} ({wanted}): cast it in the step"


def check_outputs(outputs: Arrays, declared: Collection[str] | Mapping[str, str], rows: int) -> None:
    """BatchContractError unless ``outputs`` are exactly the ``declared`` names, ``rows`` rows each, in the declared
    data_type where given. Else a misspelt output vanishes silently, a row too many shifts later requests' rows onto
    their neighbours', and an int64 goes out as INT64 under an INT32 config (the backend sends the array's type)."""
    problems = []
    if undeclared := sorted(set(outputs) - set(declared)):
        problems.append(f"returned but not declared: {', '.join(undeclared)}")
    if missing := sorted(set(declared) - set(outputs)):
        problems.append(f"declared but not returned: {', '.join(missing)}")
    if problems:
        raise BatchContractError(f"outputs differ from the config's: {'; '.join(problems)}")
    for name, array in outputs.items():
        if np.ndim(array) == 0 or len(array) != rows:
            got = "a scalar" if np.ndim(array) == 0 else f"{len(array)} rows"
            raise BatchContractError(f"output {name} has {got} for {rows} input rows: one row per input row")
        if isinstance(declared, Mapping) and (problem := type_problem(name, array, declared[name])):
            raise BatchContractError(problem)


def compute_stacked(
    requests: Sequence[Arrays],
    compute: Callable[[dict[str, np.ndarray]], Mapping[str, np.ndarray]],
    declared_outputs: Collection[str] | Mapping[str, str],
) -> list[dict[str, np.ndarray]]:
    """Each request's outputs, in order, from one ``compute`` over all requests' rows stacked input by
    input. ``declared_outputs``: the names the step's config declares, with their data_type (``check_outputs``)."""
    inputs = list(requests[0])
    stacked = {  # no copy for a single request
        name: requests[0][name] if len(requests) == 1 else np.concatenate([request[name] for request in requests])
        for name in inputs
    }
    sizes = [len(request[inputs[0]]) for request in requests]
    outputs = compute(stacked)
    check_outputs(outputs, declared_outputs, sum(sizes))
    ends = np.cumsum(sizes)[:-1]  # each request's rows back to it, in order
    parts = {name: np.split(np.asarray(array), ends) for name, array in outputs.items()}
    return [{name: parts[name][index] for name in outputs} for index in range(len(requests))]


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
