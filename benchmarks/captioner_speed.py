"""``make bench-captioner``: the served pipeline against the course's way, side by side in one run.

1. The course's way: this process preprocesses, classifies and captions one photo at a time with Hugging
   Face BLIP fp32 ``generate``: photos per second and latency.
2. The served pipeline, exact default (fp32): perf_analyzer on the ensemble at concurrency 1 and 8 (the
   captioner under its composing models), server memory, and every served caption compared with Hugging
   Face fp32 ``generate`` on the preprocessing step's own pixels and the pipeline's prompt.
3. The same with ``cpu_precision=int8`` on the vision encoder and the captioner, with the build's
   fidelity figures.

Figures to ``benchmarks/results/captioner_speed.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient

from benchmarks.lib.in_process import InProcessPipeline, step_settings
from benchmarks.lib.memory import server_memory_mib
from benchmarks.lib.percentiles import percentile
from benchmarks.lib.photos import varied_photos
from benchmarks.lib.results import parse_benchmark_args, write_results
from food11_client import Food11Client
from pipeline_src import PROJECT_ROOT
from pipeline_src.contract import ENSEMBLE, CaptionStatus
from pipeline_src.model_build.hf_captioner import HuggingFaceCaptioner
from pipeline_src.profiling import perf_analyzer
from pipeline_src.profiling.perf_input import write_input_data
from pipeline_src.profiling.report import markdown_table
from pipeline_src.repository.bls_calls import bls_callees
from pipeline_src.serving.launcher import TritonServer
from pipeline_src.serving.ports import free_ports
from pipeline_src.steps.classification import build_prompt
from pipeline_src.steps.precision import read_fidelity
from pipeline_src.steps.settings import CaptionWithLabelSettings

INT8_STEPS = ("vision_encoder", "captioner")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repository", type=Path, default=PROJECT_ROOT / "model_repository")
    parser.add_argument("--photos", type=int, default=8)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--window", type=int, default=16, help="perf_analyzer requests per count window")
    parser.add_argument("--name", default="captioner_speed")
    return parse_benchmark_args(parser, argv)


def course_way(repository: Path, photos: list[bytes]) -> dict:
    """One photo at a time, in this process, captioned by Hugging Face fp32 generate."""
    pipeline = InProcessPipeline(repository, course=True)
    pipeline([photos[0]])  # warm-up (first-call allocations)
    latencies = []
    for photo in photos:
        started = time.perf_counter()
        pipeline([photo])
        latencies.append(time.perf_counter() - started)
    return {
        "path": "course: Hugging Face fp32 generate, one photo at a time, in-process",
        "concurrency": 1,
        "throughput": len(photos) / sum(latencies),
        "p50_ms": 1000 * percentile(latencies, 50),
    }


def served(
    repository: Path,
    photos: list[bytes],
    input_file: Path,
    levels: list[int],
    window: int,
    label: str,
    scratch: Path,
    precision: str | None = None,
) -> tuple[list[dict], dict]:
    """perf_analyzer on the ensemble at each level; server memory; served captions against Hugging Face."""
    work_dir, ports = scratch / f"triton{len(list(scratch.glob('triton*')))}", free_ports()
    extra_args = ("--model-control-mode=explicit", "--load-model=*")
    server = TritonServer(repository, work_dir, ports, extra_args=extra_args)
    rows = []
    with server:
        if precision:
            set_cpu_precision(server, precision, INT8_STEPS)
        for concurrency in levels:
            measurement, stability = perf_analyzer.measure_stably(
                ENSEMBLE,
                server.grpc_url,
                input_file,
                concurrency,
                scratch / f"{label}_{concurrency}.csv",
                max(window, concurrency),
                bls_composing=bls_callees(repository, ENSEMBLE),
            )
            memory = server_memory_mib(server.pid)
            rows.append(
                {
                    "path": label,
                    **measurement.__dict__,
                    "stability_percentage": stability,
                    "server_pss_mib": memory["pss_mib"],
                }
            )
            print(json.dumps(rows[-1]), flush=True)
        captions = caption_check(server.grpc_url, repository, photos)
    return rows, captions


def set_cpu_precision(server: TritonServer, precision: str, models: tuple[str, ...]) -> None:
    """Reload ``models`` with ``cpu_precision`` changed (explicit model control; an admin call)."""
    raw = grpcclient.InferenceServerClient(server.grpc_url)
    for model in models:
        config = raw.get_model_config(model, as_json=True)["config"]
        config["parameters"]["cpu_precision"] = {"string_value": precision}
        raw.load_model(model, config=json.dumps(config), headers=server.admin_grpc_headers)
    raw.close()


def caption_check(grpc_url: str, repository: Path, photos: list[bytes]) -> dict:
    """Each photo alone through the ensemble, against Hugging Face fp32 generate given the preprocess
    step's output and the prompt the pipeline chose."""
    with Food11Client(grpc_url, timeout_s=600) as client:
        results = [client.caption([photo])[0] for photo in photos]
    raw = grpcclient.InferenceServerClient(grpc_url)
    image = grpcclient.InferInput("IMAGE", [len(photos), 1], "BYTES")
    image.set_data_from_numpy(np.array([[photo] for photo in photos], dtype=np.object_))
    pixels = raw.infer("preprocess", [image], outputs=[grpcclient.InferRequestedOutput("CAPTIONER_PIXELS")]).as_numpy(
        "CAPTIONER_PIXELS"
    )
    raw.close()
    template = step_settings(
        repository, "caption_with_label", CaptionWithLabelSettings
    ).prompt_template  # the prompt the pipeline used
    prompts = [build_prompt(template, r.label) if r.caption_status == CaptionStatus.OK else "" for r in results]
    course = HuggingFaceCaptioner.load(repository / "captioner" / "1" / "blip", max_new_tokens=20)
    expected = course.caption(pixels, prompts)
    return {
        "captions_identical_to_hugging_face": sum(r.caption == e for r, e in zip(results, expected)),
        "captions": len(photos),
        "distinct_captions": len({r.caption for r in results}),
    }


def main(argv=None) -> None:
    args = parse_args(argv)
    photos = varied_photos(args.photos)
    result: dict[str, Any] = {"photos": len(photos)}
    with tempfile.TemporaryDirectory() as scratch_dir:
        scratch = Path(scratch_dir)
        input_file = write_input_data(args.repository, photos, scratch / "input")[ENSEMBLE]
        result["course"] = course_way(args.repository, photos)
        print(json.dumps(result["course"]), flush=True)
        result["exact"], result["exact_captions"] = served(
            args.repository, photos, input_file, args.concurrency, args.window, "served, exact (fp32)", scratch
        )
        result["int8"], result["int8_captions"] = served(
            args.repository, photos, input_file, [8], args.window, "served, int8 weights", scratch, precision="int8"
        )
    result["fidelity"] = {
        step: read_fidelity(directory)
        for step, directory in (
            ("vision_encoder", args.repository / "vision_encoder" / "1"),
            ("text_decoder", args.repository / "captioner" / "1" / "text_decoder"),
        )
    }
    course = result["course"]["throughput"]
    for row in [*result["exact"], *result["int8"]]:
        row["vs_course"] = row["throughput"] / course
        row["p50_vs_course_p50"] = row["p50_ms"] / result["course"]["p50_ms"]
    print(write_results(args.name, result, report(result)).read_text())


def report(result: dict) -> str:
    rows = [result["course"], *result["exact"], *result["int8"]]
    fidelity = result["fidelity"]
    paragraphs = [
        f"{result['photos']} photos (`varied_photos`), BLIP stand-in base, 20 new tokens, greedy.",
        f"Served captions identical to Hugging Face fp32 `generate` on the preprocessing step's pixels and the "
        f"pipeline's prompt: exact {result['exact_captions']['captions_identical_to_hugging_face']} of "
        f"{result['exact_captions']['captions']}, int8 {result['int8_captions']['captions_identical_to_hugging_face']}"
        f" of {result['int8_captions']['captions']} (distinct captions served: "
        f"{result['exact_captions']['distinct_captions']}).",
        "Build-time fidelity of int8 against fp32 (teacher-forced, check photos): "
        + "; ".join(
            f"{step} int8: top-1 {figures['options']['int8']['teacher_forced_top1']:.1%}, max relative logit error "
            f"{figures['options']['int8']['max_relative_logit_error']:.1e}"
            for step, figures in fidelity.items()
            if figures
        )
        + (
            f"; both int8: top-1 {fidelity['text_decoder']['both_int8']['teacher_forced_top1']:.1%}"
            if fidelity.get("text_decoder")
            else ""
        ),
    ]
    return markdown_table(
        "Captioner: served pipeline vs the course's way",
        paragraphs,
        [
            "path",
            "concurrency",
            "throughput",
            "vs_course",
            "p50_ms",
            "p50_vs_course_p50",
            "p95_ms",
            "server_pss_mib",
            "stability_percentage",
        ],
        rows,
    )


if __name__ == "__main__":
    main()
