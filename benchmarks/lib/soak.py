"""Load and soak through the API: every request answered once, by its own photo's result (label,
probability and caption), and the servers' memory flat. ``benchmarks/soak.py`` runs it in full;
tests/benchmarks/test_soak.py runs a short version."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import httpx

from benchmarks.lib.load import OK, WRONG, Expected, Outcome, ground_truth, latency_summary, run_load, upload
from benchmarks.lib.memory import MemorySampler


@dataclass
class SoakChecks:
    sent: int
    answered: int = 0
    failed: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    mismatched: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.answered == self.sent and not (self.failed or self.lost or self.mismatched)


async def drive_api(
    api_url: str,
    photos: Sequence[bytes],
    truth: Sequence[Expected],
    total: int,
    concurrency: int,
    id_prefix: str = "soak",
) -> list[Outcome]:
    """``total`` uploads by ``concurrency`` workers over one connection pool, each with its own X-Request-ID."""
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=api_url, timeout=900, limits=limits) as http:
        outcomes, _ = await run_load(lambda index: upload(http, photos, truth, index, id_prefix), concurrency, total)
    return outcomes


def check(outcomes: Sequence[Outcome], sent: int, id_prefix: str = "soak") -> SoakChecks:
    """Zero failed, zero lost (every id answered exactly once), every answer its own photo's: a caption is
    exact, as the captioner gives a row the same tokens in any batch."""
    checks = SoakChecks(sent=sent, answered=len(outcomes))
    checks.lost = sorted({f"{id_prefix}-{index}" for index in range(sent)} - {o.request_id for o in outcomes})
    for o in outcomes:
        if o.verdict != OK:
            said = f"{o.request_id} (photo {o.photo}): " + " ".join(filter(None, (o.failure, o.detail)))
            (checks.mismatched if o.verdict == WRONG else checks.failed).append(said)
    return checks


async def soak(
    api_url: str,
    grpc_url: str,
    photos: Sequence[bytes],
    total: int,
    concurrency: int,
    server_pids: Sequence[int] = (),
    warmup: int | None = None,
) -> dict:
    """Ground truth, a warm-up round, then ``total`` requests at ``concurrency`` while sampling memory.

    Warm-up (default: a fifth of ``total``, at least 2 x ``concurrency``): memory first grows under full load
    (batches of every size allocated once, shared-memory regions grown) and then stays flat, so growth is
    measured from after it (the figures: benchmarks/results/soak.md)."""
    truth = await ground_truth(grpc_url, photos)
    warmup = max(2 * concurrency, total // 5) if warmup is None else warmup
    await drive_api(api_url, photos, truth, warmup, concurrency, id_prefix="warmup")
    sampler = MemorySampler(server_pids) if server_pids else None
    started = time.perf_counter()
    with sampler or contextlib.nullcontext():
        outcomes = await drive_api(api_url, photos, truth, total, concurrency)
    wall_s = time.perf_counter() - started
    checks = check(outcomes, total)
    latency = latency_summary([o.ended - o.sent for o in outcomes], wall_s)
    del latency["requests"]  # the result's "requests" are those sent, answered or not
    return {
        "requests": total,
        "warmup_requests": warmup,
        "concurrency": concurrency,
        "photos": len(photos),
        "distinct_probabilities": len({round(expected.probability, 6) for expected in truth}),
        "distinct_captions": len({expected.caption for expected in truth}),
        "answered": checks.answered,
        "failed": len(checks.failed),
        "lost": len(checks.lost),
        "mismatched": len(checks.mismatched),
        "ok": checks.ok,
        "wall_s": wall_s,
        **latency,
        **(sampler.growth() if sampler else {}),
        "memory_samples": sampler.samples if sampler else [],
        "examples": (checks.failed + checks.lost + checks.mismatched)[:10],
    }
