"""Heal a step whose stub process died or stopped: unload and load it through Triton's repository API.

A pinned workaround, in ``make serve`` and the Triton container alike: Triton 2.51 (the nvidia-pytriton wheel) and
NVIDIA's 25.08 image neither restart a dead stub nor mark its model unready (docs/reliability.md, "What Triton does
with a dead stub", says what this does about it). When it can go: once the Triton that the wheel and the image pin
restarts a dead stub or reports its model not ready (python_backend's instance-readiness hook, r26.01, is the
candidate): the killed-stub test in tests/integration/test_faults.py, which asserts the model still reads ready,
then fails and says so. A load runs in a thread of its own, so the loop goes on watching the others meanwhile.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from pipeline_src.serving.repository_api import TritonRepositoryApi
from pipeline_src.serving.stubs import Stub, stubs_of

Report = Callable[[str], None]


class NeedsAPerson(Exception):
    """A model keeps dying: healing it again would hide the crash. The message says which and how often."""


@dataclass
class DeathStreak:
    """What a crash loop is, for the supervisor and the watchdog: deaths in quick succession, each within
    ``stable_s`` of coming back from the one before. A server or step that stays up that long starts afresh, so
    independent faults (an OOM kill today, a crash tomorrow) never add up to a crash loop, while one that dies
    again right after each restart does, after ``limit`` restarts."""

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


@dataclass
class _Heal:
    model: str
    detected_at: float
    load_at: float  # when the load may start (the backoff)
    loading: Future | None = None


@dataclass
class StubWatchdog:
    server_pid: Callable[[], int]
    triton: TritonRepositoryApi
    report: Report
    # A crash loop is more than max_heals deaths of one model in a row, each soon after its last heal (DeathStreak).
    max_heals: int = 3
    backoff_s: tuple[float, ...] = (0.0, 5.0, 15.0)  # before the load after the 1st, 2nd, 3rd, ... death in a row
    now: Callable[[], float] = time.monotonic
    expected: dict[str, set[str]] = field(default_factory=dict)  # model -> its instances' names, when healthy
    streaks: dict[str, DeathStreak] = field(default_factory=dict)
    healing: dict[str, _Heal] = field(default_factory=dict)
    stopped_stubs_killed: int = 0  # Triton 2.51 never finishes unloading their version (serve.py says so at exit)
    _loads: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(max_workers=2))

    def baseline(self) -> None:
        """Take the stubs as they are now as the healthy set: after Triton (re)started or a model reloaded."""
        self.expected = {}
        for stub in stubs_of(self.server_pid()):
            if stub.alive:
                self.expected.setdefault(stub.model, set()).add(stub.instance)

    def poll(self) -> None:
        """One look: start healing what died, start the loads whose backoff is over, finish those done.
        Raises NeedsAPerson when a model dies too often."""
        by_model: dict[str, dict[str, Stub]] = {}
        for stub in stubs_of(self.server_pid()):
            by_model.setdefault(stub.model, {})[stub.instance] = stub
        for model, instances in self.expected.items():
            if model in self.healing:
                continue
            present = by_model.get(model, {})
            gone = [f"stub {name} gone" for name in sorted(instances - present.keys())]
            down = [stub for stub in present.values() if not stub.alive]
            stopped = [f"stub {s.instance} (pid {s.pid}) {'stopped' if s.state in 'Tt' else 'dead'}" for s in down]
            for stub in down:
                self.stopped_stubs_killed += stub.state in "Tt"
                # Triton's unload waits on a stopped stub that has work; a dead one it skips
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(stub.pid, signal.SIGKILL)
            if gone or down:
                self._start_heal(model, "; ".join(gone + sorted(stopped)))
        for heal in list(self.healing.values()):
            self._advance(heal)

    def _start_heal(self, model: str, cause: str) -> None:
        now = self.now()
        streak = self.streaks.setdefault(model, DeathStreak(self.max_heals, now=self.now))
        count = streak.died()
        unloaded = self.triton.unload(model)  # at once: readiness turns false
        if streak.exceeded:
            raise NeedsAPerson(
                f"{streak.describe(model, cause)}; left unloaded"
                + (f" (unload failed: {unloaded})" if unloaded else "")
                + ": it needs a person (Triton's log says more)"
            )
        wait = self.backoff_s[min(count - 1, len(self.backoff_s) - 1)]
        self.report(
            f"watchdog: {model}: {cause}: unloaded{f' (unload: {unloaded})' if unloaded else ''}, loading it again"
            f"{f' in {wait:.0f} s' if wait else ''} (death {count} in a row of at most {self.max_heals})"
        )
        self.healing[model] = _Heal(model, now, now + wait)

    def _advance(self, heal: _Heal) -> None:
        if heal.loading is None:
            if self.now() >= heal.load_at:
                heal.loading = self._loads.submit(self.triton.load, heal.model)
            return
        if not heal.loading.done():
            return
        del self.healing[heal.model]
        reason = heal.loading.result()
        seconds = self.now() - heal.detected_at
        if reason is None:
            self.streaks[heal.model].came_back()
            self.report(f"watchdog: {heal.model}: healed in {seconds:.1f} s")
            live = {s.instance for s in stubs_of(self.server_pid()) if s.model == heal.model and s.alive}
            self.expected[heal.model] = live or self.expected.get(heal.model, set())
        else:
            # Counted as another death: the next poll finds it unhealthy (not loaded: its stubs are gone).
            self.report(f"watchdog: {heal.model}: load failed after {seconds:.1f} s: {reason}")

    def close(self) -> None:
        self._loads.shutdown(wait=False, cancel_futures=True)
