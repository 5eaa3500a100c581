#!/usr/bin/env python3
"""``make chaos``: faults injected into a running ``scripts/serve.py`` under load; does it heal itself?
(docs/reliability.md, "Chaos").

Uploads through the API without pause at ``--concurrency``, each with a client deadline and checked against its
own photo's answer, while faults of every kind (``--kinds``, ``--rounds`` of each) come in a seeded random order,
each after the last one's recovery and a quiet ``--gap``. Exit status 1 unless: 0 wrong, 0 unanswered, every
fault recovered within its limit (30 s for a stub, tritonserver's measured restart + 30 s, 10 s for the API),
serve.py running at the end and stopping on SIGINT with no process left over. Figures:
benchmarks/results/chaos.{md,json}.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import time
from pathlib import Path

import httpx

from benchmarks.lib.chaos_faults import KINDS, Burst, Injection, await_recovery, inject
from benchmarks.lib.chaos_report import fault_figures, in_window, kind_summary, markdown
from benchmarks.lib.chaos_serve import ECHOED, Served
from benchmarks.lib.load import OK, UNANSWERED, WRONG, Outcome, correct_since, ground_truth, run_load, upload
from benchmarks.lib.photos import varied_photos
from benchmarks.lib.results import RESULTS_DIR, benchmark_cli, parse_benchmark_args, portable_path, write_results
from food11_api.settings import ApiSettings
from pipeline_src import PROJECT_ROOT
from pipeline_src.serving.serve import STOPPED_STUB_NOTE

SCRATCH = PROJECT_ROOT / "build" / "chaos"


def parse_args(argv=None) -> argparse.Namespace:
    parser = benchmark_cli(__doc__, "chaos", repository=True)
    parser.add_argument("--rounds", type=int, default=3, help="faults of each kind (default: %(default)s)")
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS), metavar="KIND", help=", ".join(KINDS))
    parser.add_argument("--concurrency", type=int, default=3)
    parser.add_argument("--photos", type=int, default=12)
    parser.add_argument(
        "--api-deadline",
        type=float,
        default=ApiSettings().deadline_s,  # as the API reads it: FOOD11_API_DEADLINE_S, else its default
        help="the API's deadline, s (default: FOOD11_API_DEADLINE_S, else the API's own, %(default)s)",
    )
    parser.add_argument(
        "--deadline", type=float, default=75.0, help="client deadline, s: the API's deadline and time for its 504"
    )
    parser.add_argument("--retry-pause", type=float, default=0.5, help="a worker's pause after a request failed")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--warmup", type=float, default=10.0, help="seconds of load before the first fault")
    parser.add_argument("--gap", type=float, default=3.0, help="quiet seconds after a recovery")
    parser.add_argument("--cap", type=float, default=300.0, help="the longest wait for one fault's recovery, s")
    parser.add_argument("--burst-calls", type=int, default=20)
    parser.add_argument("--burst-timeout-ms", type=float, default=50.0)
    parser.add_argument(
        "--serve-arg", action="append", default=[], metavar="ARG", help="one more serve.py option (--serve-arg=--x=1)"
    )
    parser.add_argument("--ready-timeout", type=float, default=600.0, help="for serve.py's start, s")
    parser.add_argument("--scratch", type=Path, default=SCRATCH, help="serve.py's work dir and Triton's log")
    parser.add_argument("--output-dir", type=Path, default=RESULTS_DIR)
    args = parse_benchmark_args(parser, argv)
    if args.deadline <= args.api_deadline:
        parser.error("--deadline must outlast --api-deadline: a request the API ends at its deadline answers 504")
    return args


def schedule(kinds: list[str], rounds: int, rng: random.Random) -> list[tuple[str, int]]:
    """Every kind once a round, each round in a random order: (kind, its round number). A kind's faults are a
    round apart: independent faults, as in production, not the deaths in quick succession that the watchdog
    and the supervisor take for a crash loop."""
    order = []
    for round_ in range(1, rounds + 1):
        this_round = list(kinds)
        rng.shuffle(this_round)
        order += [(kind, round_) for kind in this_round]
    return order


async def run_faults(args, served: Served, photos: list[bytes]) -> tuple[list[Outcome], list[Injection], float]:
    """Uploads without pause, each with the client deadline, while the faults come in turn: every upload's
    outcome as it ends (the recovery waits read them), the injections, and when the load ended."""
    rng = random.Random(args.seed)
    truth = await ground_truth(served.grpc_url, photos)
    outcomes: list[Outcome] = []
    stop = asyncio.Event()
    limits = httpx.Limits(max_connections=args.concurrency, max_keepalive_connections=args.concurrency)
    # httpx's own timeout is a backstop only: the deadline bounds the whole request.
    http = httpx.AsyncClient(base_url=served.api_url, timeout=args.deadline + 30, limits=limits)

    async def call(index: int) -> Outcome:
        outcome = await upload(http, photos, truth, index, "chaos", args.deadline)
        if outcome.verdict != OK:
            await asyncio.sleep(args.retry_pause)  # as a client backing off would
        return outcome

    load_started = time.monotonic()
    running = asyncio.create_task(run_load(call, args.concurrency, stop=stop, into=outcomes))
    injections: list[Injection] = []
    try:
        await asyncio.sleep(args.warmup)
        while correct_since(outcomes, load_started) is None and time.monotonic() < load_started + args.cap:
            await asyncio.sleep(0.5)
        burst = Burst(args.burst_calls, args.burst_timeout_ms / 1000)
        for kind, round_ in schedule(args.kinds, args.rounds, rng):
            if served.ending:
                print(f"chaos: no more faults: {served.ending}", flush=True)
                break
            print(f"chaos: {kind}, round {round_}", flush=True)
            injection = await inject(kind, round_, served, rng, photos[0], burst)
            injections.append(injection)
            if injection.skipped:
                print(f"chaos: skipped: {injection.skipped}", flush=True)
                continue
            await await_recovery(injection, served, outcomes, args.cap, args.gap)
    finally:
        stop.set()
        try:
            await running
        finally:  # the client closed and every stopped stub resumed, however the load ended
            await http.aclose()
            for injection in injections:
                if injection.resume is not None:
                    await injection.resume
    return outcomes, injections, time.monotonic()


def summarize(args, outcomes: list[Outcome], injections: list[Injection], started: float, ended: float) -> dict:
    injected = [injection for injection in injections if not injection.skipped]
    ends = {id(i): end for i, end in zip(injected, [i.at for i in injected[1:]] + [ended + args.deadline])}
    faults = [
        fault_figures(i, in_window(outcomes, i.at, ends[id(i)]) if id(i) in ends else [], started) for i in injections
    ]
    before = in_window(outcomes, 0.0, injected[0].at if injected else ended + args.deadline)
    kinds = [kind_summary(kind, [f for f in faults if f["kind"] == kind]) for kind in args.kinds]
    verdicts = [o.verdict for o in outcomes]
    return {
        "repository": portable_path(args.repository.resolve()),
        "serve_args": ["--no-reload", *args.serve_arg],
        "concurrency": args.concurrency,
        "photos": args.photos,
        "deadline_s": args.deadline,
        "api_deadline_s": args.api_deadline,
        "retry_pause_s": args.retry_pause,
        "seed": args.seed,
        "rounds": args.rounds,
        "gap_s": args.gap,
        "requests": len(outcomes),
        "answered_correctly": verdicts.count(OK),
        "wrong": verdicts.count(WRONG),
        "unanswered": verdicts.count(UNANSWERED),
        "failed": len(outcomes) - verdicts.count(OK) - verdicts.count(WRONG) - verdicts.count(UNANSWERED),
        "not_correct_before_first_fault": sum(o.verdict != OK for o in before),
        "wall_s": ended - started,
        "faults": faults,
        "kinds": kinds,
        "examples": [f"{o.request_id}: {o.verdict} {o.failure} {o.detail}" for o in outcomes if o.verdict != OK][:20],
    }


def stopped_cleanly(stopped, served: Served) -> bool:
    noted = any(line.text.startswith(STOPPED_STUB_NOTE[:40]) for line in served.lines)
    return stopped.exit_code == 0 or (stopped.exit_code == 1 and noted)


def add_checks(result: dict, scheduled: int, stopped, served: Served) -> None:
    faults = result["faults"]
    injected = sum(not f["skipped"] for f in faults)
    recovered = sum(f["recovered"] for f in faults)
    checks = [
        ("answered wrongly (another photo's answer)", 0, result["wrong"]),
        ("unanswered within the client deadline", 0, result["unanswered"]),
        ("not answered correctly before the first fault", 0, result["not_correct_before_first_fault"]),
        ("faults injected", scheduled, injected),
        ("faults recovered within their limit", injected, recovered),
        ("serve.py running at the end", True, stopped.was_running),
        # 1 is a clean stop too when serve.py says why: Triton 2.51's unfinished unload after a stopped stub
        ("serve.py stopped on SIGINT (exit 0, or 1 with its note on that)", True, stopped_cleanly(stopped, served)),
        ("processes left over", 0, len(stopped.leftovers)),
    ]
    result["checks"] = [{"check": name, "goal": goal, "value": value} for name, goal, value in checks]
    result["failures"] = [f"{name}: {value} (goal {goal})" for name, goal, value in checks if value != goal]
    result["failures"] += [
        f"{f['kind']} round {f['round']}: recovered in {f['recovery_s']} s, limit {f['limit_s']} s"
        for f in faults
        if not f["recovered"] and not f["skipped"]
    ]
    result["passed"] = not result["failures"]


def main(argv=None) -> None:
    args = parse_args(argv)
    photos = varied_photos(args.photos)
    # The API's in-flight limit pinned to the concurrency, as make soak does: a refusal for capacity would count
    # as a fault's failure.
    pinned = str(args.concurrency)
    env = dict(os.environ, FOOD11_API_MIN_IN_FLIGHT=pinned, FOOD11_API_MAX_IN_FLIGHT=pinned)
    env["FOOD11_API_DEADLINE_S"] = str(args.api_deadline)
    served = Served(args.repository.resolve(), args.scratch.resolve(), ["--no-reload", *args.serve_arg], env)
    started = served.started
    try:
        served.wait_until_serving(args.ready_timeout)
        print(f"chaos: serve.py is serving ({served.api_url}); {args.rounds} round(s) of {len(args.kinds)} kinds")
        outcomes, injections, ended = asyncio.run(run_faults(args, served, photos))
    finally:
        stopped = served.stop()
    result = summarize(args, outcomes, injections, started, ended)
    result["serve_lines"] = [
        {"at_s": line.at - started, "text": line.text} for line in served.lines if line.text.startswith(ECHOED)
    ]
    result |= {"serve_exit_code": stopped.exit_code, "serve_running_at_end": stopped.was_running}
    result["leftovers"] = stopped.leftovers
    add_checks(result, args.rounds * len(args.kinds), stopped, served)
    print(write_results(args.name, result, markdown(result), directory=args.output_dir).read_text())
    sys.exit(0 if result["passed"] else 1)


if __name__ == "__main__":
    main()
