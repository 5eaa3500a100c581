#!/usr/bin/env python3
"""What a classify-only call costs against a full answer, through the served ensembles on this machine.

Starts tritonserver on the repository (the base stand-in by default: `make models`) and sends, one after the
other at concurrency 1, calls to ``food11_classify`` (``CLASSIFY_OUTPUTS``: LABEL, PROBABILITY, MODELS), as
``client.classify`` and ``POST /classify`` make them, and calls to ``food11_pipeline`` naming every output, in
rounds that alternate the two, one photo a call. Triton's statistics before and after say which steps each
kind of call ran: a classify-only call must run no vision encoder, caption_with_label or captioner. Each
classify-only answer is checked against the full answer for its photo. Writes
benchmarks/results/classify_only.{md,json}. Not a test: the figures are for reading.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient

from benchmarks.lib.load import latency_summary
from benchmarks.lib.photos import varied_photos
from benchmarks.lib.results import parse_benchmark_args, write_results
from pipeline_src import PROJECT_ROOT
from pipeline_src.contract import CLASSIFY_ENSEMBLE, CLASSIFY_OUTPUTS, CORE_OUTPUTS, ENSEMBLE
from pipeline_src.serving.launcher import TritonServer
from pipeline_src.serving.ports import free_ports

STEPS = ("preprocess", "classifier", "label", "vision_encoder", "caption_with_label", "captioner")
# Each kind of call: the ensemble it calls and the outputs it names (all of that ensemble's, as a caller of a
# cached ensemble must: docs/api.md, "Paying only for what is asked").
KINDS = {"classify_only": (CLASSIFY_ENSEMBLE, CLASSIFY_OUTPUTS), "full": (ENSEMBLE, CORE_OUTPUTS)}


def inference_counts(client) -> dict[str, int]:
    counts = {}
    for step in STEPS:
        (stats,) = client.get_inference_statistics(step, as_json=True)["model_stats"]
        counts[step] = int(stats.get("inference_count", 0))
    return counts


def call(client, photo: bytes, kind: tuple[str, tuple[str, ...]]) -> tuple[float, dict]:
    ensemble, outputs = kind
    image = grpcclient.InferInput("IMAGE", [1, 1], "BYTES")
    image.set_data_from_numpy(np.array([[photo]], dtype=np.object_))
    sent = time.perf_counter()
    result = client.infer(ensemble, [image], outputs=[grpcclient.InferRequestedOutput(name) for name in outputs])
    elapsed = time.perf_counter() - sent
    return elapsed, {name: result.as_numpy(name)[0, 0] for name in outputs}


def measure(repository: Path, photos: list[bytes], rounds: int) -> dict:
    figures: dict[str, dict] = {
        kind: {"latencies": [], "wall": 0.0, "steps": dict.fromkeys(STEPS, 0)} for kind in KINDS
    }
    mismatches = 0
    with tempfile.TemporaryDirectory() as scratch, TritonServer(repository, Path(scratch), free_ports()) as triton:
        client = grpcclient.InferenceServerClient(triton.grpc_url)
        for photo in photos[:2]:  # warm-up, both kinds
            for kind in KINDS:
                call(client, photo, KINDS[kind])
        for round_index in range(rounds):
            kinds = list(KINDS) if round_index % 2 == 0 else list(reversed(KINDS))
            answers: dict[str, list[dict]] = {}
            for kind in kinds:
                before, started = inference_counts(client), time.perf_counter()
                answers[kind] = []
                for photo in photos:
                    elapsed, answer = call(client, photo, KINDS[kind])
                    figures[kind]["latencies"].append(elapsed)
                    answers[kind].append(answer)
                figures[kind]["wall"] += time.perf_counter() - started
                after = inference_counts(client)
                for step in STEPS:
                    figures[kind]["steps"][step] += after[step] - before[step]
            for classified, full in zip(answers["classify_only"], answers["full"]):
                mismatches += any(classified[name] != full[name] for name in CLASSIFY_OUTPUTS)
        client.close()
    per_kind = {
        kind: {**latency_summary(f["latencies"], f["wall"]), "calls": len(f["latencies"]), "inferences": f["steps"]}
        for kind, f in figures.items()
    }
    return {
        **per_kind,
        "p50_ratio_full_over_classify_only": per_kind["full"]["p50_ms"] / per_kind["classify_only"]["p50_ms"],
        "classify_only_answers_differing_from_full": mismatches,
    }


def markdown(result: dict) -> str:
    lines = [
        "# A classify-only call against a full answer",
        "",
        f"Concurrency 1, one photo a call, {result['photos']} photos x {result['rounds']} rounds alternating the "
        f"two kinds of call, repository `{result['repository']}`. A classify-only call goes to `{CLASSIFY_ENSEMBLE}` "
        f"naming {', '.join(CLASSIFY_OUTPUTS)}; a full one to `{ENSEMBLE}` naming every core output.",
        "",
        "| call | calls | p50 ms | p95 ms | p99 ms | req/s |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for kind in KINDS:
        f = result[kind]
        lines.append(
            f"| {kind} | {f['calls']} | {f['p50_ms']:.1f} | {f['p95_ms']:.1f} | {f['p99_ms']:.1f} "
            f"| {f['throughput']:.2f} |"
        )
    lines += [
        "",
        f"Full over classify-only, p50: **{result['p50_ratio_full_over_classify_only']:.1f}x**. Classify-only "
        f"answers differing from the full answer's label, probability or models: "
        f"{result['classify_only_answers_differing_from_full']}.",
        "",
        "Inferences each step ran for each kind of call (Triton's statistics, `inference_count`):",
        "",
        "| call | " + " | ".join(STEPS) + " |",
        "| --- | " + " | ".join("---" for _ in STEPS) + " |",
    ]
    for kind in KINDS:
        lines.append(f"| {kind} | " + " | ".join(str(result[kind]["inferences"][step]) for step in STEPS) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repository", type=Path, default=PROJECT_ROOT / "model_repository")
    parser.add_argument("--photos", type=int, default=8, help="photos per round (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=4, help="(default: %(default)s)")
    parser.add_argument("--name", default="classify_only", help="results file name, without extension")
    args = parse_benchmark_args(parser, argv)
    photos = varied_photos(args.photos)
    result = measure(args.repository, photos, args.rounds)
    result.update(photos=len(photos), rounds=args.rounds, repository=str(args.repository))
    path = write_results(args.name, result, markdown(result))
    print(path.read_text())


if __name__ == "__main__":
    main()
