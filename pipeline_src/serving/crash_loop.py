"""What a crash loop is, for the supervisor and the watchdog: deaths in quick succession, each within
``stable_s`` of coming back from the one before. A server or step that stays up that long starts afresh, so
independent faults (an OOM kill today, a crash tomorrow) never add up to a crash loop, while one that dies
again right after each restart does, after ``limit`` restarts."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class DeathStreak:
    limit: int
    stable_s: float = 60.0
    now: Callable[[], float] = time.monotonic
    count: int = 0  # deaths in a row
    back_at: float | None = None  # when it last came back (None: not since its last death)

    def died(self) -> int:
        """Count a death; how many in a row it makes."""
        if self.back_at is not None and self.now() - self.back_at >= self.stable_s:
            self.count = 0
        self.count += 1
        self.back_at = None
        return self.count

    @property
    def exceeded(self) -> bool:
        return self.count > self.limit

    def came_back(self) -> None:
        self.back_at = self.now()

    def describe(self, what: str, cause: str) -> str:
        return (
            f"{what} died {self.count} times in a row, each within {self.stable_s:.0f} s of coming back (last: {cause})"
        )
