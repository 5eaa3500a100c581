"""The one way a benchmark here reduces measurements to percentiles, so that a p99 means the same thing in
every results file: numpy's default method, linear between the two closest ranks (a median of an even count
is the mean of the middle two, as ``statistics.median``'s)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

Values = Sequence[float] | np.ndarray

LATENCY_PERCENTILES = (50, 95, 99)


def percentile(values: Values, q: float) -> float:
    """The ``q``-th percentile (0 to 100) of ``values`` (at least one)."""
    return float(np.percentile(np.asarray(values, dtype=float), q))


def percentiles_ms(values_ms: Values, qs: Sequence[float] = LATENCY_PERCENTILES, prefix: str = "") -> dict[str, float]:
    """``{prefix}p50_ms`` and the like, of measurements in milliseconds."""
    return {f"{prefix}p{q:g}_ms": percentile(values_ms, q) for q in qs}
