#!/usr/bin/env python3
"""How an ONNX step's latency on CUDA depends on the batch shapes it is given, in-process, no Triton:

    python benchmarks/gpu_batch_shapes.py [--repository model_repository]

For the classifier and the vision encoder, each batch size run alone many times (one shape, repeated) against
the same sizes in turn (the shape changes every run, as Triton's dynamic batching hands them out). Median ms
per run for each; results in $OUT or benchmarks/results/gpu_batch_shapes.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from pipeline_src import PROJECT_ROOT
from pipeline_src.steps.onnx_runtime import onnx_session

SIZES = (1, 2, 4, 8, 16, 32)
STEPS = {"classifier": (3, 224, 224), "vision_encoder": (3, 384, 384)}


def timed(session, name: str, batch: np.ndarray) -> float:
    started = time.perf_counter()
    session.run(None, {name: batch})
    return (time.perf_counter() - started) * 1000


def measure(path: Path, pixels: tuple[int, ...], rounds: int, on_gpu: bool) -> dict:
    session = onnx_session(path, on_gpu=on_gpu)
    name = session.get_inputs()[0].name
    batches = {size: np.random.default_rng(size).random((size, *pixels), dtype=np.float32) for size in SIZES}
    for size in SIZES:  # every shape seen once before timing
        timed(session, name, batches[size])
    repeated = {size: statistics.median(timed(session, name, batches[size]) for _ in range(rounds)) for size in SIZES}
    alternating: dict[int, list[float]] = {size: [] for size in SIZES}
    for _ in range(rounds):
        for size in SIZES:
            alternating[size].append(timed(session, name, batches[size]))
    return {
        "providers": session.get_providers(),
        "repeated_ms": repeated,
        "alternating_ms": {size: statistics.median(times) for size, times in alternating.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repository", type=Path, default=PROJECT_ROOT / "model_repository")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--cpu", action="store_true", help="on the CPU (a rehearsal)")
    args = parser.parse_args()
    results = {
        step: measure(args.repository / step / "1" / "model.onnx", pixels, args.rounds, not args.cpu)
        for step, pixels in STEPS.items()
    }
    out = Path(os.environ["OUT"]) if os.environ.get("OUT") else PROJECT_ROOT / "benchmarks" / "results"
    (out / "gpu_batch_shapes.json").write_text(json.dumps(results, indent=1))
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
