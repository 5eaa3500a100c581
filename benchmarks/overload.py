#!/usr/bin/env python3
"""``make overload``: offered load from 1x to 10x capacity through the API, on three machines made here
(docs/reliability.md, "Overload"): ``this`` (the base stand-in), ``slower`` (the same, the servers held to
``--slower-cpus`` of one CPU by a cgroup quota: needs root) and ``faster`` (the tiny stand-in), each with the
API's defaults. Capacity: the best closed-loop throughput straight to Triton within the API's deadline. Each
level: evenly spaced uploads (open loop) for ``--seconds``; then a step 10x -> 1x -> 10x. Reported: goodput,
refusals at the door and their speed, admitted requests that failed, latency, and the API's limit and how fast
it settled. Figures: ``benchmarks/results/overload.{json,md}`` (the markdown: benchmarks/overload_report.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import statistics
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np

from benchmarks.lib.cpu_quota import CpuQuota
from benchmarks.lib.load import FAILED, OK, ground_truth, judge, latency_summary, run_load, timed
from benchmarks.lib.memory import server_memory_mib
from benchmarks.lib.percentiles import percentile
from benchmarks.lib.photos import varied_photos
from benchmarks.lib.results import benchmark_cli, parse_benchmark_args, write_results
from benchmarks.overload_report import markdown
from food11_api.settings import ApiSettings
from food11_client import AsyncFood11Client
from pipeline_src import PROJECT_ROOT
from pipeline_src.model_build.cli import tiny_repository
from pipeline_src.serving.launcher import ApiProcess, TritonServer
from pipeline_src.serving.ports import free_port, free_ports

SCRATCH = PROJECT_ROOT / "build" / "overload"
CAPACITY_CONCURRENCIES = (2, 4, 8)
STEPS = ((10, "10x"), (1, "1x"), (10, "10x again"))
SAMPLE_EVERY_S = 0.5
DEADLINE_S = ApiSettings().deadline_s  # the API's default: every machine runs the defaults
REFUSED_AT_THE_DOOR = "over capacity: this API serves"  # the API's own refusal; Triton's says its step
# What the issue asks of every machine (docs/reliability.md, "Overload").
GOODPUT_SHARE, REFUSAL_MS, SETTLE_S = 0.9, 100.0, 30.0


@dataclass(frozen=True)
class Machine:
    name: str
    description: str
    cpus: float | None = None  # a CPU quota for the servers; None: the whole machine


@contextlib.asynccontextmanager
async def watching_the_limit(api_url: str) -> AsyncIterator[list[tuple[float, float, float]]]:
    """The API's admission gauges, sampled from /metrics while the block runs: (seconds since its start, limit,
    in flight)."""
    samples: list[tuple[float, float, float]] = []
    started = time.perf_counter()

    async def watch() -> None:
        async with httpx.AsyncClient(base_url=api_url, timeout=10) as http:
            while True:
                gauges = parse_gauges((await http.get("/metrics")).text)
                limit, in_flight = gauges["food11_admission_limit"], gauges["food11_requests_in_flight"]
                samples.append((time.perf_counter() - started, limit, in_flight))
                await asyncio.sleep(SAMPLE_EVERY_S)

    task = asyncio.ensure_future(watch())
    try:
        yield samples
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def server_timing_ms(header: str) -> float | None:
    """The API's own time for a request (``app;dur=``): what the load generator's latency adds to."""
    for part in header.split(","):
        name, _, duration = part.strip().partition(";dur=")
        if name == "app":
            return float(duration)
    return None


def parse_gauges(text: str) -> dict[str, float]:
    return {
        name: float(value)
        for name, _, value in (line.partition(" ") for line in text.splitlines() if not line.startswith("#"))
        if name.startswith("food11_")
    }


def settle_s(samples: list[tuple[float, float, float]], start: float, end: float) -> dict:
    """When the limit entered, for good, the band around where it ended the phase (the median of the phase's
    second half, +-20 % or +-1: the estimate moves with each batch's answers): seconds after the phase began."""
    phase = [(t, limit) for t, limit, _ in samples if start <= t < end]
    if not phase:
        return {"settled_limit": None, "settle_s": None}
    settled = statistics.median(limit for t, limit in phase if t >= (start + end) / 2)
    band = max(1.0, 0.2 * settled)
    entered = start
    for t, limit in phase:
        if abs(limit - settled) > band:
            entered = t + SAMPLE_EVERY_S  # out of the band: settled no earlier than the next sample
    return {"settled_limit": settled, "settle_s": min(entered, end) - start}


async def closed_loop(grpc_url: str, photos: list[bytes], concurrency: int, total: int) -> dict:
    """``total`` photos by ``concurrency`` callers straight to Triton, no deadline."""
    async with AsyncFood11Client(grpc_url) as client:
        latencies, wall = await run_load(lambda i: timed(client.caption([photos[i % len(photos)]])), concurrency, total)
    return {"concurrency": concurrency, **latency_summary(latencies, wall)}


async def capacity(grpc_url: str, photos: list[bytes]) -> dict:
    await closed_loop(grpc_url, photos, CAPACITY_CONCURRENCIES[0], CAPACITY_CONCURRENCIES[0])  # warm-up
    runs = [await closed_loop(grpc_url, photos, c, 2 * c) for c in CAPACITY_CONCURRENCIES]
    in_time = [run for run in runs if run["p99_ms"] <= DEADLINE_S * 1000] or runs[:1]
    best = max(in_time, key=lambda run: run["throughput"])
    return {"capacity_per_s": best["throughput"], "capacity_concurrency": best["concurrency"], "closed_loops": runs}


async def offered_load(api_url: str, photos, truth, schedule: list[tuple[float, float]]) -> tuple[list, list]:
    """Uploads at each (rate per second, seconds) of ``schedule`` in turn, each waited for on its own
    (open loop); returns every outcome (with its phase) and the limit samples."""
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
    outcomes: list[dict] = []
    async with (
        httpx.AsyncClient(base_url=api_url, timeout=DEADLINE_S + 30, limits=limits) as http,
        watching_the_limit(api_url) as samples,
    ):

        async def one(index: int, phase: int) -> None:
            photo = index % len(photos)
            started = time.perf_counter()
            outcome: dict = {"phase": phase}
            try:
                response = await http.post("/caption", files={"photo": (f"{photo}.jpg", photos[photo], "image/jpeg")})
            except httpx.TimeoutException:
                outcomes.append({**outcome, "kind": "hung", "latency_s": time.perf_counter() - started})
                return
            outcome.update(status=response.status_code, latency_s=time.perf_counter() - started)
            if response.status_code == 200:
                verdict, _, detail = judge(200, response.json(), "", "", truth[photo])  # sent without an X-Request-ID
                kinds = {OK: "answered", FAILED: "failed"}  # FAILED: its own label, told its caption failed
                outcome.update(kind=kinds.get(verdict, "wrong"), detail=detail)
            elif response.status_code == 503 and response.json()["detail"].startswith(REFUSED_AT_THE_DOOR):
                outcome.update(
                    kind="refused",
                    retry_after=response.headers.get("retry-after"),
                    server_ms=server_timing_ms(response.headers.get("server-timing", "")),
                )
            else:  # admitted, then refused by a Triton queue (503), or out of time (504), or anything else
                outcome.update(kind="failed", detail=response.text[:200])
            outcomes.append(outcome)

        tasks, index, phase_start = [], 0, time.perf_counter()
        for phase, (rate, seconds) in enumerate(schedule):
            count = max(1, round(rate * seconds))
            for n in range(count):
                await asyncio.sleep(max(0.0, phase_start + n / rate - time.perf_counter()))
                tasks.append(asyncio.ensure_future(one(index, phase)))
                index += 1
            phase_start += seconds
        await asyncio.gather(*tasks)
    return outcomes, samples


def summary(outcomes: list[dict], seconds: float, capacity_per_s: float) -> dict:
    by_kind = {
        kind: [o for o in outcomes if o["kind"] == kind] for kind in ("answered", "wrong", "refused", "failed", "hung")
    }
    refusal_ms = np.asarray([o["latency_s"] for o in by_kind["refused"]]) * 1000
    in_the_api_ms = np.asarray([o["server_ms"] for o in by_kind["refused"] if o["server_ms"] is not None])
    answered_ms = np.asarray([o["latency_s"] for o in by_kind["answered"]]) * 1000
    return {
        "sent": len(outcomes),
        "answered": len(by_kind["answered"]),
        "goodput_share": len(by_kind["answered"]) / seconds / capacity_per_s,
        "wrong": len(by_kind["wrong"]),
        "refused": len(by_kind["refused"]),
        "refused_without_retry_after": sum(o["retry_after"] is None for o in by_kind["refused"]),
        "retry_after_s": sorted({int(o["retry_after"]) for o in by_kind["refused"] if o["retry_after"]}),
        "refusal_p99_ms": percentile(refusal_ms, 99) if refusal_ms.size else None,
        "refusal_max_ms": float(refusal_ms.max()) if refusal_ms.size else None,
        "refusal_in_the_api_max_ms": float(in_the_api_ms.max()) if in_the_api_ms.size else None,
        "admitted_then_failed": len(by_kind["failed"]) + len(by_kind["hung"]),
        "failures": sorted({o.get("detail", "no answer") for o in by_kind["failed"] + by_kind["hung"]})[:3],
        "answered_p50_ms": percentile(answered_ms, 50) if answered_ms.size else None,
        "answered_p99_ms": percentile(answered_ms, 99) if answered_ms.size else None,
    }


def limit_seen(samples, start: float, end: float) -> dict:
    limits = [limit for t, limit, _ in samples if start <= t < end]
    return {"limit_min": min(limits, default=None), "limit_max": max(limits, default=None)}


async def sweep(api_url: str, pids: tuple[int, int], photos, truth, capacity_per_s, levels, seconds):
    rows = []
    for level in levels:
        outcomes, samples = await offered_load(api_url, photos, truth, [(level * capacity_per_s, seconds)])
        row = {"level": level, **summary(outcomes, seconds, capacity_per_s), **limit_seen(samples, 0, seconds)}
        row.update(settle_s(samples, 0, seconds), pss_mib=sum(server_memory_mib(pid)["pss_mib"] for pid in pids))
        rows.append(row)
        print(json.dumps(row), flush=True)
    schedule = [(level * capacity_per_s, seconds) for level, _ in STEPS]
    outcomes, samples = await offered_load(api_url, photos, truth, schedule)
    steps = []
    for phase, (_, label) in enumerate(STEPS):
        start, end = phase * seconds, (phase + 1) * seconds
        mine = [o for o in outcomes if o["phase"] == phase]
        row = {"phase": label, **summary(mine, seconds, capacity_per_s), **settle_s(samples, start, end)}
        steps.append(row | limit_seen(samples, start, end))
        print(json.dumps(steps[-1]), flush=True)
    return rows, steps, [list(sample) for sample in samples]


def checks(result: dict) -> dict[str, bool]:
    every = result["levels"] + result["steps"]
    return {
        "no admitted request refused or timed out": all(row["admitted_then_failed"] == 0 for row in every),
        f"goodput >= {GOODPUT_SHARE} x capacity at every level": all(
            row["goodput_share"] >= GOODPUT_SHARE for row in result["levels"]
        ),
        f"every refusal under {REFUSAL_MS:g} ms": all((row["refusal_max_ms"] or 0) < REFUSAL_MS for row in every),
        "answered p99 under the deadline": all((row["answered_p99_ms"] or 0) < DEADLINE_S * 1000 for row in every),
        "no wrong answer": all(row["wrong"] == 0 for row in every),
        f"the limit settles within {SETTLE_S:g} s of a step": all(
            row["settle_s"] is not None and row["settle_s"] <= SETTLE_S for row in result["steps"]
        ),
    }


def measure_machine(machine: Machine, repository: Path, levels, seconds) -> dict:
    work = SCRATCH / machine.name
    photos = varied_photos(8)
    with (
        TritonServer(repository, work / "triton", free_ports(), log_file=work / "tritonserver.log") as triton,
        contextlib.ExitStack() as stack,
    ):
        api = ApiProcess("127.0.0.1", free_port(), triton.grpc_url)
        stack.callback(api.stop)
        api.wait_until_alive()
        truth = asyncio.run(ground_truth(triton.grpc_url, photos))
        if machine.cpus is not None:
            quota = stack.enter_context(CpuQuota(machine.cpus))
            quota.hold(triton.pid)
            quota.hold(api.process.pid)
        measured = asyncio.run(capacity(triton.grpc_url, photos))
        print(json.dumps({"machine": machine.name, **measured}), flush=True)
        rows, steps, samples = asyncio.run(
            sweep(api.url, (triton.pid, api.process.pid), photos, truth, measured["capacity_per_s"], levels, seconds)
        )
    result = {"machine": machine.name, "description": machine.description, **measured}
    result.update(levels=rows, steps=steps, limit_samples=samples, seconds=seconds)
    result["checks"] = checks(result)
    return result


def main(argv=None) -> None:
    parser = benchmark_cli(__doc__, "overload")
    parser.add_argument(
        "--machines", nargs="+", choices=("this", "slower", "faster"), default=["this", "slower", "faster"]
    )
    parser.add_argument("--levels", type=float, nargs="+", default=[1, 2, 5, 10])
    parser.add_argument("--seconds", type=float, default=60.0, help="per level and per step (default: %(default)s)")
    parser.add_argument("--faster-seconds", type=float, default=30.0, help="the same on the faster machine")
    parser.add_argument(
        "--slower-cpus", type=float, default=0.6, help="the slower machine's CPU quota (default: %(default)s)"
    )
    args = parse_benchmark_args(parser, argv)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request otherwise
    base = PROJECT_ROOT / "model_repository"
    held = f"the same, servers held to {args.slower_cpus:g} of one CPU (cgroup quota)"
    machines = {
        "this": (Machine("this", "this machine, the base stand-in"), base, args.seconds),
        "slower": (Machine("slower", held, cpus=args.slower_cpus), base, args.seconds),
        "faster": (Machine("faster", "this machine, the tiny stand-in"), None, args.faster_seconds),
    }
    if "slower" in args.machines and (why := CpuQuota(args.slower_cpus).available()):
        parser.error(f"the slower machine needs a cgroup CPU quota: {why} (or leave it out: --machines this faster)")
    results = []
    for name in args.machines:
        machine, repository, seconds = machines[name]
        repository = repository or tiny_repository(SCRATCH / "tiny" / "model_repository")
        results.append(measure_machine(machine, repository, args.levels, seconds))
    settings = ApiSettings()
    result = {"machines": results, "deadline_s": settings.deadline_s, "latency_target": settings.latency_target}
    print(write_results(args.name, result, markdown(results, settings, CAPACITY_CONCURRENCIES)).read_text())


if __name__ == "__main__":
    main()
