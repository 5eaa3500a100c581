"""Keep the servers serving: ``make serve``'s loop, and the Triton container's.

Once a second: a tritonserver that died is started again (its cause logged: the signal or exit status), as is
an API that died; the other keeps serving what it can meanwhile (the API answers 503 naming Triton while Triton
is down). A step whose stub died or stopped is healed by the watchdog (``watchdog``); a step whose files changed
is reloaded by the ``StepReloader``. More restarts in a row than ``RestartBudget`` allows, each soon after the
last (``DeathStreak``), is a crash loop: ``CrashLoop`` ends the loop with the reason, as ``NeedsAPerson`` does
for a step that keeps dying, so that a person is told rather than the crash hidden.

Where something else restarts this process (the Triton container: Compose's ``restart:``, Kubernetes), the
restart limit is 0: a server that dies ends the loop at once with its cause (``NotRestarted``), and the
orchestrator restarts the whole, with its own backoff.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from pipeline_src.serving.launcher import ApiProcess, TritonServer
from pipeline_src.serving.processes import TritonStartError
from pipeline_src.serving.stubs import zombie_children

Report = Callable[[str], None]


class CrashLoop(Exception):
    """A server died more often than its restart budget allows; the message says which, how often, why."""


class NotRestarted(Exception):
    """A server died under a restart limit of 0: whoever started this restarts it (the Triton container's
    orchestrator); the message says which and why."""


class Reloader(Protocol):
    def poll(self) -> bool: ...


class Watchdog(Protocol):
    """What heals a step whose stub died (``watchdog.StubWatchdog``)."""

    def baseline(self) -> None: ...

    def poll(self) -> None: ...


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


def reap_orphans(keep: set[int]) -> None:
    """Collect the zombie children this process never started: in a container it is process 1, and the stubs of a
    tritonserver that died become its children. ``keep``: the servers, whose Popen collects them."""
    for pid in zombie_children(os.getpid()):
        if pid not in keep:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)


def exit_cause(returncode: int | None) -> str:
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with status {returncode}"


@dataclass
class RestartBudget:
    """Restarts of one server: more than ``limit`` in a row, each soon after the last (``DeathStreak``), is a
    crash loop; a limit of 0, none at all."""

    what: str
    limit: int = 5
    now: Callable[[], float] = time.monotonic
    streak: DeathStreak = field(init=False)

    def __post_init__(self) -> None:
        self.streak = DeathStreak(self.limit, now=self.now)

    def spend(self, cause: str) -> int:
        """Count one restart (its number in the streak); CrashLoop when over the limit, NotRestarted when it is 0."""
        if self.limit == 0:
            raise NotRestarted(f"{self.what} {cause}; restart limit 0: not restarted here")
        count = self.streak.died()
        if self.streak.exceeded:
            raise CrashLoop(f"{self.streak.describe(self.what, cause)}: not restarting it again, it needs a person")
        return count

    def came_back(self) -> None:
        self.streak.came_back()


@dataclass
class Supervisor:
    server: TritonServer
    watchdog: Watchdog
    report: Report
    start_api: Callable[[], ApiProcess] | None = None  # None: Triton alone (the Triton container)
    reloader: Reloader | None = None
    ready_timeout_s: float = 600.0
    triton_budget: RestartBudget = field(default_factory=lambda: RestartBudget("tritonserver"))
    api_budget: RestartBudget = field(default_factory=lambda: RestartBudget("the API"))
    api: ApiProcess | None = None
    interval_s: float = 1.0

    def __post_init__(self) -> None:
        self.watchdog.baseline()  # at once: a stub that dies from here on is seen

    def run(self) -> None:
        """Until a stop signal's exception, CrashLoop, NotRestarted or NeedsAPerson propagates out of it."""
        while True:
            time.sleep(self.interval_s)
            self.step()

    def step(self) -> None:
        reap_orphans({process.pid for process in (self.server.process, self.api and self.api.process) if process})
        if not self.server.is_running:
            self.restart_triton()
            return
        if self.api is not None and self.api.process.poll() is not None:
            self.restart_api()
        if self.reloader is not None and self.reloader.poll():
            self.watchdog.baseline()  # a reload starts new stubs
        self.watchdog.poll()

    def restart_triton(self) -> None:
        assert self.server.process is not None
        returncode = self.server.process.returncode
        cause = exit_cause(returncode)
        # it said why, last thing (a signal leaves no last words); with its log in this output, just above
        if returncode is not None and returncode > 0 and not self.server.log_to_stdout:
            cause += " (its log ends: " + " | ".join(self.server.log_tail(2).splitlines())[-300:] + ")"
        count = self.triton_budget.spend(cause)
        self.report(
            f"supervisor: tritonserver {cause}; restarting it ({count} in a row of at most {self.triton_budget.limit})"
        )
        self.server.stop()  # its process group: stubs it left behind die too
        started = time.monotonic()
        try:
            self.server.start(self.ready_timeout_s)
        except TritonStartError as exc:
            self.report(f"supervisor: tritonserver did not start again: {exc}")
            return  # the next step finds it not running: another restart, within the budget
        self.watchdog.baseline()
        self.triton_budget.came_back()
        self.report(f"supervisor: tritonserver ready again in {time.monotonic() - started:.1f} s")

    def restart_api(self) -> None:
        assert self.api is not None and self.start_api is not None
        cause = exit_cause(self.api.process.poll())
        count = self.api_budget.spend(cause)
        self.report(f"supervisor: the API {cause}; restarting it ({count} in a row of at most {self.api_budget.limit})")
        started = time.monotonic()
        self.api = self.start_api()
        self.api_budget.came_back()
        self.report(f"supervisor: the API ready again in {time.monotonic() - started:.1f} s")
