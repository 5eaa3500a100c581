#!/usr/bin/env python3
"""Throughput and latency through the FastAPI front versus straight gRPC to the ensemble.

Starts its own tritonserver (on a repository built with the chosen BLIP stand-in, or --repository) and
the API as a separate process, as in production; then, for each concurrency level, sends the same
photos both ways in alternating rounds, so drift affects both paths alike. Writes JSON and Markdown
to benchmarks/results/. Not a test: nothing here asserts, the figures are for reading.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import tritonclient.grpc.aio as grpcclient_aio

from benchmarks.lib.load import run_load
from benchmarks.lib.percentiles import percentiles_ms
from benchmarks.lib.photos import base_photos
from benchmarks.lib.results import parse_benchmark_args, portable_path, write_results
from food11_client import AsyncFood11Client
from pipeline_src.model_build.cli import build_repository_copy
from pipeline_src.serving.launcher import ApiProcess, TritonServer
from pipeline_src.serving.ports import free_port, free_ports

BATCHED_STEPS = ("classifier", "captioner")
QUANTILES = (50, 95)


def summary(latencies: list[float], timings: list[dict], wall_s: float) -> dict:
    figures = {
        "requests": len(latencies),
        "rps": len(latencies) / wall_s,
        **percentiles_ms(np.array(latencies) * 1000, QUANTILES, "latency_"),
    }
    if timings:
        app, triton, latency = (np.array([t[key] for t in timings]) for key in ("app", "triton", "latency"))
        figures |= percentiles_ms(latency - triton, QUANTILES, "api_added_")  # everything the HTTP hop costs
        figures |= percentiles_ms(app - triton, QUANTILES, "api_server_")  # of which: inside the API process
    return figures


async def executions(triton_stats, model: str) -> tuple[int, int]:
    """(inferences, executions) Triton has counted for ``model``: their ratio is the mean batch size."""
    stats = (await triton_stats.get_inference_statistics(model, as_json=True))["model_stats"][0]
    return int(stats.get("inference_count", 0)), int(stats.get("execution_count", 0))


def server_timing(header: str) -> dict:
    """``triton;dur=12.34, app;dur=13.01`` -> {"triton": 12.34, "app": 13.01}."""
    return {name: float(duration) for name, duration in (item.split(";dur=") for item in header.split(", "))}


async def benchmark(
    photos: list[bytes], grpc_url: str, api_url: str, levels: list[int], per_round: int, rounds: int
) -> list[dict]:
    rows = []
    triton_stats = grpcclient_aio.InferenceServerClient(grpc_url)
    async with (
        AsyncFood11Client(grpc_url, timeout_s=300) as grpc_client,
        httpx.AsyncClient(base_url=api_url, timeout=300, limits=httpx.Limits(max_connections=max(levels))) as http,
    ):

        async def direct(photo: bytes):
            await grpc_client.caption([photo])

        async def through_api(photo: bytes) -> dict:
            response = await http.post("/caption", files={"photo": ("photo.jpg", photo, "image/jpeg")})
            response.raise_for_status()
            return server_timing(response.headers["server-timing"])

        paths = {"grpc": direct, "api": through_api}
        for call in paths.values():  # warm-up: connections, lazy initialisation in every step
            await run_load(call, photos, 4, 12)
        for concurrency in levels:
            before = {model: await executions(triton_stats, model) for model in BATCHED_STEPS}
            samples: dict[str, Any] = {name: ([], [], 0.0) for name in paths}
            for round_index in range(rounds):
                order = list(paths) if round_index % 2 == 0 else list(reversed(paths))
                for name in order:
                    latencies, added, wall = await run_load(paths[name], photos, concurrency, per_round)
                    previous = samples[name]
                    samples[name] = (previous[0] + latencies, previous[1] + added, previous[2] + wall)
            grpc, api = summary(*samples["grpc"]), summary(*samples["api"])
            row = {
                "concurrency": concurrency,
                "grpc": grpc,
                "api": api,
                "api_over_grpc_throughput": api["rps"] / grpc["rps"],
                "p50_difference_ms": api["latency_p50_ms"] - grpc["latency_p50_ms"],
            }
            for model in BATCHED_STEPS:  # both paths together
                inferences, runs = (
                    now - then for now, then in zip(await executions(triton_stats, model), before[model])
                )
                row[f"{model}_mean_batch"] = inferences / runs
            print(json.dumps(row), flush=True)
            rows.append(row)
    await triton_stats.close()
    return rows


def markdown(result: dict) -> str:
    lines = [
        f"# API vs direct gRPC ({result['blip']})",
        "",
        f"{result['requests_per_path_and_level']} requests per path and level, same {result['photos']} photos, "
        "rounds alternating between paths.",
        "",
        "| concurrency | gRPC req/s | API req/s | API/gRPC throughput | gRPC p50 / p95 ms | API p50 / p95 ms "
        "| p50 difference ms | API hop p50 / p95 ms | of which API server p50 / p95 ms "
        "| classifier / captioner mean batch |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in result["rows"]:
        grpc, api = row["grpc"], row["api"]
        lines.append(
            f"| {row['concurrency']} | {grpc['rps']:.1f} | {api['rps']:.1f} | {row['api_over_grpc_throughput']:.3f} "
            f"| {grpc['latency_p50_ms']:.1f} / {grpc['latency_p95_ms']:.1f} "
            f"| {api['latency_p50_ms']:.1f} / {api['latency_p95_ms']:.1f} | {row['p50_difference_ms']:+.1f} "
            f"| {api['api_added_p50_ms']:.2f} / {api['api_added_p95_ms']:.2f} "
            f"| {api['api_server_p50_ms']:.2f} / {api['api_server_p95_ms']:.2f} "
            f"| {row['classifier_mean_batch']:.2f} / {row['captioner_mean_batch']:.2f} |"
        )
    lines += [
        "",
        "API hop: a request's latency through the API less the time the API waited on Triton (its "
        "Server-Timing `triton`): HTTP client, network, uvicorn, multipart parsing, FastAPI. Of which API "
        "server: Server-Timing `app` less `triton`, the time spent inside the API process. The p50 "
        "difference between the two paths also carries the dynamic batcher's queueing noise. Mean batch: "
        "inferences per execution Triton counted for the step, both paths together (single-image "
        "requests, so above 1 means requests from different clients were run together).",
    ]
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--blip-standin",
        choices=("tiny", "base"),
        default="tiny",
        help="BLIP stand-in of the repository built for the run (default: %(default)s)",
    )
    parser.add_argument("--repository", type=Path, help="use this built repository instead of building one")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 16])
    parser.add_argument("--requests", type=int, default=48, help="requests per path, level and round")
    parser.add_argument("--rounds", type=int, default=4, help="alternating rounds per level")
    parser.add_argument("--name", default="api_vs_grpc", help="results file name, without extension")
    args = parse_benchmark_args(parser, argv)

    photos = base_photos()
    with tempfile.TemporaryDirectory() as scratch:
        repository = args.repository or build_repository_copy(Path(scratch) / "model_repository", args.blip_standin)
        with TritonServer(repository, Path(scratch) / "triton", free_ports()) as triton:
            # Every caller admitted, as gRPC admits them: the comparison is of the hop, not of the API's cap.
            pinned = max(args.concurrency)  # the admission limit: every request of the sweep let in
            api = ApiProcess("127.0.0.1", free_port(), triton.grpc_url, min_in_flight=pinned, max_in_flight=pinned)
            try:
                api.wait_until_alive()
                rows = asyncio.run(
                    benchmark(photos, triton.grpc_url, api.url, args.concurrency, args.requests, args.rounds)
                )
            finally:
                api.stop()

    result = {
        "blip": f"BLIP stand-in {args.blip_standin}"
        if not args.repository
        else f"repository {portable_path(args.repository)}",
        "photos": len(photos),
        "requests_per_path_and_level": args.requests * args.rounds,
        "rows": rows,
    }
    print(write_results(args.name, result, markdown(result)).read_text())


if __name__ == "__main__":
    main()
