#!/usr/bin/env python3
"""``make bench``: the pipeline profiled with perf_analyzer and measured against its baselines, in one run
(docs/performance.md, "Reading make bench's report"):

1. perf_analyzer on the ensemble and each step alone over concurrency levels, with Triton's per-step statistics.
2. The product's HTTP API against baseline (a), the course's one-process FastAPI server, by one load generator.
3. Baseline (b), the limit: the same steps in-process, no server, at the best batch size and, in alternating
   rounds, against the ensemble at concurrency 8; beside each throughput, the CPU seconds an image took.

Same model files, photos and configuration as ``make serve``. Writes CSV, JSON, markdown and PNG plots under
benchmarks/results/ (``--name``). Nothing is asserted: each target is reported met or missed. Memory under
sustained load is ``make soak``'s (``--model-repository model_repository`` for the served stand-in).
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import functools
import json
import subprocess
import sys
import time
from pathlib import Path

import httpx

from benchmarks.lib.in_process import InProcessPipeline, best_seconds, blip_description
from benchmarks.lib.load import latency_summary, run_load
from benchmarks.lib.memory import server_cpu_seconds, server_memory_mib
from benchmarks.lib.photos import varied_photos
from benchmarks.lib.plots import latency_plot, step_split_plot, throughput_plot
from benchmarks.lib.results import RESULTS_DIR, benchmark_cli, collect_provenance, parse_benchmark_args, write_results
from benchmarks.lib.triton_stats import STEPS, figures_since, model_counters, snapshot
from food11_client import AsyncFood11Client
from pipeline_src import PROJECT_ROOT
from pipeline_src.contract import ENSEMBLE
from pipeline_src.profiling import perf_analyzer
from pipeline_src.profiling.perf_input import write_input_data
from pipeline_src.profiling.report import markdown_table
from pipeline_src.repository.bls_calls import bls_callees
from pipeline_src.serving.launcher import ApiProcess, TritonServer
from pipeline_src.serving.ports import free_port, free_ports
from pipeline_src.serving.processes import wait_for_http

# The in-process baseline is the best of three runs: one run is a few seconds, and a shared VM's speed moves by 10 %
# from one to the next.
OFFLINE_REPEATS = 3


def parse_args(argv=None) -> argparse.Namespace:
    parser = benchmark_cli(__doc__, "bench", repository=True)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    parser.add_argument("--models", nargs="+", default=[ENSEMBLE, *STEPS])
    parser.add_argument("--photos", type=int, default=12, help="distinct photos in the input data")
    parser.add_argument(
        "--window",
        type=int,
        default=16,
        help="perf_analyzer requests per count window (at least the concurrency is used)",
    )
    parser.add_argument(
        "--compare-concurrency",
        type=int,
        nargs="+",
        default=[1, 8],
        help="levels at which the API and baseline (a) are driven",
    )
    parser.add_argument("--compare-requests", type=int, default=24, help="requests per path and level")
    parser.add_argument(
        "--triton-arg",
        action="append",
        default=[],
        help="one more tritonserver flag, e.g. --triton-arg=--rate-limit=off to measure without the shipped "
        "core sharing (repeatable)",
    )
    parser.add_argument(
        "--limit-rounds",
        type=int,
        default=3,
        help="alternating rounds of the ensemble at concurrency 8 and the in-process steps at batch 8 (0: none)",
    )
    return parse_benchmark_args(parser, argv)


def perf_sweep(triton: TritonServer, input_files: dict[str, Path], args, scratch: Path) -> tuple[list, list]:
    """perf_analyzer over every model and level: measurement rows, and the ensemble's per-step splits."""
    rows, splits = [], []
    for model in args.models:
        for concurrency in args.concurrency:
            rows.append(measure_served(triton, model, concurrency, input_files, args, scratch))
            if model == ENSEMBLE and "throughput" in rows[-1]:
                splits.append({"concurrency": concurrency, "steps": step_split(rows[-1])})
    return rows, splits


def measure_served(
    triton: TritonServer, model: str, concurrency: int, input_files: dict[str, Path], args, scratch
) -> dict:
    """One stable perf_analyzer measurement with Triton's statistics over it (or the error that stopped it)."""
    before, cpu_before = snapshot(triton), server_cpu_seconds(triton.pid)
    try:
        measurement, stability = perf_analyzer.measure_stably(
            model,
            triton.grpc_url,
            input_files[model],
            concurrency,
            scratch / f"{model}_{concurrency}.csv",
            max(args.window, concurrency),
            bls_composing=bls_callees(args.repository, model) if model == ENSEMBLE else (),
        )
    except perf_analyzer.PerfAnalyzerFailed as exc:
        print(exc, file=sys.stderr, flush=True)
        return {"model": model, "concurrency": concurrency, "error": str(exc).splitlines()[-1]}
    row = {**measurement.__dict__, "stability_percentage": stability, **figures_since(triton, before)}
    images = model_counters(triton.grpc_url)[model].inferences - before.counters[model].inferences
    # CPU seconds of tritonserver and its stubs per image (perf_analyzer's own excluded): what the served
    # path spends on an image, whatever the machine's speed at the moment.
    row["cpu_s_per_image"] = (server_cpu_seconds(triton.pid) - cpu_before) / images if images else None
    print(json.dumps(row), flush=True)
    return row


def alternating_limit(triton: TritonServer, input_files: dict[str, Path], args, scratch, photos) -> list[dict]:
    """The ensemble served at concurrency 8 (one stable perf_analyzer measurement: its windows' mean) and the same
    steps in-process at batch 8 (the mean of two batches), in alternating rounds: a shared VM's speed drifts by up
    to 10 % over minutes, and alternating puts the drift on both sides alike; the order flips every round (served
    first, then in-process first), so that a steady drift does too. The in-process pipeline runs while the server
    idles."""
    if args.limit_rounds <= 0:
        return []
    pipeline = InProcessPipeline(args.repository)
    batch = [photos[i % len(photos)] for i in range(8)]
    pipeline(batch)  # lazy initialisation, not measured

    def in_process() -> dict:
        cpu, wall = time.process_time(), time.perf_counter()  # this process's CPU seconds, every thread's
        for _ in range(2):
            pipeline(batch)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        return {"in_process_img_per_s": 2 * len(batch) / wall, "in_process_cpu_s_per_image": cpu / (2 * len(batch))}

    rounds: list[dict] = []
    for index in range(args.limit_rounds):
        first = in_process() if index % 2 else {}
        row = measure_served(triton, ENSEMBLE, 8, input_files, args, scratch)
        if "throughput" not in row:
            break
        alone = first or in_process()
        served_figures = {"served_img_per_s": row["throughput"], "served_cpu_s_per_image": row["cpu_s_per_image"]}
        rounds.append({"round": index + 1, "first": "in-process" if first else "served", **served_figures, **alone})
        print(json.dumps(rounds[-1]), flush=True)
    return rounds


def step_split(row: dict) -> dict:
    """Each step's own queue and compute time per ensemble request. The BLS step's compute includes its
    wait on the captioner, which is the captioner's queue and compute: subtracted, so nothing counts twice."""
    split = {
        step: {"queue_ms": row.get(f"{step}_queue_ms", 0.0), "compute_ms": row.get(f"{step}_compute_ms", 0.0)}
        for step in STEPS
    }
    captioner = split["captioner"]["queue_ms"] + split["captioner"]["compute_ms"]
    split["caption_with_label"]["compute_ms"] = max(0.0, split["caption_with_label"]["compute_ms"] - captioner)
    return split


async def drive_http(url: str, photos: list[bytes], levels: list[int], total: int) -> list[dict]:
    """POST /caption from ``len(levels)`` runs of the shared load generator."""
    rows = []
    async with httpx.AsyncClient(base_url=url, timeout=900) as http:

        async def call(index: int) -> float:
            photo = photos[index % len(photos)]
            started = time.perf_counter()
            response = await http.post("/caption", files={"photo": ("photo.jpg", photo, "image/jpeg")})
            response.raise_for_status()
            return time.perf_counter() - started

        await run_load(call, 2, 2)  # warm-up
        for concurrency in levels:
            latencies, wall = await run_load(call, concurrency, max(total, concurrency))
            rows.append({"concurrency": concurrency, **latency_summary(latencies, wall)})
            print(json.dumps(rows[-1]), flush=True)
    return rows


def course_baseline(repository: Path, photos: list[bytes], args) -> list[dict]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.lib.course_server", "--repository", str(repository), "--port", str(port)]
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_http(process, f"{url}/healthz", 300, "the course-style server")
        return asyncio.run(drive_http(url, photos, args.compare_concurrency, args.compare_requests))
    finally:
        process.terminate()
        process.wait(30)


def offline_limit(repository: Path, photos: list[bytes], batches=(1, 2, 4, 8, 16)) -> dict:
    """Baseline (b): the steps in-process, no server, in the server's configuration."""
    pipeline = InProcessPipeline(repository)
    step_ms = {step: seconds * 1000 for step, seconds in pipeline.step_seconds(photos[0]).items()}
    print(json.dumps({"step_ms_batch_1": step_ms}), flush=True)
    throughput, cpu = {}, {}
    for batch in batches:
        chosen = [photos[i % len(photos)] for i in range(batch)]
        started = time.process_time()
        throughput[batch] = batch / best_seconds(functools.partial(pipeline, chosen), repeats=OFFLINE_REPEATS)
        runs = 1 + OFFLINE_REPEATS  # best_seconds' warm-up run, then the timed ones
        cpu[batch] = (time.process_time() - started) / (runs * batch)
        print(json.dumps({"offline_batch": batch, "img_per_s": throughput[batch], "cpu_s": cpu[batch]}), flush=True)
    best = max(throughput, key=lambda batch: throughput[batch])
    return {
        "step_ms_batch_1": step_ms,
        "sum_step_ms_batch_1": sum(step_ms.values()),
        "img_per_s_by_batch": throughput,
        "cpu_s_per_image_by_batch": cpu,
        "best_batch": best,
        "best_img_per_s": throughput[best],
        "captioner_precision": pipeline.captioner.precision,
    }


def check(target: str, goal: str, value: float, met: bool) -> dict:
    return {"target": target, "goal": goal, "value": value, "met": met}


def targets(
    rows: list[dict], api: list[dict], course: list[dict], offline: dict, limit_rounds: list[dict]
) -> list[dict]:
    def at(table: list[dict], concurrency: int) -> dict:
        return next((r for r in table if r["concurrency"] == concurrency), {})

    ensemble = [r for r in rows if r["model"] == ENSEMBLE and "throughput" in r]  # its measured rows
    checks = []
    if at(ensemble, 1):
        ratio = at(ensemble, 1)["p50_ms"] / offline["sum_step_ms_batch_1"]
        target = "orchestration: ensemble p50 at c=1 / sum of in-process steps at batch 1"
        checks.append(check(target, "<= 1.10", ratio, ratio <= 1.10))
    for concurrency in (8, 16):
        if at(ensemble, concurrency):
            ratio = at(ensemble, concurrency)["throughput"] / offline["best_img_per_s"]
            target = f"limit: ensemble throughput at c={concurrency} / offline best batch"
            checks.append(check(target, ">= 0.90", ratio, ratio >= 0.9))
    if limit_rounds:
        # Ratios of the rounds' sums: each round's served and in-process figures are minutes apart at most.
        def total(key: str) -> float:
            return sum(r[key] for r in limit_rounds)

        ratio = total("served_img_per_s") / total("in_process_img_per_s")
        target = f"limit: ensemble throughput at c=8 / in-process at batch 8 ({len(limit_rounds)} alternating rounds)"
        checks.append(check(target, ">= 0.95", ratio, ratio >= 0.95))
        if all(r["served_cpu_s_per_image"] is not None for r in limit_rounds):  # None: a window with no image
            ratio = total("in_process_cpu_s_per_image") / total("served_cpu_s_per_image")
            target = "limit: CPU seconds per image, in-process at batch 8 / served at c=8 (the same rounds)"
            checks.append(check(target, ">= 0.95", ratio, ratio >= 0.95))
    if at(ensemble, 8) and at(ensemble, 1):
        ratio = at(ensemble, 8)["throughput"] / at(ensemble, 1)["throughput"]
        checks.append(check("scaling: ensemble throughput at c=8 / at c=1", ">= 1", ratio, ratio >= 1))
    if at(api, 8) and at(course, 8):
        ratio = at(api, 8)["throughput"] / at(course, 8)["throughput"]
        checks.append(check("product API / course server throughput at c=8", ">= 2", ratio, ratio >= 2))
        ratio = at(api, 8)["p95_ms"] / at(course, 8)["p95_ms"]
        checks.append(check("product API p95 / course server p95 at c=8", "< 1", ratio, ratio < 1))
    return checks


def write_csv(path: Path, rows: list[dict]) -> None:
    columns = list(dict.fromkeys(key for row in rows for key in row))
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, columns)
        writer.writeheader()
        writer.writerows(rows)


def write_bench_results(name: str, result: dict) -> Path:
    """JSON and markdown through the shared writer; beside them the CSV and the plots, which name the commit."""
    provenance = collect_provenance()
    commit = provenance.commit + ("" if provenance.clean else " (DIRTY TREE)")
    subtitle = f"{result['blip']}, commit {commit}\n{provenance.machine}"
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    write_csv(RESULTS_DIR / f"{name}.csv", result["perf_analyzer"])
    measured = [row for row in result["perf_analyzer"] if "throughput" in row]
    throughput_plot(RESULTS_DIR / f"{name}_throughput.png", measured, subtitle)
    latency_plot(RESULTS_DIR / f"{name}_latency.png", measured, ENSEMBLE, subtitle)
    if result["step_split"]:
        step_split_plot(RESULTS_DIR / f"{name}_step_split.png", result["step_split"], subtitle)
    return write_results(name, result, markdown(name, result), provenance=provenance)


def markdown(name: str, result: dict) -> str:
    sections = [
        (
            f"Benchmark: {result['blip']}",
            [
                f"Captioner on the CPU in {result['offline']['captioner_precision']}. Plots: "
                f"`{name}_throughput.png`, `{name}_latency.png`, `{name}_step_split.png`; every row in `{name}.csv`.",
                f"Server memory (PSS of tritonserver and its {result['memory_before']['processes'] - 1} stub "
                "processes): "
                f"{result['memory_before']['pss_mib']:.0f} MiB after warm-up, "
                f"{result['memory_after']['pss_mib']:.0f} MiB "
                f"at the end (RSS {result['memory_before']['rss_mib']:.0f} / "
                f"{result['memory_after']['rss_mib']:.0f} MiB).",
            ],
            ["target", "goal", "value", "met"],
            result["targets"],
        ),
        (
            "perf_analyzer (latency in ms; mean batch per step from Triton's statistics)",
            [],
            [
                *perf_analyzer.COLUMNS,
                *(f"{step}_mean_batch" for step in ("preprocess", "classifier", "captioner")),
                # decoder_step and host: the captioner's own clock (docs/profiling.md, "Inside a step")
                *(f"captioner_{figure}_ms" for figure in ("queue", "compute", "decoder_step", "host")),
                "cpu_s_per_image",
                "error",
            ],
            result["perf_analyzer"],
        ),
        (
            "Through the HTTP API vs baseline (a), the course's server (same load generator)",
            [],
            ["path", "concurrency", "requests", "throughput", "p50_ms", "p95_ms", "p99_ms"],
            [{"path": "product API", **row} for row in result["api"]]
            + [{"path": "course server", **row} for row in result["course"]],
        ),
        (
            "Baseline (b): in-process, no server",
            [
                "Each step's compute at batch 1 (ms): "
                + ", ".join(f"{step} {ms:.1f}" for step, ms in result["offline"]["step_ms_batch_1"].items())
                + f"; sum {result['offline']['sum_step_ms_batch_1']:.0f} ms."
            ],
            ["batch", "img_per_s", "cpu_s_per_image"],
            [
                {"batch": b, "img_per_s": v, "cpu_s_per_image": result["offline"]["cpu_s_per_image_by_batch"][b]}
                for b, v in result["offline"]["img_per_s_by_batch"].items()
            ],
        ),
        (
            "The limit in alternating rounds: served at concurrency 8, in-process at batch 8, the order flipped",
            [],
            [
                "round",
                "first",
                "served_img_per_s",
                "in_process_img_per_s",
                "served_cpu_s_per_image",
                "in_process_cpu_s_per_image",
            ],
            result["limit_rounds"],
        ),
    ]
    parts = [
        markdown_table(title, paragraphs, columns, rows, level=1 if index == 0 else 2)
        for index, (title, paragraphs, columns, rows) in enumerate(sections)
    ]
    return "\n".join(parts)


def main(argv=None) -> None:
    args = parse_args(argv)
    repository = args.repository.resolve()
    blip = blip_description(repository)
    photos = varied_photos(args.photos)
    scratch = PROJECT_ROOT / "build" / "bench"
    scratch.mkdir(parents=True, exist_ok=True)
    input_files = write_input_data(repository, photos, scratch / "perf_input")

    triton_log = scratch / "tritonserver.log"
    with TritonServer(
        repository, scratch / "triton", free_ports(), log_file=triton_log, extra_args=tuple(args.triton_arg)
    ) as triton:
        asyncio.run(_warm_up(triton.grpc_url, photos))
        memory_before = server_memory_mib(triton.pid)
        rows, splits = perf_sweep(triton, input_files, args, scratch)
        limit_rounds = alternating_limit(triton, input_files, args, scratch, photos)
        # The API's in-flight limit pinned to the highest level driven (the warm-up's 2 at least): this
        # compares serving paths; admission is measured by make overload.
        pinned = max(2, *args.compare_concurrency)
        api = ApiProcess("127.0.0.1", free_port(), triton.grpc_url, min_in_flight=pinned, max_in_flight=pinned)
        try:
            api.wait_until_alive()
            api_rows = asyncio.run(drive_http(api.url, photos, args.compare_concurrency, args.compare_requests))
        finally:
            api.stop()
        memory_after = server_memory_mib(triton.pid)
    course_rows = course_baseline(repository, photos, args)
    offline = offline_limit(repository, photos)

    result = {
        "blip": blip,
        "photos": len(photos),
        "memory_before": memory_before,
        "memory_after": memory_after,
        "perf_analyzer": rows,
        "step_split": splits,
        "api": api_rows,
        "course": course_rows,
        "offline": offline,
        "limit_rounds": limit_rounds,
    }
    result["targets"] = targets(rows, api_rows, course_rows, offline, limit_rounds)
    print(write_bench_results(args.name, result).read_text())


async def _warm_up(grpc_url: str, photos: list[bytes]) -> None:
    """Every step run once with a full batch, so lazy initialisation is not measured."""
    async with AsyncFood11Client(grpc_url, timeout_s=900) as client:
        await client.caption(photos[:4])


if __name__ == "__main__":
    main()
