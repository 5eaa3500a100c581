#!/usr/bin/env python3
"""The captioner's knobs on this machine: throughput of each, and how far each changes the captions.

Runs the captioning in this process (no server) on the repository's built BLIP (the ``base`` stand-in
after ``make models``), on the benchmark photos with the prompts the pipeline would give them: the course's
way (Hugging Face fp32 ``generate``, one photo at a time) and the served captioner's graphs on ONNX Runtime
(vision encoder, then greedy decoding with a KV cache), fp32 and int8 weights, at several batch sizes and
thread counts. For each: images per second (best of ``--repeats`` after a warm-up), captions identical to
the course's, and the build's teacher-forced fidelity (``fidelity.json``) for the int8 graphs.
Writes benchmarks/results/captioner_knobs.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.lib.in_process import InProcessPipeline
from benchmarks.lib.photos import varied_photos
from benchmarks.lib.report import markdown_table
from benchmarks.lib.results import parse_benchmark_args, write_results
from pipeline_src import PROJECT_ROOT
from pipeline_src.steps.precision import read_fidelity


@dataclass(frozen=True)
class Knob:
    name: str
    course: bool = False  # Hugging Face fp32 generate, one photo at a time
    precision: str = "fp32"  # the vision encoder's and the text decoder's
    threads: int = 0  # ONNX Runtime intra-op threads (0: one per core)
    note: str = ""


KNOBS = [
    Knob("course: Hugging Face fp32 generate", course=True, note="the reference; one photo at a time"),
    Knob("ONNX Runtime fp32 (served default)", note="exact"),
    Knob("ONNX Runtime fp32, 1 thread", threads=1, note="what a second busy step leaves"),
    Knob("ONNX Runtime int8 weights", precision="int8", note="MatMulNBits 8-bit, per-row activations"),
]


def throughput(captioner, pixels, prompts, batch: int, repeats: int) -> float:
    captioner.caption(pixels[:batch], prompts[:batch])  # warm-up
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        captioner.caption(pixels[:batch], prompts[:batch])
        best = min(best, time.perf_counter() - started)
    return batch / best


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repository", type=Path, default=PROJECT_ROOT / "model_repository")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--knobs", nargs="+", help="only the knobs whose names start with these")
    parser.add_argument("--name", default="captioner_knobs")
    args = parse_benchmark_args(parser, argv)

    photos = varied_photos(max(max(args.batches), 8))
    pipeline = InProcessPipeline(args.repository)
    classifier_pixels, pixels = pipeline.preprocess(photos)
    _, prompts = pipeline.prompts(pipeline.classifier(classifier_pixels))

    rows, reference = [], None
    for knob in KNOBS:
        if args.knobs and not any(knob.name.startswith(prefix) for prefix in args.knobs):
            continue
        captioner = (
            InProcessPipeline(args.repository, course=True)
            if knob.course
            else InProcessPipeline(args.repository, cpu_precision=knob.precision, intra_op_threads=knob.threads)
        ).captioner
        captions = captioner.caption(pixels, prompts)
        reference = reference if reference is not None else captions
        row = {
            "knob": knob.name,
            "note": knob.note,
            "identical_to_course": sum(a == b for a, b in zip(reference, captions)) / len(reference),
        }
        # The course's way is one photo at a time: its batch 1 is its figure.
        for batch in args.batches[:1] if knob.course else args.batches:
            row[f"img_per_s_batch_{batch}"] = throughput(captioner, pixels, prompts, batch, args.repeats)
        print(json.dumps(row), flush=True)
        rows.append(row)
        del captioner

    course = rows[0][f"img_per_s_batch_{args.batches[0]}"]
    for row in rows:
        row["best_vs_course"] = max(row.get(f"img_per_s_batch_{b}", 0.0) for b in args.batches) / course
    fidelity = {
        step: read_fidelity(path)
        for step, path in (
            ("vision_encoder", args.repository / "vision_encoder" / "1"),
            ("text_decoder", args.repository / "captioner" / "1" / "text_decoder"),
        )
    }
    result = {
        "max_new_tokens": pipeline.captioner_settings.max_new_tokens,
        "photos": len(photos),
        "rows": rows,
        "fidelity": fidelity,
    }
    columns = (
        ["knob"] + [f"img_per_s_batch_{b}" for b in args.batches] + ["best_vs_course", "identical_to_course", "note"]
    )
    int8 = "; ".join(
        f"{step} int8 teacher-forced top-1 {figures['options']['int8']['teacher_forced_top1']:.1%}"
        for step, figures in fidelity.items()
        if figures
    )
    print(
        write_results(
            args.name,
            result,
            markdown_table(
                "BLIP captioner knobs",
                [
                    f"Repository `{args.repository.name}` (BLIP stand-in base), {result['max_new_tokens']} new "
                    "tokens, greedy, "
                    f"{len(photos)} photos with the pipeline's prompts. Build-time fidelity: {int8}."
                ],
                columns,
                rows,
            ),
        ).read_text()
    )


if __name__ == "__main__":
    main()
