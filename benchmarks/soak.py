#!/usr/bin/env python3
"""``make soak``: load and soak through the API on loopback, bounded in count (docs/reliability.md, "Load and
soak"): ``--requests`` uploads at ``--concurrency``, checked for zero failed, zero lost, every answer its own
photo's, and server memory growing under 10 % after warm-up. Exit status 1 if a check fails. Figures:
benchmarks/results/soak.{md,json}. By default it soaks the *tiny* BLIP stand-in, built once under build/soak/
(correctness under load, not speed); ``--model-repository model_repository`` soaks what ``make serve`` serves.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from benchmarks.lib.photos import varied_photos
from benchmarks.lib.results import benchmark_cli, parse_benchmark_args, portable_path, write_results
from benchmarks.lib.soak import soak
from pipeline_src import PROJECT_ROOT
from pipeline_src.model_build.cli import tiny_repository
from pipeline_src.profiling.report import markdown_table
from pipeline_src.serving.launcher import ApiProcess, TritonServer
from pipeline_src.serving.ports import free_port, free_ports

SCRATCH = PROJECT_ROOT / "build" / "soak"
MAX_MEMORY_GROWTH = 0.10


def parse_args(argv=None) -> argparse.Namespace:
    parser = benchmark_cli(__doc__, "soak")
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--photos", type=int, default=60, help="distinct photos: real ones, then crops and rescalings")
    parser.add_argument(
        "--model-repository",
        type=Path,
        help="default: a copy with the tiny BLIP stand-in, built once under build/soak/",
    )
    return parse_benchmark_args(parser, argv)


def markdown(result: dict) -> str:
    growth = f"{result['growth_last_over_first']:+.1%} (peak {result['growth_peak_over_first']:+.1%})"
    checks = [
        ("failed", 0, result["failed"]),
        ("lost (sent, not answered exactly once)", 0, result["lost"]),
        ("answers not matching their own photo (id, label, probability)", 0, result["mismatched"]),
        ("server PSS, last sample over first after warm-up", f"< {MAX_MEMORY_GROWTH:+.0%}", growth),
    ]
    paragraphs = [
        f"{result['repository']}.",
        f"After a warm-up of {result['warmup_requests']} requests, "
        f"{result['requests']} requests at concurrency {result['concurrency']} over {result['photos']} distinct "
        f"photos ({result['distinct_probabilities']} distinct probabilities) in {result['wall_s']:.0f} s: "
        f"{result['throughput']:.2f} req/s, latency p50 {result['p50_ms']:.0f} ms, p95 {result['p95_ms']:.0f} ms, "
        f"p99 {result['p99_ms']:.0f} ms. Server PSS (tritonserver, stubs, API) {result['pss_first_mib']:.0f} MiB "
        f"after warm-up, {result['pss_peak_mib']:.0f} MiB peak, {result['pss_last_mib']:.0f} MiB last "
        f"({len(result['memory_samples'])} samples).",
        "**All checks passed.**" if result["passed"] else "**FAILED**: " + "; ".join(result["examples"]),
    ]
    columns = ["check", "goal", "value"]
    return markdown_table("Soak through the API", paragraphs, columns, [dict(zip(columns, row)) for row in checks])


def main(argv=None) -> None:
    args = parse_args(argv)
    repository = (args.model_repository or tiny_repository(SCRATCH / "model_repository")).resolve()
    photos = varied_photos(args.photos)
    with TritonServer(repository, SCRATCH / "triton", free_ports(), log_file=SCRATCH / "tritonserver.log") as triton:
        # Every caller admitted (the limit pinned): the soak checks answers under load; refusing the excess
        # is make overload's.
        api = ApiProcess(
            "127.0.0.1", free_port(), triton.grpc_url, min_in_flight=args.concurrency, max_in_flight=args.concurrency
        )
        try:
            api.wait_until_alive()
            print(f"soaking: {args.requests} requests at concurrency {args.concurrency} through {api.url}", flush=True)
            pids = (triton.pid, api.process.pid)
            result = asyncio.run(soak(api.url, triton.grpc_url, photos, args.requests, args.concurrency, pids))
        finally:
            api.stop()
    result["passed"] = result["ok"] and result["growth_last_over_first"] < MAX_MEMORY_GROWTH
    tiny = "Default: tiny BLIP stand-in (correctness under load, not speed)"
    result["repository"] = f"Model repository {portable_path(args.model_repository)}" if args.model_repository else tiny
    print(write_results(args.name, result, markdown(result)).read_text())
    sys.exit(0 if result["passed"] else 1)


if __name__ == "__main__":
    main()
