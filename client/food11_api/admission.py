"""How many captioning requests the API lets in at once: a limit that follows the measured capacity.

Little's law on each answered request: one that was answered ``W`` seconds after it was let in, with ``n``
requests in flight on average meanwhile (itself included), saw the pipeline serve ``n / W`` requests a
second. That rate, smoothed over recent answers, times the latency target (a share of the deadline) is how
many requests can be in flight and still be answered within the target: the limit. No constant tuned on
one machine is involved, so the same defaults hold on a slow CPU, a busy one and a GPU; the configured
minimum and maximum are guard rails.

Why this rather than a gradient or AIMD limiter on latency alone (Netflix's concurrency-limits, Envoy's
adaptive concurrency): those look for the latency knee without knowing the deadline, and grow the limit one
step per sample, which is minutes on a CPU that answers every few seconds. Here the deadline is known, and
one answer is enough to place the limit near where it belongs. No maintained Python library implements
either (docs/reliability.md, "Overload").

Below the limit the pipeline answers as fast as requests come, so ``n / W`` is the arrival rate, not what
the pipeline can do: such an answer may raise the estimate, never lower it (a quiet minute must not shrink
the limit a burst then meets). Answers at the limit, and requests that ran into the deadline (``W`` is then
the deadline), move it both ways: the estimate falls as soon as the machine slows under load.

A request over the limit is refused at once, with ``Retry-After`` the time the requests in flight take to
drain at the measured rate.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Admitted:
    """A request let in: when, the in-flight count's integral over time until then, and the limit then."""

    at: float
    in_flight_seconds: float
    limit: int


# An answer whose average company filled this share of the limit it was let in under was served at the
# limit: it says what the pipeline can do.
AT_THE_LIMIT = 0.9


class AdaptiveLimit:
    """The limit and the in-flight count of one API process (one event loop: no lock needed).

    ``smoothing``: the weight of each new answer in the rate estimate (an exponentially weighted average);
    answers of one batch arrive together, so a batch moves the estimate most of the way.
    """

    def __init__(
        self,
        target_latency_s: float,
        min_limit: int,
        max_limit: int,
        smoothing: float = 0.25,
        clock: Callable[[], float] = time.monotonic,
    ):
        if not 1 <= min_limit <= max_limit:
            raise ValueError(f"need 1 <= min_limit <= max_limit, got {min_limit} and {max_limit}")
        self.target_latency_s = target_latency_s
        self.min_limit, self.max_limit = min_limit, max_limit
        self.smoothing = smoothing
        self.clock = clock
        self.in_flight = 0
        self.rate_per_s: float | None = None  # requests answered per second; None before the first answer
        # The integral of the in-flight count over time, to the last change: a request's average company.
        self._in_flight_seconds, self._changed_at = 0.0, clock()

    def _count(self, change: int) -> float:
        """Adds ``change`` to the in-flight count, the integral brought up to now first; returns now."""
        now = self.clock()
        self._in_flight_seconds += self.in_flight * (now - self._changed_at)
        self._changed_at = now
        self.in_flight += change
        return now

    @property
    def limit(self) -> int:
        """The guard rails' minimum until something was measured: the first requests find the rate."""
        if self.rate_per_s is None:
            return self.min_limit
        return max(self.min_limit, min(self.max_limit, math.floor(self.rate_per_s * self.target_latency_s)))

    def try_admit(self) -> Admitted | None:
        if self.in_flight >= self.limit:
            return None
        limit = self.limit
        now = self._count(+1)
        return Admitted(now, self._in_flight_seconds, limit)

    def finished(self, admitted: Admitted, answered: bool = False, out_of_time: bool = False) -> None:
        """``answered``, or ``out_of_time`` (it ran into the deadline); anything else (a bad photo refused
        in a millisecond, a disconnect) says nothing of the pipeline's speed."""
        now = self._count(-1)
        if not (answered or out_of_time):
            return
        seconds = max(now - admitted.at, 1e-6)
        company = max((self._in_flight_seconds - admitted.in_flight_seconds) / seconds, 1.0)  # itself, at least
        sample = company / seconds
        if self.rate_per_s is None:
            self.rate_per_s = sample
        elif out_of_time or company >= AT_THE_LIMIT * admitted.limit:
            self.rate_per_s += self.smoothing * (sample - self.rate_per_s)
        else:  # below the limit: the arrival rate, a floor of what the pipeline can do
            self.rate_per_s = max(self.rate_per_s, sample)

    def why_full(self) -> str:
        """Why a request is refused now, for its 503."""
        if self.rate_per_s is None:
            return f"this API serves {self.in_flight} requests, its limit until answers measure the pipeline's speed"
        return (
            f"this API serves {self.in_flight} requests, as many as it answers within "
            f"{self.target_latency_s:g} s at the measured {self.rate_per_s:.3g} per second"
        )

    def drain_s(self) -> float | None:
        """Seconds until the requests in flight are answered at the measured rate; None before any answer."""
        if self.rate_per_s is None:
            return None
        return self.in_flight / self.rate_per_s

    def retry_after_s(self, unmeasured: int) -> int:
        """A refusal's Retry-After: the drain time in whole seconds (at least 1), ``unmeasured`` before any
        answer."""
        drain_s = self.drain_s()
        return unmeasured if drain_s is None else max(1, math.ceil(drain_s))
