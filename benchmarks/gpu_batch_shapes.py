#!/usr/bin/env python3
"""How an ONNX step's latency on CUDA depends on the batch shapes it is given, in-process, no Triton:

    python -m benchmarks.gpu_batch_shapes [--repository model_repository]

For the classifier and the vision encoder, each batch size run alone many times (one shape, repeated) against
the same sizes in turn (the shape changes every run, as Triton's dynamic batching hands them out), and the sizes
in turn through the step's own OnnxModel with its settings (gpu_batch_sizes: padded, a session per size). Median ms
per run for each; results (.json, .md, with the commit and machine) in $OUT or benchmarks/results/.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import numpy as np

from benchmarks.lib.in_process import step_settings
from benchmarks.lib.results import RESULTS_DIR, parse_benchmark_args, write_results
from pipeline_src import PROJECT_ROOT
from pipeline_src.steps.onnx_runtime import OnnxModel, onnx_session
from pipeline_src.steps.settings import OnnxStepSettings

SIZES = (1, 2, 4, 8, 16, 32)
STEPS = {"classifier": (3, 224, 224), "vision_encoder": (3, 384, 384)}


def timed(run, batch: np.ndarray) -> float:
    started = time.perf_counter()
    run(batch)
    return (time.perf_counter() - started) * 1000


def measure(repository: Path, step: str, pixels: tuple[int, ...], rounds: int, on_gpu: bool) -> dict:
    session = onnx_session(repository / step / "1" / "model.onnx", on_gpu=on_gpu)
    name = session.get_inputs()[0].name

    def raw(batch: np.ndarray) -> None:
        session.run(None, {name: batch})

    batches = {size: np.random.default_rng(size).random((size, *pixels), dtype=np.float32) for size in SIZES}
    for size in SIZES:  # every shape seen once before timing
        timed(raw, batches[size])
    repeated = {size: statistics.median(timed(raw, batches[size]) for _ in range(rounds)) for size in SIZES}
    # the step as it runs in Triton: its settings (gpu_batch_sizes on a GPU instance), the sizes changing
    step_model = OnnxModel.from_settings(
        step_settings(repository, step, OnnxStepSettings), repository / step / "1", on_gpu
    )
    changing: dict[str, dict[int, list[float]]] = {"alternating_ms": {}, "as_the_step_runs_ms": {}}
    for _ in range(rounds):
        for size in SIZES:
            changing["alternating_ms"].setdefault(size, []).append(timed(raw, batches[size]))
            changing["as_the_step_runs_ms"].setdefault(size, []).append(timed(step_model, batches[size]))
    return {
        "providers": session.get_providers(),
        "gpu_batch_sizes": list(step_model.batch_sizes),
        "repeated_ms": repeated,
        **{
            key: {size: statistics.median(times) for size, times in by_size.items()}
            for key, by_size in changing.items()
        },
    }


def markdown(results: dict) -> str:
    rows = [
        "| step | batch | shape repeated, ms | shape changing, ms | shape changing, as the step runs (ms) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for step, figures in results.items():
        for size in SIZES:
            cells = [figures[key][size] for key in ("repeated_ms", "alternating_ms", "as_the_step_runs_ms")]
            rows.append(f"| {step} | {size} | " + " | ".join(f"{cell:.3g}" for cell in cells) + " |")
    return "# ONNX steps' latency by batch shape, in-process\n\n" + "\n".join(rows) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repository", type=Path, default=PROJECT_ROOT / "model_repository")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--cpu", action="store_true", help="on the CPU (a rehearsal)")
    args = parse_benchmark_args(parser, argv)
    results = {
        step: measure(args.repository, step, pixels, args.rounds, not args.cpu) for step, pixels in STEPS.items()
    }
    out = Path(os.environ["OUT"]) if os.environ.get("OUT") else RESULTS_DIR
    print(write_results("gpu_batch_shapes", {"steps": results}, markdown(results), directory=out).read_text())


if __name__ == "__main__":
    main()
