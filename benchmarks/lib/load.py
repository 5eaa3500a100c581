"""The Python load generator every HTTP and gRPC benchmark shares: N calls by C concurrent workers."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence

import numpy as np

from benchmarks.lib.percentiles import percentiles_ms

Call = Callable[[bytes], Awaitable[None]]


async def run_load(
    call: Call, photos: Sequence[bytes], concurrency: int, total: int, until: float | None = None
) -> tuple[list[float], float]:
    """``total`` calls by ``concurrency`` workers, each taking the next photo in turn (stopping early once
    ``time.monotonic()`` passes ``until``): per-call latencies (s) and the wall time (s)."""
    latencies: list[float] = []
    counter = iter(range(total))

    async def worker():
        for index in counter:
            if until is not None and time.monotonic() > until:
                return
            started = time.perf_counter()
            await call(photos[index % len(photos)])
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies, time.perf_counter() - started


def latency_summary(latencies: Sequence[float], wall_s: float) -> dict[str, float]:
    """Requests, throughput and p50/p95/p99 latency (ms) of one load run."""
    ms = np.asarray(latencies) * 1000
    return {"requests": len(latencies), "throughput": len(latencies) / wall_s, **percentiles_ms(ms)}
