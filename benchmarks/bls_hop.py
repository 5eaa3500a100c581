#!/usr/bin/env python3
"""What one BLS hop costs, against an ensemble hop, on this machine.

Builds a tiny repository in a temporary folder: ``identity`` (a trivial Python model, Y = X), ``relay`` (the
same, to be a first step), ``bls_identity`` (a trivial BLS step: it calls ``identity`` and returns its answer),
``ensemble_identity`` (a one-step ensemble of ``identity``) and ``ensemble_relay_identity`` (``relay`` then
``identity``). Starts its own tritonserver and sends, at concurrency 1, the same requests down each path in
rounds that rotate the paths' order, for a small tensor and a captioner-sized one (FP32 [3, 384, 384], what
caption_with_label forwards to the captioner by BLS). Figures are compared within the same run only.

    bls_identity - ensemble_relay_identity   a BLS hop against an ensemble hop (both run two Python models)
    ensemble_identity - identity              the ensemble scheduler alone
Writes benchmarks/results/bls_hop.{md,json}. Not a test: nothing here asserts, the figures are for reading.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient

from benchmarks.lib.load import latency_summary
from benchmarks.lib.results import parse_benchmark_args, write_results
from pipeline_src.serving.launcher import TritonServer
from pipeline_src.serving.ports import free_ports

MAX_BATCH = 8

IDENTITY_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse(output_tensors=[
            pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(request, "X").as_numpy())]) for request in requests]
"""

BLS_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            called = pb_utils.InferenceRequest(model_name="identity", requested_output_names=["Y"],
                                               inputs=[pb_utils.get_input_tensor_by_name(request, "X")]).exec()
            if called.has_error():
                responses.append(pb_utils.InferenceResponse(error=called.error()))
            else:
                responses.append(pb_utils.InferenceResponse(output_tensors=[
                    pb_utils.Tensor("Y", pb_utils.get_output_tensor_by_name(called, "Y").as_numpy())]))
        return responses
"""


def python_config(name: str, dims: str) -> str:
    return f'''name: "{name}"
backend: "python"
max_batch_size: {MAX_BATCH}
input [ {{ name: "X", data_type: TYPE_FP32, dims: [ {dims} ] }} ]
output [ {{ name: "Y", data_type: TYPE_FP32, dims: [ {dims} ] }} ]
instance_group [ {{ count: 1, kind: KIND_CPU }} ]
'''


def ensemble_config(name: str, dims: str, steps: list[str]) -> str:
    tensors = ["X", *[f"t{index}" for index in range(1, len(steps))], "Y"]
    blocks = [
        f'''    {{
      model_name: "{model}"
      model_version: -1
      input_map {{ key: "X", value: "{tensors[index]}" }}
      output_map {{ key: "Y", value: "{tensors[index + 1]}" }}
    }}'''
        for index, model in enumerate(steps)
    ]
    steps_text = ",\n".join(blocks)
    return f'''name: "{name}"
platform: "ensemble"
max_batch_size: {MAX_BATCH}
input [ {{ name: "X", data_type: TYPE_FP32, dims: [ {dims} ] }} ]
output [ {{ name: "Y", data_type: TYPE_FP32, dims: [ {dims} ] }} ]
ensemble_scheduling {{
  step [
{steps_text}
  ]
}}
'''


# The model each path calls, and what it is: every path answers Y = X for the same request.
PATHS = {
    "identity": "the trivial Python model, called directly",
    "ensemble_identity": "a one-step ensemble of it",
    "bls_identity": "a trivial Python step that calls it by BLS",
    "ensemble_relay_identity": "a two-step ensemble: a trivial Python step, then it",
}


def build_repository(root: Path, shape: tuple[int, ...]) -> Path:
    """The five models, for tensors of ``shape`` (without the batch dimension)."""
    dims = ", ".join(map(str, shape))
    files = {
        "identity/config.pbtxt": python_config("identity", dims),
        "identity/1/model.py": IDENTITY_PY,
        "relay/config.pbtxt": python_config("relay", dims),
        "relay/1/model.py": IDENTITY_PY,
        "bls_identity/config.pbtxt": python_config("bls_identity", dims),
        "bls_identity/1/model.py": BLS_PY,
        "ensemble_identity/config.pbtxt": ensemble_config("ensemble_identity", dims, ["identity"]),
        "ensemble_relay_identity/config.pbtxt": ensemble_config("ensemble_relay_identity", dims, ["relay", "identity"]),
    }
    for relative, text in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)
    for ensemble in ("ensemble_identity", "ensemble_relay_identity"):
        (root / ensemble / "1").mkdir()
    return root


def server_success(client: grpcclient.InferenceServerClient, model: str) -> tuple[int, int]:
    """(successful requests, their total nanoseconds inside Triton) counted for ``model`` so far."""
    stats = client.get_inference_statistics(model, as_json=True)["model_stats"][0]["inference_stats"]["success"]
    return int(stats.get("count", 0)), int(stats.get("ns", 0))


def run_path(client, model: str, request: list, count: int) -> tuple[list[float], float, tuple[int, int]]:
    """``count`` requests one after the other: latencies (s), wall time (s), and Triton's (count, ns) for them."""
    before = server_success(client, model)
    latencies = []
    started = time.perf_counter()
    for _ in range(count):
        sent = time.perf_counter()
        client.infer(model, request)
        latencies.append(time.perf_counter() - sent)
    wall = time.perf_counter() - started
    after = server_success(client, model)
    return latencies, wall, (after[0] - before[0], after[1] - before[1])


def measure(shape: tuple[int, ...], requests: int, rounds: int, warmup: int) -> dict:
    """Every path for one tensor shape, on a server of its own."""
    with tempfile.TemporaryDirectory() as scratch:
        repository = build_repository(Path(scratch) / "model_repository", shape)
        with TritonServer(repository, Path(scratch) / "triton", free_ports()) as triton:
            client = grpcclient.InferenceServerClient(triton.grpc_url)
            values = np.random.default_rng(0).standard_normal((1, *shape)).astype(np.float32)
            tensor = grpcclient.InferInput("X", list(values.shape), "FP32")
            tensor.set_data_from_numpy(values)
            for path in PATHS:  # warm-up, and proof that every path answers Y = X
                answer = client.infer(path, [tensor]).as_numpy("Y")
                assert np.array_equal(answer, values), f"{path} does not answer Y = X"
                run_path(client, path, [tensor], warmup)
            samples: dict[str, Any] = {path: ([], 0.0, 0, 0) for path in PATHS}
            order = list(PATHS)
            for _ in range(rounds):
                for path in order:
                    latencies, wall, (count, ns) = run_path(client, path, [tensor], requests)
                    old = samples[path]
                    samples[path] = (old[0] + latencies, old[1] + wall, old[2] + count, old[3] + ns)
                order = order[1:] + order[:1]  # rotate: no path always runs first or after the same one
            client.close()
    figures = {}
    for path, (latencies, wall, count, ns) in samples.items():
        figures[path] = {
            **latency_summary(latencies, wall),
            "mean_ms": float(np.mean(latencies) * 1000),
            "server_mean_ms": ns / count / 1e6,
        }
    return figures


def comparisons(figures: dict) -> dict:
    """Each figure of interest as a difference and a ratio, all from the same run."""
    pairs = {
        "bls_hop_vs_ensemble_hop": ("bls_identity", "ensemble_relay_identity"),
        "bls_step_vs_direct": ("bls_identity", "identity"),
        "ensemble_step_vs_direct": ("ensemble_relay_identity", "identity"),
        "ensemble_scheduler_vs_direct": ("ensemble_identity", "identity"),
    }
    result = {}
    for name, (path, base) in pairs.items():
        a, b = figures[path], figures[base]
        result[name] = {
            "paths": [path, base],
            "p50_difference_ms": a["p50_ms"] - b["p50_ms"],
            "p95_difference_ms": a["p95_ms"] - b["p95_ms"],
            "server_mean_difference_ms": a["server_mean_ms"] - b["server_mean_ms"],
            "p50_ratio": a["p50_ms"] / b["p50_ms"],
            "throughput_ratio": a["throughput"] / b["throughput"],
        }
    return result


def markdown(result: dict) -> str:
    lines = [
        "# One BLS hop against one ensemble hop",
        "",
        f"Concurrency 1, {result['requests_per_path']} requests per path and tensor size ({result['rounds']} "
        f"rounds rotating the paths' order, after {result['warmup']} warm-up requests each), tritonserver "
        f"{result['server']}.",
        "",
    ]
    for size in result["sizes"]:
        figures, compared = size["paths"], size["comparisons"]
        lines += [
            f"## X: FP32 [1, {', '.join(map(str, size['shape']))}] ({size['bytes']:,} bytes)",
            "",
            "| path | what | p50 ms | p95 ms | mean ms | req/s | inside Triton, mean ms |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        for path, what in PATHS.items():
            f = figures[path]
            lines.append(
                f"| `{path}` | {what} | {f['p50_ms']:.3f} | {f['p95_ms']:.3f} | {f['mean_ms']:.3f} "
                f"| {f['throughput']:.0f} | {f['server_mean_ms']:.3f} |"
            )
        lines += [
            "",
            "| comparison | p50 difference ms | p95 difference ms | inside Triton difference ms "
            "| p50 ratio | throughput ratio |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for name, c in compared.items():
            lines.append(
                f"| {name} (`{c['paths'][0]}` vs `{c['paths'][1]}`) | {c['p50_difference_ms']:+.3f} "
                f"| {c['p95_difference_ms']:+.3f} | {c['server_mean_difference_ms']:+.3f} "
                f"| {c['p50_ratio']:.2f} | {c['throughput_ratio']:.2f} |"
            )
        lines.append("")
    lines += [
        "Inside Triton: Triton's own statistics for the path's top-level model (request received to "
        "response sent), so the client's and gRPC's share is left out. All paths answer Y = X with the same "
        "request; a BLS hop and an ensemble hop are compared on paths that both run two Python models."
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--requests", type=int, default=100, help="requests per path, size and round (default: %(default)s)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="(default: %(default)s)")
    parser.add_argument("--warmup", type=int, default=20, help="warm-up requests per path (default: %(default)s)")
    parser.add_argument("--name", default="bls_hop", help="results file name, without extension")
    args = parse_benchmark_args(parser, argv)

    sizes = []
    for shape in ((16,), (3, 384, 384)):
        print(f"measuring X of shape {shape} ...", flush=True)
        figures = measure(shape, args.requests, args.rounds, args.warmup)
        sizes.append(
            {
                "shape": list(shape),
                "bytes": int(np.prod(shape)) * 4,
                "paths": figures,
                "comparisons": comparisons(figures),
            }
        )
    result = {
        "server": f"2.51 (nvidia-pytriton {version('nvidia-pytriton')})",
        "requests_per_path": args.requests * args.rounds,
        "rounds": args.rounds,
        "warmup": args.warmup,
        "sizes": sizes,
    }
    print(write_results(args.name, result, markdown(result)).read_text())


if __name__ == "__main__":
    main()
