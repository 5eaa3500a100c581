#!/usr/bin/env python3
"""``make overload``: offered load from 1x to 10x the measured capacity, through the API.

Starts tritonserver (default: model_repository/, the base stand-in that `make serve` serves) and the API with
its settings (FOOD11_API_* from the environment: its defaults) on free loopback ports; takes each photo's
answer alone (the truth); measures capacity as the throughput of a closed loop at the captioner's batch of 8;
then, for each level, sends single-photo uploads at ``level x capacity`` per second (evenly spaced arrivals,
open loop: callers do not wait for each other) for ``--seconds``. For each level: goodput (right answers per
second), refusals (503 with Retry-After) and how fast they came, p50/p99 of answered requests, hung requests
(no answer within the API's deadline plus 30 s), answers that are not their photo's, and server memory (PSS of
tritonserver, its stubs and the API) at the level's end. Then, the load gone, one more request.

Figures to ``benchmarks/results/overload.{json,md}``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

import httpx
import numpy as np

from food11_api.settings import ApiSettings
from pipeline_src import PROJECT_ROOT
from pipeline_src.profiling.load import latency_summary
from pipeline_src.profiling.memory import server_memory_mib
from pipeline_src.profiling.percentiles import percentile
from pipeline_src.profiling.photos import varied_photos
from pipeline_src.profiling.report import markdown_table
from pipeline_src.profiling.results import parse_benchmark_args, write_results
from pipeline_src.profiling.soak import PROBABILITY_TOLERANCE, drive_api, ground_truth
from pipeline_src.serving.launcher import TritonServer, free_port, free_ports
from pipeline_src.serving.serve import ApiProcess

SCRATCH = PROJECT_ROOT / "build" / "overload"
CAPACITY_CONCURRENCY = 8  # the captioner's best CPU batch here (benchmarks/results/captioner_speed.md)
HUNG_AFTER_S = 60 + 30  # the API's default deadline, plus a margin


class LoopLag:
    """How late this process's event loop wakes from a short sleep: the load generator's own delay, which is
    part of every latency it measures (it shares the machine's cores with the servers here)."""

    PERIOD_S = 0.005

    def __init__(self):
        self.lags_s: list[float] = []
        self._task: asyncio.Task | None = None

    async def _watch(self) -> None:
        while True:
            started = time.perf_counter()
            await asyncio.sleep(self.PERIOD_S)
            self.lags_s.append(time.perf_counter() - started - self.PERIOD_S)

    async def __aenter__(self) -> LoopLag:
        self._task = asyncio.ensure_future(self._watch())
        return self

    async def __aexit__(self, *exc_info) -> None:
        if self._task is not None:
            self._task.cancel()

    def summary(self) -> dict:
        lags_ms = np.asarray(self.lags_s or [0.0]) * 1000
        return {"generator_lag_p99_ms": percentile(lags_ms, 99), "generator_lag_max_ms": float(lags_ms.max())}


async def offered_load(api_url: str, photos: list[bytes], truth, rate: float, seconds: float) -> dict:
    """Uploads at ``rate`` per second for ``seconds``, each waited for on its own (open loop)."""
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
    outcomes: list[dict] = []
    async with httpx.AsyncClient(base_url=api_url, timeout=HUNG_AFTER_S, limits=limits) as http, LoopLag() as lag:

        async def one(index: int) -> None:
            photo = index % len(photos)
            started = time.perf_counter()
            try:
                response = await http.post("/caption", files={"photo": (f"{photo}.jpg", photos[photo], "image/jpeg")})
            except httpx.TimeoutException:
                outcomes.append({"status": "hung", "latency_s": time.perf_counter() - started})
                return
            outcome = {
                "status": response.status_code,
                "latency_s": time.perf_counter() - started,
                "retry_after": response.headers.get("retry-after"),
            }
            if response.status_code == 200:
                body, expected = response.json(), truth[photo]
                outcome["right"] = (
                    body["label"] == expected.label
                    and body["caption"] == expected.caption
                    and abs(body["probability"] - expected.probability) <= PROBABILITY_TOLERANCE
                )
            outcomes.append(outcome)

        tasks, started = [], time.perf_counter()
        count = max(1, round(rate * seconds))
        for index in range(count):
            await asyncio.sleep(max(0.0, started + index / rate - time.perf_counter()))
            tasks.append(asyncio.ensure_future(one(index)))
        await asyncio.gather(*tasks)
        wall_s = time.perf_counter() - started
    answered = [o for o in outcomes if o["status"] == 200]
    refused = [o for o in outcomes if o["status"] == 503]
    refusal_ms = np.asarray([o["latency_s"] for o in refused]) * 1000
    return {
        "sent": count,
        "offered_per_s": rate,
        "wall_s": wall_s,
        "answered": len(answered),
        "goodput_per_s": sum(o["right"] for o in answered) / seconds,
        "mismatched": sum(not o["right"] for o in answered),
        "refused": len(refused),
        "refused_without_retry_after": sum(o["retry_after"] is None for o in refused),
        "refusal_p99_ms": percentile(refusal_ms, 99) if len(refused) else None,
        "refusal_max_ms": float(refusal_ms.max()) if len(refused) else None,
        "hung": sum(o["status"] == "hung" for o in outcomes),
        "other": sum(o["status"] not in (200, 503, "hung") for o in outcomes),
        **lag.summary(),
        **(
            {
                f"answered_{key}": value
                for key, value in latency_summary([o["latency_s"] for o in answered], wall_s).items()
                if key.endswith("_ms")
            }
            if answered
            else {}
        ),
    }


async def measure(api_url: str, grpc_url: str, pids: tuple[int, int], levels: list[float], seconds: float) -> dict:
    """``pids``: tritonserver's (its stubs counted with it) and the API's."""
    photos = varied_photos(16)
    truth = await ground_truth(grpc_url, photos)
    await drive_api(api_url, photos, 2 * CAPACITY_CONCURRENCY, CAPACITY_CONCURRENCY, id_prefix="warm")
    started = time.perf_counter()
    closed = await drive_api(api_url, photos, 4 * CAPACITY_CONCURRENCY, CAPACITY_CONCURRENCY, id_prefix="capacity")
    capacity = len(closed) / (time.perf_counter() - started)
    at_capacity = latency_summary([outcome.latency_s for outcome in closed], 1.0)
    rows = []
    for level in levels:
        row = {"level": level, **await offered_load(api_url, photos, truth, level * capacity, seconds)}
        triton_mib, api_mib = (server_memory_mib(pid)["pss_mib"] for pid in pids)
        row.update(pss_mib=triton_mib + api_mib, triton_pss_mib=triton_mib, api_pss_mib=api_mib)
        rows.append(row)
        print(json.dumps(row), flush=True)
    started = time.perf_counter()
    after = await drive_api(api_url, photos, 1, 1, id_prefix="after")
    return {
        "capacity_per_s": capacity,
        "capacity_p50_ms": at_capacity["p50_ms"],
        "capacity_p99_ms": at_capacity["p99_ms"],
        "levels": rows,
        "after_status": after[0].status,
        "after_ms": (time.perf_counter() - started) * 1000,
    }


def markdown(result: dict) -> str:
    columns = [
        "offered (x capacity)",
        "sent",
        "answered",
        "goodput / capacity",
        "refused (503)",
        "refusal p99 (ms)",
        "slowest refusal (ms)",
        "load generator's slowest wake-up (ms)",
        "answered p50 (ms)",
        "answered p99 (ms)",
        "hung",
        "not their photo's",
        "server PSS (MiB): Triton + API",
    ]
    rows = [
        {
            "offered (x capacity)": f"{row['level']:g}x",
            "sent": row["sent"],
            "answered": row["answered"],
            "goodput / capacity": row["goodput_per_s"] / result["capacity_per_s"],
            "refused (503)": row["refused"],
            "refusal p99 (ms)": row["refusal_p99_ms"] if row["refusal_p99_ms"] is not None else "-",
            "slowest refusal (ms)": row["refusal_max_ms"] if row["refusal_max_ms"] is not None else "-",
            "load generator's slowest wake-up (ms)": row.get("generator_lag_max_ms", "-"),
            "answered p50 (ms)": row.get("answered_p50_ms", "-"),
            "answered p99 (ms)": row.get("answered_p99_ms", "-"),
            "hung": row["hung"],
            "not their photo's": row["mismatched"],
            "server PSS (MiB): Triton + API": f"{row['pss_mib']:.0f}: {row['triton_pss_mib']:.0f} + "
            "{row['api_pss_mib']:.0f}",
        }
        for row in result["levels"]
    ]
    return markdown_table(
        "Overload through the API",
        [
            f"Repository {result['repository']}; the API's settings but "
            f"FOOD11_API_MAX_IN_FLIGHT={result['api_max_in_flight']}.",
            f"Capacity (closed loop at concurrency {CAPACITY_CONCURRENCY}): {result['capacity_per_s']:.2f} photos/s, "
            f"p50 {result['capacity_p50_ms']:.0f} ms, p99 {result['capacity_p99_ms']:.0f} ms. Each level: "
            "evenly spaced "
            f"single-photo uploads at that multiple of capacity for {result['seconds']:.0f} s, each waited for "
            "on its own.",
            f"After the load: one request, HTTP {result['after_status']} in {result['after_ms']:.0f} ms.",
        ],
        columns,
        rows,
    )


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-repository", type=Path, default=PROJECT_ROOT / "model_repository")
    parser.add_argument("--levels", type=float, nargs="+", default=[1, 2, 5, 10])
    parser.add_argument("--seconds", type=float, default=30.0, help="per level (default: %(default)s)")
    parser.add_argument("--name", default="overload", help="result file names under benchmarks/results/")
    args = parse_benchmark_args(parser, argv)
    repository = args.model_repository.resolve()
    with TritonServer(repository, SCRATCH / "triton", free_ports(), log_file=SCRATCH / "tritonserver.log") as triton:
        api = ApiProcess("127.0.0.1", free_port(), triton.grpc_url)
        try:
            api.wait_until_alive()
            result = asyncio.run(
                measure(api.url, triton.grpc_url, (triton.pid, api.process.pid), args.levels, args.seconds)
            )
        finally:
            api.stop()
    result.update(
        repository=args.model_repository.name, seconds=args.seconds, api_max_in_flight=ApiSettings().max_in_flight
    )  # FOOD11_API_MAX_IN_FLIGHT, as the API reads it
    print(write_results(args.name, result, markdown(result)).read_text())


if __name__ == "__main__":
    main()
