"""Many requests, one computation: stack the requests' rows, compute once, split the results back.

Pure numpy, so it is unit-tested without Triton; ``triton_step.answer_stacked`` wraps it in Triton's
requests and responses.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence

import numpy as np

Arrays = Mapping[str, np.ndarray]


def bytes_rows(values: Sequence[str | bytes]) -> np.ndarray:
    """n strings (UTF-8 encoded here) or bytes as the rows of a BYTES tensor, shape [n, 1]."""
    encoded = [value.encode("utf-8") if isinstance(value, str) else value for value in values]
    return np.array(encoded, dtype=np.object_).reshape(-1, 1)


class BatchContractError(RuntimeError):
    """A step's compute broke its contract: outputs other than those declared, or other row counts."""


def stack_requests(arrays: Sequence[np.ndarray]) -> np.ndarray:
    """The requests' arrays as one batch (no copy for a single request)."""
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)


def split_rows(batch: np.ndarray, sizes: Sequence[int]) -> list[np.ndarray]:
    """Undo the stacking of requests: the rows of ``batch`` back to each request, in order."""
    return np.split(batch, np.cumsum(sizes)[:-1])


def check_outputs(outputs: Arrays, declared: Collection[str], rows: int) -> None:
    """BatchContractError unless ``outputs`` holds exactly the ``declared`` names, each with ``rows`` rows.

    Without it, a misspelt output vanishes from the answer without a word, and an output with a row too
    few or too many shifts every later request's rows onto its neighbour's."""
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


def compute_stacked(
    requests: Sequence[Arrays],
    compute: Callable[[dict[str, np.ndarray]], Mapping[str, np.ndarray]],
    declared_outputs: Collection[str],
) -> list[dict[str, np.ndarray]]:
    """Each request's outputs, in order, from one ``compute`` over all requests' rows stacked input by
    input. ``declared_outputs``: the names the step's config declares (checked by ``check_outputs``)."""
    inputs = list(requests[0])
    stacked = {name: stack_requests([request[name] for request in requests]) for name in inputs}
    sizes = [len(request[inputs[0]]) for request in requests]
    outputs = compute(stacked)
    check_outputs(outputs, declared_outputs, sum(sizes))
    parts = {name: split_rows(np.asarray(array), sizes) for name, array in outputs.items()}
    return [{name: parts[name][index] for name in outputs} for index in range(len(requests))]
