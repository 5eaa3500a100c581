#!/usr/bin/env python3
"""Triton's rate limiter on the CPU on and off, in one run.

On the CPU, ONNX Runtime runs the vision encoder and the captioner each on every core, and the ensemble overlaps
them (one photo's captioning beside the next one's encoding). Their configs ask for the resource ``cpu_cores``, 1
in all: with ``--rate-limit=execution_count`` Triton runs one of them at a time. Does that beat the overlap?
Starts tritonserver on the repository (the base stand-in by default) with the rate limiter off (the default),
then on, then off and on again (``--rounds``), and measures the ensemble with
perf_analyzer at each concurrency, with Triton's per-step batch and compute figures; then the same steps
in-process at batch 8, the limit. Alternating rounds, because one run's figures on a shared 2-core VM drift
by more than the difference measured. Writes benchmarks/results/core_sharing.{md,json}. Not a test.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import tempfile
from pathlib import Path

from benchmarks.lib.in_process import InProcessPipeline, best_seconds
from benchmarks.lib.photos import varied_photos
from benchmarks.lib.results import parse_benchmark_args, write_results
from benchmarks.lib.triton_stats import figures_since, snapshot
from benchmarks.profiling import perf_analyzer
from benchmarks.profiling.perf_input import write_input_data
from pipeline_src import PROJECT_ROOT
from pipeline_src.contract import ENSEMBLE
from pipeline_src.repository.bls_calls import bls_callees
from pipeline_src.serving.launcher import TritonServer
from pipeline_src.serving.ports import free_ports

MODES = {"off": ("--rate-limit=off",), "on": ("--rate-limit=execution_count",)}
SHOWN_STEPS = ("vision_encoder", "captioner")


def measure_mode(repository: Path, mode: str, inputs: Path, levels: list[int], scratch: Path) -> list[dict]:
    rows = []
    with TritonServer(repository, scratch / mode, free_ports(), extra_args=MODES[mode]) as triton:
        for concurrency in levels:
            before = snapshot(triton)
            measurement, _ = perf_analyzer.measure_stably(
                ENSEMBLE,
                triton.grpc_url,
                inputs,
                concurrency,
                scratch / f"{mode}_{concurrency}.csv",
                max(16, concurrency),
                bls_composing=bls_callees(repository, ENSEMBLE),
            )
            steps = figures_since(triton, before)
            row = {"mode": mode, "concurrency": concurrency, "img_per_s": measurement.throughput}
            row |= {"p50_ms": measurement.p50_ms}
            for step in SHOWN_STEPS:
                batch = steps.get(f"{step}_mean_batch", 0.0)
                row[f"{step}_mean_batch"] = batch
                row[f"{step}_ms_per_photo"] = steps.get(f"{step}_compute_ms", 0.0) / batch if batch else 0.0
            print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


def markdown(result: dict) -> str:
    lines = [
        "# The CPU's cores shared through Triton's rate limiter, on and off",
        "",
        f"`{ENSEMBLE}` by perf_analyzer, repository `{result['repository']}`, rounds in the order "
        f"{', '.join(result['order'])}; in-process at batch 8 (the same steps, no server): "
        f"**{result['in_process_batch_8']:.3f} img/s**.",
        "",
        "| round | rate limiter | concurrency | img/s | / in-process batch 8 | p50 ms | vision encoder batch | "
        "its ms a photo | captioner batch | its ms a photo |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in result["rows"]:
        lines.append(
            f"| {row['round']} | {row['mode']} | {row['concurrency']} | {row['img_per_s']:.3f} "
            f"| {row['img_per_s'] / result['in_process_batch_8']:.3f} | {row['p50_ms']:.0f} "
            f"| {row['vision_encoder_mean_batch']:.2f} | {row['vision_encoder_ms_per_photo']:.0f} "
            f"| {row['captioner_mean_batch']:.2f} | {row['captioner_ms_per_photo']:.0f} |"
        )
    lines += ["", "Mean over rounds, img/s (and over in-process batch 8):", ""]
    for (mode, concurrency), mean in result["means"].items():
        lines.append(
            f"- rate limiter {mode}, concurrency {concurrency}: {mean:.3f} ({mean / result['in_process_batch_8']:.3f})"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repository", type=Path, default=PROJECT_ROOT / "model_repository")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[8])
    parser.add_argument("--rounds", type=int, default=2, help="off then on, this many times (default: %(default)s)")
    parser.add_argument("--photos", type=int, default=12)
    parser.add_argument("--name", default="core_sharing", help="results file name, without extension")
    args = parse_benchmark_args(parser, argv)
    repository = args.repository.resolve()
    photos = varied_photos(args.photos)
    order = [mode for _ in range(args.rounds) for mode in MODES]
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        inputs = write_input_data(repository, photos, Path(scratch) / "inputs")[ENSEMBLE]
        for index, mode in enumerate(order):
            for row in measure_mode(repository, mode, inputs, args.concurrency, Path(scratch) / str(index)):
                rows.append({"round": index + 1, **row})
    pipeline = InProcessPipeline(repository)
    batch = [photos[i % len(photos)] for i in range(8)]
    in_process = 8 / best_seconds(functools.partial(pipeline, batch), repeats=1)
    means = {
        (mode, level): statistics.mean(r["img_per_s"] for r in rows if r["mode"] == mode and r["concurrency"] == level)
        for mode in MODES
        for level in args.concurrency
    }
    result = {
        "repository": str(args.repository),
        "order": order,
        "rows": rows,
        "in_process_batch_8": in_process,
        "means": means,
    }
    serialisable = {**result, "means": {f"{mode}_c{level}": value for (mode, level), value in means.items()}}
    path = write_results(args.name, serialisable, markdown(result))
    print(path.read_text())


if __name__ == "__main__":
    main()
