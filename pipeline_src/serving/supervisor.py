"""Keep the servers serving: ``make serve``'s loop, and the Triton container's (docs/reliability.md).

Once a second: a tritonserver or an API that died is started again, its cause logged; a step whose stub died is
healed (``watchdog``), one whose files changed reloaded (``reload``). Restarts in quick succession past the limit
are a crash loop (``CrashLoop``): a person is told rather than the crash hidden. Under a restart limit of 0 (the
Triton container) a death ends the loop at once (``NotRestarted``): the orchestrator restarts the whole.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from pipeline_src.serving.launcher import ApiProcess, TritonServer
from pipeline_src.serving.processes import TritonStartError
from pipeline_src.serving.stubs import zombie_children
from pipeline_src.serving.watchdog import DeathStreak, StubWatchdog

if TYPE_CHECKING:
    from pipeline_src.serving.reload import StepReloader
    from pipeline_src.serving.settings import ServeSettings

Report = Callable[[str], None]
T = TypeVar("T")


class CrashLoop(Exception):
    """A server died more often than its restart budget allows; the message says which, how often, why."""


class NotRestarted(Exception):
    """A server died under a restart limit of 0: whoever started this restarts it (the Triton container's
    orchestrator); the message says which and why."""


class StopRequested(Exception):
    """A stop signal arrived; raised in the main thread wherever it is, start-up included."""


def _stop_requested(signum, _frame):
    raise StopRequested(signal.Signals(signum).name)


def stop_on(signals: tuple[signal.Signals, ...]) -> None:
    for signum in signals:
        signal.signal(signum, _stop_requested)


def ignore(signals: tuple[signal.Signals, ...]) -> None:
    """While stopping: a second Ctrl-C must not interrupt the orderly shutdown with a traceback."""
    for signum in signals:
        signal.signal(signum, signal.SIG_IGN)


def report(line: str) -> None:
    print(line, flush=True)


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


class RestartBudget(DeathStreak):
    """Restarts of one server: more than ``limit`` in a row, each soon after the last (``DeathStreak``), is a
    crash loop; a limit of 0, none at all."""

    def __init__(self, what: str, limit: int = 5, now: Callable[[], float] = time.monotonic):
        super().__init__(limit, now=now)
        self.what = what

    def spend(self, cause: str) -> int:
        """Count one restart (its number in the streak); CrashLoop when over the limit, NotRestarted when it is 0."""
        if self.limit == 0:
            raise NotRestarted(f"{self.what} {cause}; restart limit 0: not restarted here")
        count = self.died()
        if self.exceeded:
            raise CrashLoop(f"{self.describe(self.what, cause)}: not restarting it again, it needs a person")
        return count


@dataclass
class Supervisor:
    """Keeps ``server`` (and the API, where ``start_api`` restarts it) serving as the serving settings say: their
    heal and restart limits, their ready timeout."""

    server: TritonServer
    settings: ServeSettings
    report: Report
    start_api: Callable[[], ApiProcess] | None = None  # None: Triton alone (the Triton container)
    reloader: StepReloader | None = None
    api: ApiProcess | None = None
    interval_s: float = 1.0
    watchdog: StubWatchdog = field(init=False)
    triton_budget: RestartBudget = field(init=False)
    api_budget: RestartBudget = field(init=False)

    def __post_init__(self) -> None:
        server, limit = self.server, self.settings.restart_limit
        self.watchdog = StubWatchdog(lambda: server.pid, server.repository_api, self.report, self.settings.heal_limit)
        self.triton_budget, self.api_budget = RestartBudget("tritonserver", limit), RestartBudget("the API", limit)
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
            assert self.start_api is not None
            self.api = self.restart(self.api_budget, exit_cause(self.api.process.poll()), self.start_api)
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

        def start_again() -> None:
            self.server.stop()  # its process group: stubs it left behind die too
            self.server.start(self.settings.ready_timeout)
            self.watchdog.baseline()

        try:
            self.restart(self.triton_budget, cause, start_again)
        except TritonStartError as exc:
            self.report(f"supervisor: tritonserver did not start again: {exc}")
            # the next step finds it not running: another restart, within the budget

    def restart(self, budget: RestartBudget, cause: str, start: Callable[[], T]) -> T:
        """Restart ``budget``'s server with ``start``, saying so; CrashLoop or NotRestarted past its limit."""
        count = budget.spend(cause)
        self.report(f"supervisor: {budget.what} {cause}; restarting it ({count} in a row of at most {budget.limit})")
        started = time.monotonic()
        started_again = start()
        budget.came_back()
        self.report(f"supervisor: {budget.what} ready again in {time.monotonic() - started:.1f} s")
        return started_again
