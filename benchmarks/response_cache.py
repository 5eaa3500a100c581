#!/usr/bin/env python3
"""A photo asked again, answered from Triton's response cache: how fast, and whether the answer is the same.

Starts tritonserver on the repository (the base stand-in by default: ``make models``) with the local response
cache, as ``make serve`` does (``--response-cache-mib``), and the API in front of it. Each photo is asked once
(computed: a cache miss) and then ``--repeats`` times (answered from the cache), one call at a time, through
gRPC (``food11_client``) and through the API's ``POST /caption``; every repeat must equal its first answer.
Triton's statistics (the ensemble's cache hits and misses at its served version) and its cache metrics
(``nv_cache_num_hits``) and the API's (``food11_response_cache_hits``) say the repeats were hits. Writes
benchmarks/results/response_cache.{md,json}. Not a test: the figures are for reading.
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import time
import urllib.request
from pathlib import Path

import httpx

from benchmarks.lib.load import latency_summary
from benchmarks.lib.photos import varied_photos
from benchmarks.lib.results import parse_benchmark_args, write_results
from food11_client import Food11Client
from pipeline_src import PROJECT_ROOT
from pipeline_src.contract import ENSEMBLE
from pipeline_src.serving.launcher import ApiProcess, TritonServer
from pipeline_src.serving.ports import free_port, free_ports
from pipeline_src.serving.repository_api import TritonRepositoryApi
from pipeline_src.serving.response_cache import local_cache_args

METRICS_INTERVAL_S = 2.5  # Triton refreshes its cache metrics every 2 s (--metrics-interval-ms)


def timed(call, *args):
    sent = time.perf_counter()
    answer = call(*args)
    return time.perf_counter() - sent, answer


def ensemble_cache_counts(triton: TritonServer) -> dict[str, int]:
    (version,) = TritonRepositoryApi(triton.http_url, triton.admin_http_headers).ready_versions()[ENSEMBLE]
    with urllib.request.urlopen(f"http://{triton.http_url}/v2/models/{ENSEMBLE}/stats") as response:
        (stats,) = [s for s in json.loads(response.read())["model_stats"] if s["version"] == version]
    inference = stats["inference_stats"]
    return {
        "version": int(version),
        "hits": inference["cache_hit"]["count"],
        "misses": inference["cache_miss"]["count"],
    }


def metric_values(url: str, pattern: str) -> dict[str, float]:
    with urllib.request.urlopen(url) as response:
        text = response.read().decode()
    return {m.group(1): float(m.group(2)) for m in re.finditer(rf"^({pattern}(?:{{[^}}]*}})?) (\S+)$", text, re.M)}


def ask_repeatedly(ask, photos: list[bytes], repeats: int) -> dict:
    """Each photo once (computed), then ``repeats`` times (from the cache): latencies, and repeats unlike the first."""
    first, again, differing = [], [], 0
    for photo in photos:
        elapsed, answer = timed(ask, photo)
        first.append(elapsed)
        for _ in range(repeats):
            elapsed, repeated = timed(ask, photo)
            again.append(elapsed)
            differing += repeated != answer
    return {
        "first": latency_summary(first, sum(first)),
        "repeat": latency_summary(again, sum(again)),
        "differing": differing,
    }


def through_grpc(triton: TritonServer, photos: list[bytes], repeats: int) -> dict:
    with Food11Client(triton.grpc_url) as client:
        return ask_repeatedly(lambda photo: client.caption([photo]), photos, repeats)


def through_api(api_url: str, photos: list[bytes], repeats: int) -> dict:
    with httpx.Client(base_url=api_url, timeout=600) as http:

        def caption(photo: bytes) -> dict:
            response = http.post("/caption", files={"photo": ("photo.jpg", photo, "image/jpeg")})
            response.raise_for_status()
            return {name: value for name, value in response.json().items() if name != "elapsed_ms"}

        return ask_repeatedly(caption, photos, repeats)


def measure(repository: Path, photos: list[bytes], repeats: int, cache_mib: int) -> dict:
    with tempfile.TemporaryDirectory() as scratch:
        triton = TritonServer(
            repository,
            Path(scratch),
            free_ports(),
            extra_args=("--model-control-mode=explicit", "--load-model=*", *local_cache_args(cache_mib)),
        )
        with triton:
            before = ensemble_cache_counts(triton)
            grpc = through_grpc(triton, photos[: len(photos) // 2], repeats)
            api = ApiProcess("127.0.0.1", free_port(), triton.grpc_url)
            try:
                api.wait_until_alive()
                api_figures = through_api(api.url, photos[len(photos) // 2 :], repeats)
                time.sleep(METRICS_INTERVAL_S)
                api_metrics = metric_values(f"{api.url}/metrics", "food11_response_cache_(?:hits|misses)_total")
            finally:
                api.stop()
            after = ensemble_cache_counts(triton)
            triton_metrics = metric_values(f"http://{triton.metrics_url}/metrics", "nv_cache_num_(?:hits|misses)")
    return {
        "grpc": grpc,
        "api": api_figures,
        "ensemble_cache": {
            "version": after["version"],
            "hits": after["hits"] - before["hits"],
            "misses": after["misses"] - before["misses"],
        },
        "triton_metrics": triton_metrics,
        "api_metrics": api_metrics,
    }


def markdown(result: dict) -> str:
    half = result["photos"] // 2
    lines = [
        "# A photo asked again: Triton's response cache",
        "",
        f"`{ENSEMBLE}` with Triton's local response cache ({result['cache_mib']} MiB, as `make serve` starts it), "
        f"repository `{result['repository']}`. One call at a time: each photo asked once (computed), then "
        f"{result['repeats']} times more (from the cache); {half} photos through gRPC (`food11_client`), "
        f"{result['photos'] - half} others through the API's `POST /caption`.",
        "",
        "| path | call | calls | p50 ms | p95 ms | p99 ms | answers differing from the first |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for path in ("grpc", "api"):
        for call in ("first", "repeat"):
            f = result[path][call]
            differing = result[path]["differing"] if call == "repeat" else ""
            lines.append(
                f"| {path} | {call} | {f['requests']} | {f['p50_ms']:.2f} | {f['p95_ms']:.2f} | {f['p99_ms']:.2f} "
                f"| {differing} |"
            )
    cache = result["ensemble_cache"]
    speedup = result["grpc"]["first"]["p50_ms"] / result["grpc"]["repeat"]["p50_ms"]
    lines += [
        "",
        f"gRPC, first over repeat at p50: **{speedup:.0f}x**. Triton's statistics for `{ENSEMBLE}` (version "
        f"{cache['version']}, the repository's revision): {cache['hits']} cache hits, {cache['misses']} misses. "
        "Triton's cache metrics: "
        + ", ".join(f"`{name}` {value:g}" for name, value in result["triton_metrics"].items())
        + "; the API's: "
        + (", ".join(f"`{name}` {value:g}" for name, value in result["api_metrics"].items()) or "none")
        + ".",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repository", type=Path, default=PROJECT_ROOT / "model_repository")
    parser.add_argument("--photos", type=int, default=8, help="distinct photos, half per path (default: %(default)s)")
    parser.add_argument(
        "--repeats", type=int, default=20, help="calls per photo after its first (default: %(default)s)"
    )
    parser.add_argument("--cache-mib", type=int, default=64, help="(default: %(default)s)")
    parser.add_argument("--name", default="response_cache", help="results file name, without extension")
    args = parse_benchmark_args(parser, argv)
    photos = varied_photos(args.photos)
    result = measure(args.repository, photos, args.repeats, args.cache_mib)
    result.update(photos=len(photos), repeats=args.repeats, cache_mib=args.cache_mib, repository=str(args.repository))
    path = write_results(args.name, result, markdown(result))
    print(path.read_text())


if __name__ == "__main__":
    main()
