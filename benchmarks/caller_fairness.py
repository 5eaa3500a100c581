#!/usr/bin/env python3
"""Fairness between callers with caller keys on: one caller floods the API, another sends one request at a
time, and the second is still answered.

Starts tritonserver on a repository (default model_repository, what ``make serve`` serves; ``--repository``
another) and the API as a separate process, as in production, with two caller keys (``FOOD11_API_KEYS_FILE``)
and its in-flight limit pinned (``--limit``: min = max, so each caller's share, ``max(1, floor(limit *
share))``, is a known number; ``make overload`` measures the adaptive limit). Then for ``--seconds``:

- ``flood`` keeps ``--flood-concurrency`` uploads going (default 4x the limit), each worker pausing
  ``--refused-pause-s`` after a refusal: without it, on a machine whose load generator shares the servers'
  cores, the flooder's own refusals would take the CPU the pipeline runs on, which measures the machine, not
  the share;
- ``steady`` sends one upload at a time;
- ``unknown key`` sends one at a time with a key the API does not know (and the same pause): refused with 401
  before its body is read, taking no place.

Per caller: requests sent, answered, refused (401, 503), failed otherwise, and the p50/p95 latency of the
answered. Writes benchmarks/results/caller_fairness.{md,json}. Not a test: nothing here asserts.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import re
import secrets
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from benchmarks.lib.load import run_load
from benchmarks.lib.percentiles import percentiles_ms
from benchmarks.lib.photos import base_photos
from benchmarks.lib.report import markdown_table
from benchmarks.lib.results import parse_benchmark_args, portable_path, write_results
from pipeline_src import PROJECT_ROOT
from pipeline_src.serving.launcher import ApiProcess, TritonServer
from pipeline_src.serving.ports import free_port, free_ports

FAILED = 0  # the status recorded for a request that got no HTTP answer
COLUMNS = [
    "caller",
    "concurrency",
    "sent",
    "answered",
    "answered/s",
    "refused 401",
    "refused 503",
    "failed",
    "p50 ms",
    "p95 ms",
]


@dataclass
class Caller:
    """One caller of the run: its key, how many uploads it keeps going, and what it got back."""

    name: str
    key: str
    concurrency: int
    pause_after_refusal_s: float = 0.0
    statuses: Counter[int] = field(default_factory=Counter)
    answered_s: list[float] = field(default_factory=list)

    async def upload(self, http: httpx.AsyncClient, photo: bytes) -> None:
        started = time.perf_counter()
        try:
            response = await http.post(
                "/caption",
                files={"photo": ("photo.jpg", photo, "image/jpeg")},
                headers={"Authorization": f"Bearer {self.key}"},
            )
            status = response.status_code
        except httpx.TransportError:  # e.g. a connection closed under an upload
            status = FAILED
        self.statuses[status] += 1
        if status == 200:
            self.answered_s.append(time.perf_counter() - started)
        elif self.pause_after_refusal_s:
            await asyncio.sleep(self.pause_after_refusal_s)

    def summary(self, seconds: float) -> dict:
        sent, answered = sum(self.statuses.values()), self.statuses[200]
        latency = percentiles_ms([s * 1000 for s in self.answered_s], (50, 95)) if self.answered_s else {}
        return {
            "caller": self.name,
            "concurrency": self.concurrency,
            "sent": sent,
            "answered": answered,
            "refused 401": self.statuses[401],
            "refused 503": self.statuses[503],
            "failed": sent - answered - self.statuses[401] - self.statuses[503],
            "answered/s": answered / seconds,
            "p50 ms": latency.get("p50_ms"),  # None: nothing answered
            "p95 ms": latency.get("p95_ms"),
            "statuses": {str(status): count for status, count in sorted(self.statuses.items())},
        }


async def measure(api_url: str, callers: list[Caller], photos: list[bytes], seconds: float) -> dict[int, int]:
    """A warm-up (each photo once, one at a time, as the steady caller: connections, every step's first
    run), then every caller at its concurrency until ``seconds`` have passed, each with its own connections.
    Returns the warm-up's statuses."""
    warm_up = Caller("warm-up", next(caller.key for caller in callers if caller.name == "steady"), 1)
    async with httpx.AsyncClient(base_url=api_url, timeout=300) as http:
        for photo in photos:
            await warm_up.upload(http, photo)
    print(f"flooding {api_url} for {seconds:g} s", flush=True)

    async def run(caller: Caller) -> None:
        limits = httpx.Limits(max_connections=caller.concurrency)
        async with httpx.AsyncClient(base_url=api_url, timeout=300, limits=limits) as http:
            await run_load(lambda photo: caller.upload(http, photo), photos, caller.concurrency, sys.maxsize, until)

    until = time.monotonic() + seconds
    await asyncio.gather(*(run(caller) for caller in callers))
    return dict(warm_up.statuses)


def refusals_by(api_url: str) -> dict[str, float]:
    """food11_refused_total{by} as the API counted them."""
    text = httpx.get(f"{api_url}/metrics", timeout=30).text
    return {by: float(count) for by, count in re.findall(r'^food11_refused_total\{by="(\w+)"\} (\S+)$', text, re.M)}


def markdown(result: dict) -> str:
    steady = next(row for row in result["callers"] if row["caller"] == "steady")
    verdict = (
        "**The steady caller was never refused.**"
        if steady["refused 503"] == 0
        else f"**The steady caller was refused {steady['refused 503']} times.**"
    )
    paragraphs = [
        f"{result['repository']}. The API's in-flight limit pinned at {result['limit']}, caller share "
        f"{result['caller_share']:g}: each caller may hold {result['caller_limit']} requests in flight. "
        f"{result['seconds']:g} s; the flooder and the caller with an unknown key pause "
        f"{result['refused_pause_s']:g} s after each refusal.",
        verdict,
        "Refused 503: the caller's share (or the limit) was full, answered at once with Retry-After; 401: no "
        "known key, answered before the body is read. Latency percentiles are of the answered requests. The "
        f"API counted refusals by: {result['api_refused_by']}.",
    ]
    rows = [{column: "-" if value is None else value for column, value in row.items()} for row in result["callers"]]
    return markdown_table("Fairness between callers", paragraphs, COLUMNS, rows)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repository", type=Path, default=PROJECT_ROOT / "model_repository")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--limit", type=int, default=8, help="the API's in-flight limit, pinned (default: %(default)s)")
    parser.add_argument(
        "--caller-share", type=float, default=0.5, help="FOOD11_API_CALLER_SHARE (default: %(default)s)"
    )
    parser.add_argument("--flood-concurrency", type=int, help="default: 4x the limit")
    parser.add_argument(
        "--refused-pause-s", type=float, default=0.1, help="a refused worker's pause (default: %(default)s)"
    )
    parser.add_argument("--name", default="caller_fairness", help="results file name, without extension")
    args = parse_benchmark_args(parser, argv)

    photos = base_photos()
    keys = {"flood": secrets.token_urlsafe(32), "steady": secrets.token_urlsafe(32)}
    callers = [
        Caller("flood", keys["flood"], args.flood_concurrency or 4 * args.limit, args.refused_pause_s),
        Caller("steady", keys["steady"], 1),
        Caller("unknown key", secrets.token_urlsafe(32), 1, args.refused_pause_s),
    ]
    with tempfile.TemporaryDirectory() as scratch:
        keys_file = Path(scratch) / "api-keys"
        keys_file.write_text("".join(f"{name}:{key}\n" for name, key in keys.items()))
        with TritonServer(args.repository, Path(scratch) / "triton", free_ports()) as triton:
            api = ApiProcess(
                "127.0.0.1",
                free_port(),
                triton.grpc_url,
                keys_file=keys_file,
                min_in_flight=args.limit,
                max_in_flight=args.limit,
                caller_share=args.caller_share,
            )
            try:
                api.wait_until_alive()
                warm_up_statuses = asyncio.run(measure(api.url, callers, photos, args.seconds))
                refused_by = refusals_by(api.url)
            finally:
                api.stop()

    result = {
        "repository": f"Model repository {portable_path(args.repository)}",
        "seconds": args.seconds,
        "limit": args.limit,
        "caller_share": args.caller_share,
        "caller_limit": max(1, math.floor(args.limit * args.caller_share)),
        "refused_pause_s": args.refused_pause_s,
        "warm_up_statuses": warm_up_statuses,
        "callers": [caller.summary(args.seconds) for caller in callers],
        "api_refused_by": refused_by,
    }
    print(write_results(args.name, result, markdown(result)).read_text())


if __name__ == "__main__":
    main()
