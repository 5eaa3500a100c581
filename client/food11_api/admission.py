"""How many captioning requests the API lets in at once: a limit that follows the measured capacity
(docs/reliability.md, "Overload": how it behaves, and why this rather than a gradient or AIMD library).

Little's law on the answered requests: the pipeline serves about ``mean(n) / mean(W)`` requests a second (``n``
the requests in flight when one was let in, itself included; ``W`` how long it took), and that rate times the
latency target (a share of the deadline) is the limit, between the configured minimum and maximum. A ratio of
averages, as the short waits of a batch inflate an average of ratios; ``n`` counted at admission, as counting
later arrivals reads a burst as speed. With caller keys (callers.py) a caller holds at most its share.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Admitted:
    """A request let in: when, how many were in flight then (itself included), and whose it is."""

    at: float
    in_flight: int
    caller: str | None = None


class AdaptiveLimit:
    """The limit and the in-flight count of one API process (one event loop: no lock needed).

    ``unmeasured_retry_after_s``: a refusal's Retry-After before the first answer.
    ``caller_share``: the share of the limit one caller may hold (requests with a caller's name only).
    ``smoothing``: the weight of each new answer in the two averages (exponentially weighted); answers of one
    batch arrive together, so a batch moves them most of the way.
    """

    def __init__(
        self,
        target_latency_s: float,
        min_limit: int,
        max_limit: int,
        unmeasured_retry_after_s: int,
        caller_share: float = 1.0,
        smoothing: float = 0.25,
        clock: Callable[[], float] = time.monotonic,
    ):
        if not 1 <= min_limit <= max_limit:
            raise ValueError(f"need 1 <= min_limit <= max_limit, got {min_limit} and {max_limit}")
        if not 0 < caller_share <= 1:
            raise ValueError(f"need 0 < caller_share <= 1, got {caller_share}")
        self.target_latency_s = target_latency_s
        self.min_limit, self.max_limit = min_limit, max_limit
        self.unmeasured_retry_after_s = unmeasured_retry_after_s
        self.smoothing = smoothing
        self.clock = clock
        self.caller_share = caller_share
        self.in_flight = 0
        self.in_flight_by_caller: Counter[str] = Counter()
        # The averages of answered requests' in-flight count at admission and latency (seconds); None
        # before the first answer.
        self._company: float | None = None
        self._latency_s: float | None = None

    @property
    def rate_per_s(self) -> float | None:
        """Requests answered per second, measured; None before the first answer."""
        if self._company is None or self._latency_s is None:
            return None
        return self._company / self._latency_s

    @property
    def limit(self) -> int:
        """The guard rails' minimum until something was measured: the first requests find the rate."""
        rate = self.rate_per_s
        if rate is None:
            return self.min_limit
        return max(self.min_limit, min(self.max_limit, math.floor(rate * self.target_latency_s)))

    @property
    def caller_limit(self) -> int:
        """How many requests one caller may have in flight: its share of the limit, at least one."""
        return max(1, math.floor(self.limit * self.caller_share))

    def caller_share_full(self, caller: str | None) -> bool:
        return caller is not None and self.in_flight_by_caller[caller] >= self.caller_limit

    def try_admit(self, caller: str | None = None) -> Admitted | None:
        """``caller``: the name of the key the request presented; None (keys off) counts against no share."""
        if self.in_flight >= self.limit or self.caller_share_full(caller):
            return None
        self.in_flight += 1
        if caller is not None:
            self.in_flight_by_caller[caller] += 1
        return Admitted(self.clock(), self.in_flight, caller)

    def finished(self, admitted: Admitted, answered: bool = False, out_of_time: bool = False) -> None:
        """``answered``, or ``out_of_time`` (it ran into the deadline); anything else (a bad photo refused
        in a millisecond, a disconnect) says nothing of the pipeline's speed."""
        self.in_flight -= 1
        if admitted.caller is not None:
            self.in_flight_by_caller[admitted.caller] -= 1
        if not (answered or out_of_time):
            return
        seconds, company = max(self.clock() - admitted.at, 1e-6), float(admitted.in_flight)
        if self._company is None or self._latency_s is None:
            self._company, self._latency_s = company, seconds
        else:
            self._company += self.smoothing * (company - self._company)
            self._latency_s += self.smoothing * (seconds - self._latency_s)

    def refused_by(self, caller: str | None = None) -> str:
        """What refuses ``caller``'s request now (the metric's ``by``): ``api``, the limit is full;
        ``caller_share``, only this caller's share of it."""
        return "caller_share" if self.in_flight < self.limit and self.caller_share_full(caller) else "api"

    def why_full(self, caller: str | None = None) -> str:
        """Why a request (of ``caller``) is refused now, for its 503."""
        if caller is not None and self.refused_by(caller) == "caller_share":
            return (
                f"this caller's share is full: {caller} has {self.in_flight_by_caller[caller]} requests in flight, "
                f"its share ({self.caller_share:g}) of this API's limit of {self.limit}"
            )
        rate = self.rate_per_s
        if rate is None:
            return f"this API serves {self.in_flight} requests, its limit until answers measure the pipeline's speed"
        return (
            f"this API serves {self.in_flight} requests, as many as it answers within "
            f"{self.target_latency_s:g} s at the measured {rate:.3g} per second"
        )

    def retry_after_s(self) -> int:
        """A refusal's Retry-After: the drain time, until the requests in flight are answered at the measured
        rate, in whole seconds (at least 1)."""
        rate = self.rate_per_s
        return self.unmeasured_retry_after_s if rate is None else max(1, math.ceil(self.in_flight / rate))
