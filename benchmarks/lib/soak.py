"""Load and soak through the API: every request answered once, by its own photo's result (label,
probability and caption), and the servers' memory flat. ``benchmarks/soak.py`` runs it in full;
tests/benchmarks/test_soak.py runs a short version."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import httpx

from benchmarks.lib.load import latency_summary
from benchmarks.lib.memory import MemorySampler
from food11_client import AsyncFood11Client

# Batched and single ONNX Runtime runs of the same photo may differ in the last bits of a float32
# probability; anything beyond this is a different photo's answer.
PROBABILITY_TOLERANCE = 1e-5


@dataclass(frozen=True)
class Expected:
    label: str
    probability: float
    caption: str


@dataclass
class Outcome:
    request_id: str
    photo: int
    status: int
    latency_s: float
    echoed_id: str = ""
    label: str = ""
    probability: float = float("nan")
    caption: str = ""
    detail: str = ""


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


async def ground_truth(grpc_url: str, photos: Sequence[bytes]) -> list[Expected]:
    """Each photo alone, straight to Triton: what its answer must be under load."""
    async with AsyncFood11Client(grpc_url, timeout_s=600) as client:
        truth = []
        for photo in photos:
            (result,) = await client.caption([photo])
            truth.append(Expected(result.label, result.probability, result.caption))
        return truth


async def drive_api(
    api_url: str, photos: Sequence[bytes], total: int, concurrency: int, id_prefix: str = "soak"
) -> list[Outcome]:
    """``total`` uploads by ``concurrency`` workers over one connection pool, each with its own X-Request-ID."""
    outcomes: list[Outcome] = []
    requests = iter(range(total))
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=api_url, timeout=900, limits=limits) as http:

        async def worker() -> None:
            for index in requests:
                request_id, photo = f"{id_prefix}-{index}", index % len(photos)
                started = time.perf_counter()
                try:
                    response = await http.post(
                        "/caption",
                        files={"photo": (f"{photo}.jpg", photos[photo], "image/jpeg")},
                        headers={"X-Request-ID": request_id},
                    )
                except httpx.HTTPError as exc:
                    outcomes.append(Outcome(request_id, photo, 0, time.perf_counter() - started, detail=repr(exc)))
                    continue
                outcome = Outcome(
                    request_id,
                    photo,
                    response.status_code,
                    time.perf_counter() - started,
                    echoed_id=response.headers.get("x-request-id", ""),
                )
                body = response.json()
                if response.status_code == 200:
                    outcome.label, outcome.probability, outcome.caption = (
                        body["label"],
                        body["probability"],
                        body["caption"],
                    )
                else:
                    outcome.detail = body.get("detail", "")
                outcomes.append(outcome)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return outcomes


def check(outcomes: Sequence[Outcome], truth: Sequence[Expected], sent: int, id_prefix: str = "soak") -> SoakChecks:
    """Zero failed, zero lost (every id answered exactly once), every answer its own photo's."""
    checks = SoakChecks(sent=sent, answered=len(outcomes))
    answered_ids = [outcome.request_id for outcome in outcomes]
    checks.lost = sorted({f"{id_prefix}-{index}" for index in range(sent)} - set(answered_ids))
    for outcome in outcomes:
        if outcome.status != 200:
            checks.failed.append(f"{outcome.request_id}: {outcome.status} {outcome.detail}")
            continue
        expected = truth[outcome.photo]
        # A caption is exact: the captioner gives a row the same tokens in any batch.
        if (
            outcome.echoed_id != outcome.request_id
            or outcome.label != expected.label
            or abs(outcome.probability - expected.probability) > PROBABILITY_TOLERANCE
            or outcome.caption != expected.caption
        ):
            checks.mismatched.append(
                f"{outcome.request_id} (photo {outcome.photo}): got {outcome.label} "
                f"{outcome.probability:.6f} {outcome.caption!r} as {outcome.echoed_id!r}, "
                f"expected {expected.label} {expected.probability:.6f} {expected.caption!r}"
            )
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
    await drive_api(api_url, photos, warmup, concurrency, id_prefix="warmup")
    sampler = MemorySampler(server_pids) if server_pids else None
    started = time.perf_counter()
    if sampler:
        with sampler:
            outcomes = await drive_api(api_url, photos, total, concurrency)
    else:
        outcomes = await drive_api(api_url, photos, total, concurrency)
    wall_s = time.perf_counter() - started
    checks = check(outcomes, truth, total)
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
        **{
            key: value
            for key, value in latency_summary([o.latency_s for o in outcomes], wall_s).items()
            if key != "requests"
        },
        **(sampler.growth() if sampler else {}),
        "memory_samples": sampler.samples if sampler else [],
        "examples": (checks.failed + checks.lost + checks.mismatched)[:10],
    }
