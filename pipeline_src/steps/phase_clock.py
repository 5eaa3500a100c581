"""Where a step's time goes: seconds and runs per named phase, summed until someone takes them."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass(frozen=True)
class PhaseTotal:
    seconds: float
    runs: int


class PhaseClock:
    """Sums the wall time of each phase a step times (``with clock.timing("prefill"): ...``)."""

    def __init__(self) -> None:
        self._seconds: defaultdict[str, float] = defaultdict(float)
        self._runs: defaultdict[str, int] = defaultdict(int)

    @contextmanager
    def timing(self, phase: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self._seconds[phase] += time.perf_counter() - started
            self._runs[phase] += 1

    def count(self, phase: str, runs: int) -> None:
        """Runs without a time of their own: the rows a decoder step carried (``row_step``), say."""
        self._seconds[phase] += 0.0
        self._runs[phase] += runs

    def take(self) -> dict[str, PhaseTotal]:
        """The totals since the last take, then zero."""
        totals = {phase: PhaseTotal(self._seconds[phase], self._runs[phase]) for phase in self._runs}
        self._seconds.clear()
        self._runs.clear()
        return totals
