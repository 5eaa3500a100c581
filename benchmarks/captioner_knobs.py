#!/usr/bin/env python3
"""The captioner's knobs on this machine: throughput of each, and how far each changes the captions.

Runs the real ``BlipCaptioner`` in this process (no server) on the repository's BLIP snapshot (the
``base`` stand-in after ``make models``), on the benchmark photos with the prompts the pipeline would
give them. For each knob and batch size: images per second, best of ``--repeats`` after a warm-up.
Beside it, agreement with exact fp32 on the same inputs: the share of identical captions and the mean
position-wise token agreement. With a random-weights stand-in these are a lower bound of what real
weights give (a trained model's confident next-token choices survive small numeric changes more often).
Writes benchmarks/results/captioner_knobs.{json,md}.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from pipeline_src import PROJECT_ROOT
from pipeline_src.profiling.in_process import InProcessPipeline
from pipeline_src.profiling.photos import varied_photos
from pipeline_src.profiling.report import machine_description, write_markdown_table
from pipeline_src.steps.captioning import BlipCaptioner, cpu_has_native_bf16

RESULTS = PROJECT_ROOT / "benchmarks" / "results"


@dataclass(frozen=True)
class Knob:
    name: str
    precision: str = "fp32"
    threads: int = 0  # 0: torch's default
    autocast_bf16: bool = False
    compile_vision: bool = False
    whole_batch: bool = False  # int8 only: one generate for the batch, so captions depend on batch mates
    note: str = ""


KNOBS = [
    Knob("fp32 (exact)", note="the reference"),
    Knob("fp32, 1 torch thread", threads=1, note="what a second busy process leaves"),
    Knob("int8 dynamic quantisation", precision="int8", note="Linear layers int8; image by image, as served"),
    Knob("int8, 1 torch thread", precision="int8", threads=1,
         note="one of two captioner instances sharing 2 cores"),
    Knob("int8, whole batch in one generate", precision="int8", whole_batch=True,
         note="not served: per-batch activation scales make a caption depend on its batch mates"),
    Knob("fp32, torch.compile(vision encoder)", compile_vision=True),
    Knob("bf16 weights", precision="bf16"),
    Knob("fp32 weights, bf16 autocast", autocast_bf16=True),
]


def uses_bf16(knob: Knob) -> bool:
    return knob.precision == "bf16" or knob.autocast_bf16


def token_agreement(tokenizer, reference: list[str], candidate: list[str]) -> float:
    """Mean over captions of the share of positions where both captions have the same token."""
    shares = []
    for ref, cand in zip(reference, candidate):
        a, b = tokenizer.tokenize(ref), tokenizer.tokenize(cand)
        shares.append(sum(x == y for x, y in zip(a, b)) / max(len(a), len(b), 1))
    return sum(shares) / len(shares)


def throughput(captioner: BlipCaptioner, pixels, prompts, batch: int, repeats: int, autocast: bool) -> float:
    context = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
    with context:
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
    args = parser.parse_args(argv)

    default_threads = torch.get_num_threads()
    pipeline = InProcessPipeline(args.repository, cpu_precision="fp32")
    photos = varied_photos(max(max(args.batches), 8))
    classifier_pixels, pixels = pipeline.preprocess(photos)
    _, prompts = pipeline.prompts(pipeline.classifier.logits(classifier_pixels))
    model_dir = str(args.repository / "captioner" / "1" / pipeline.captioner_settings.model_dir)
    generation = dict(max_new_tokens=pipeline.captioner_settings.max_new_tokens)
    reference = pipeline.captioner.caption(pixels, prompts)
    del pipeline

    rows = []
    for knob in KNOBS:
        if args.knobs and not any(knob.name.startswith(prefix) for prefix in args.knobs):
            continue
        torch.set_num_threads(knob.threads or default_threads)
        captioner = BlipCaptioner(model_dir, cpu_precision=knob.precision, **generation)
        if knob.whole_batch:
            captioner.rows_per_generate = None
        if knob.compile_vision:
            captioner.model.vision_model = torch.compile(captioner.model.vision_model)
        context = torch.autocast("cpu", dtype=torch.bfloat16) if knob.autocast_bf16 else contextlib.nullcontext()
        with context:
            captions = captioner.caption(pixels, prompts)
        row = {"knob": knob.name, "threads": torch.get_num_threads(), "note": knob.note,
               "identical_captions": sum(a == b for a, b in zip(reference, captions)) / len(reference),
               "token_agreement": token_agreement(captioner.tokenizer, reference, captions)}
        # Without native bf16 a bf16 knob is an order of magnitude slower: batch 1 tells enough.
        emulated = uses_bf16(knob) and not cpu_has_native_bf16()
        if emulated:
            row["note"] = "bf16 emulated: this CPU has no avx512_bf16 or amx_bf16"
        for batch in args.batches[:1] if emulated else args.batches:
            row[f"img_per_s_batch_{batch}"] = throughput(captioner, pixels, prompts, batch, args.repeats,
                                                         knob.autocast_bf16)
        print(json.dumps(row), flush=True)
        rows.append(row)
        del captioner
    torch.set_num_threads(default_threads)

    baseline = rows[0][f"img_per_s_batch_{args.batches[0]}"]
    for row in rows:
        row["best_vs_fp32_batch_1"] = max(row.get(f"img_per_s_batch_{b}", 0.0) for b in args.batches) / baseline
    result = {"machine": machine_description(), "snapshot": model_dir, "max_new_tokens": generation["max_new_tokens"],
              "photos": len(photos), "command": " ".join(["python", "benchmarks/captioner_knobs.py", *sys.argv[1:]]),
              "rows": rows}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{args.name}.json").write_text(json.dumps(result, indent=2) + "\n")
    columns = ["knob", "threads"] + [f"img_per_s_batch_{b}" for b in args.batches] + [
        "best_vs_fp32_batch_1", "identical_captions", "token_agreement", "note"]
    write_markdown_table(RESULTS / f"{args.name}.md", f"BLIP captioner knobs ({result['machine']})",
                         [f"Snapshot `{model_dir}`, {generation['max_new_tokens']} new tokens, greedy. "
                          f"Command: `{result['command']}`. Agreement is with exact fp32 on the same "
                          f"{len(photos)} photos and prompts; on a random-weights stand-in it is a lower bound."],
                         columns, rows)


if __name__ == "__main__":
    main()
