"""The chaos run's faults: what each does to serve.py's processes, which serve.py line says it saw it and which
says it is healed, and the wait for recovery before the next one.

Kinds: ``stub-kill:<step>`` (SIGKILL of one instance's stub of that step, chosen at random), ``tritonserver-kill``
and ``api-kill`` (SIGKILL), ``stub-stop`` (SIGSTOP of a random step's stub, SIGCONT ``STOP_HOLD_S`` later) and
``grpc-cancel`` (a burst of gRPC calls straight to Triton, each cancelled by its client deadline while in flight:
Triton 2.51 may crash on it, docs/reliability.md, and the supervisor is then to restart it)."""

from __future__ import annotations

import asyncio
import random
import signal
import time
from collections import Counter
from dataclasses import dataclass, field

import psutil

from benchmarks.lib.chaos_serve import API, TRITONSERVER, Line, Served
from benchmarks.lib.load import Outcome, correct_since
from benchmarks.lib.triton_stats import STEPS
from pipeline_src.contract import ENSEMBLE

STUB_KILL = "stub-kill:"
TRITON_KILL, API_KILL, STUB_STOP, GRPC_CANCEL = "tritonserver-kill", "api-kill", "stub-stop", "grpc-cancel"
KINDS = (*(STUB_KILL + step for step in STEPS), TRITON_KILL, API_KILL, STUB_STOP, GRPC_CANCEL)
STOP_HOLD_S = 20.0
DETECT_WAIT_S = 15.0  # the watchdog and the supervisor look once a second: a fault unseen after this is missed
# A cancelled call crashes Triton 2.51 when its work ends inside Triton, seconds after the client gave up (3.6 s
# after a burst's start on the tiny stand-in): a crash is watched for this long after the burst, and until a
# request sent after the burst (queued behind its calls) was answered.
CANCEL_WATCH_S = 15.0
TRITON_DETECT, TRITON_HEALED = "supervisor: tritonserver ", "supervisor: tritonserver ready again in"
# A stub killed while it holds the lock on its shared memory with Triton can take tritonserver down with it: Triton
# 2.51's python backend then aborts (boost::interprocess::lock_exception, SIGABRT; now and then
# under load). The supervisor's restart of tritonserver is then what detects and heals the stub's fault.
TRITON_ABORT_NOTE = "the stub's death took tritonserver down (its log: boost::interprocess::lock_exception)"


@dataclass
class Burst:
    calls: int = 20
    timeout_s: float = 0.05


@dataclass
class Injection:
    kind: str
    round: int
    at: float  # time.monotonic() of the signal (of the burst's start)
    target: str = ""
    detect: tuple[str, ...] = ()  # fragments of serve.py's line saying it saw the fault
    heal: tuple[str, ...] = ()  # ... of its line saying the fault is healed
    detect_required: bool = True  # False for grpc-cancel: a crash may or may not follow
    quiet_from: float = 0.0  # grpc-cancel: when the burst's calls returned (their work goes on inside Triton)
    detected: Line | None = None
    healed: Line | None = None
    recovered: Outcome | None = None  # the first correct answer to a request sent after the heal
    timed_out: bool = False
    skipped: str = ""  # why nothing was injected
    notes: list[str] = field(default_factory=list)
    resume: asyncio.Task | None = None


def _stub_fault(kind: str, round_: int, served: Served, step: str, rng: random.Random, signum: int) -> Injection:
    stubs = sorted((s for s in served.stubs() if s.model == step and s.alive), key=lambda s: s.instance)
    if not stubs:
        return Injection(kind, round_, time.monotonic(), skipped=f"no live stub of {step}")
    stub = rng.choice(stubs)
    process = psutil.Process(stub.pid)
    at = time.monotonic()
    process.send_signal(signum)
    injection = Injection(
        kind,
        round_,
        at,
        target=f"{stub.instance} (pid {stub.pid}, 1 of {len(stubs)})",
        detect=(f"watchdog: {step}: ", "stub "),
        heal=(f"watchdog: {step}: healed in",),
    )
    if signum == signal.SIGSTOP:  # a stopped stub is sent SIGCONT STOP_HOLD_S later
        injection.target = f"{step}: {injection.target}"
        injection.resume = asyncio.create_task(_resume_later(process, injection))
    return injection


def _state(process: psutil.Process) -> str:
    """``stopped, child of 123``, or ``gone``: what became of the stopped stub."""
    try:
        with process.oneshot():
            return f"{process.status()}, child of {process.ppid()}"
    except psutil.NoSuchProcess:
        return "gone"


async def _resume_later(process: psutil.Process, injection: Injection) -> None:
    await asyncio.sleep(STOP_HOLD_S)
    before = _state(process)
    if before == "gone":
        injection.notes.append(f"SIGCONT after {STOP_HOLD_S:.0f} s: the stub was already gone (its unload ended it)")
        return
    try:
        process.resume()  # psutil refuses a pid reused by another process
    except psutil.NoSuchProcess:
        before = "gone at SIGCONT"
    await asyncio.sleep(3.0)
    injection.notes.append(
        f"SIGCONT after {STOP_HOLD_S:.0f} s: the stub was still there ({before}); 3 s later: {_state(process)}"
    )


async def _cancelled_burst(grpc_url: str, photo: bytes, burst: Burst) -> str:
    import tritonclient.grpc.aio as grpcclient_aio
    from tritonclient.utils import InferenceServerException

    from food11_client.wire import image_inputs, requested_outputs

    async with grpcclient_aio.InferenceServerClient(grpc_url) as client:

        async def one() -> str:
            try:
                await client.infer(
                    ENSEMBLE,
                    image_inputs(grpcclient_aio, [photo]),
                    outputs=requested_outputs(grpcclient_aio, ()),
                    client_timeout=burst.timeout_s,
                )
            except InferenceServerException as exc:
                return "cancelled" if "deadline" in str(exc).lower() else f"error ({str(exc)[:80]})"
            return "answered"

        ends = await asyncio.gather(*(one() for _ in range(burst.calls)))
    counts = ", ".join(f"{count} {end}" for end, count in sorted(Counter(ends).items()))
    return f"{burst.calls} calls, client deadline {burst.timeout_s * 1000:.0f} ms: {counts}"


async def inject(kind: str, round_: int, served: Served, rng: random.Random, photo: bytes, burst: Burst) -> Injection:
    served.snapshot()
    if kind.startswith(STUB_KILL):
        return _stub_fault(kind, round_, served, kind.removeprefix(STUB_KILL), rng, signal.SIGKILL)
    if kind == STUB_STOP:
        step = STEPS[(round_ * 5) % len(STEPS)]  # another step each round (5 and 6 share no factor)
        return _stub_fault(kind, round_, served, step, rng, signal.SIGSTOP)
    if kind in (TRITON_KILL, API_KILL):
        what, fragment = ("tritonserver", TRITONSERVER) if kind == TRITON_KILL else ("the API", API)
        process = served.child(fragment)
        if process is None:
            return Injection(kind, round_, time.monotonic(), skipped=f"no {what} process")
        at = time.monotonic()
        process.kill()
        healed = TRITON_HEALED if kind == TRITON_KILL else "supervisor: the API ready again in"
        return Injection(
            kind,
            round_,
            at,
            target=f"{what} (pid {process.pid})",
            detect=(f"supervisor: {what} killed by SIGKILL",),
            heal=(healed,),
        )
    if kind == GRPC_CANCEL:
        injection = Injection(
            kind,
            round_,
            time.monotonic(),
            target=f"tritonserver's gRPC {served.grpc_url}",
            detect=(TRITON_DETECT, "restarting it"),
            heal=(TRITON_HEALED,),
            detect_required=False,
        )
        injection.notes.append(await _cancelled_burst(served.grpc_url, photo, burst))
        injection.quiet_from = time.monotonic()
        return injection
    raise ValueError(f"unknown fault kind {kind!r}; known: {', '.join(KINDS)}")


def took_triton_down(injection: Injection, served: Served) -> None:
    """The killed stub took tritonserver down: its restart detects and heals the fault."""
    injection.detected = served.find(TRITON_DETECT, injection.at, "restarting it")
    if injection.detected is not None:
        injection.heal = (TRITON_HEALED,)
        injection.notes.append(TRITON_ABORT_NOTE)


async def await_recovery(
    injection: Injection, served: Served, outcomes: list[Outcome], cap_s: float, gap_s: float
) -> None:
    """Until serve.py has said it saw and healed the fault (where it says so), a request sent after that was
    answered correctly, the stopped stub was sent SIGCONT, and ``gap_s`` passed quietly; at most ``cap_s``.
    After a cancelled burst, a crash is watched for ``CANCEL_WATCH_S`` (and, should it come later, within the gap)."""
    deadline, settled_at = injection.at + cap_s, None
    while True:
        now = time.monotonic()
        if injection.detect and injection.detected is None:
            injection.detected = served.find(injection.detect[0], injection.at, *injection.detect[1:])
            if injection.detected is None and injection.kind.startswith(STUB_KILL):
                took_triton_down(injection, served)
        if injection.detected is not None and injection.healed is None:
            injection.healed = served.find(injection.heal[0], injection.detected.at, *injection.heal[1:])
        waiting_on_serve = injection.detected is not None and injection.healed is None
        if injection.detect and injection.detected is None:
            watch_until = (
                injection.at + DETECT_WAIT_S if injection.detect_required else injection.quiet_from + CANCEL_WATCH_S
            )
            waiting_on_serve = now < watch_until
        since = injection.healed.at if injection.healed else max(injection.at, injection.quiet_from)
        if injection.recovered is None or injection.recovered.sent < since:
            injection.recovered = None if waiting_on_serve else correct_since(outcomes, since)
        resumed = injection.resume is None or injection.resume.done()
        if injection.recovered is not None and resumed and not waiting_on_serve:
            settled_at = settled_at or now
            if now >= settled_at + gap_s:
                return
        else:
            settled_at = None  # a crash a burst caused late, within the gap: wait for its heal too
        if served.ending:
            injection.notes.append(f"serve.py ended: {served.ending}")
            return
        if now > deadline:
            injection.timed_out = True
            injection.notes.append(f"not recovered within the cap of {cap_s:.0f} s")
            if injection.resume is not None:
                await injection.resume
            return
        await asyncio.sleep(0.1)
