"""The Python load generator every HTTP and gRPC benchmark shares: a closed loop of C concurrent workers, each
calling again as soon as its last call ended. And how an upload through the API is judged against its own
photo's answer, taken alone straight from Triton (``ground_truth``).

An upload ends one of four ways: ``ok`` (its own photo's label, probability and caption), ``wrong`` (a 200 with
another photo's answer, or another request's id: must never happen), ``failed`` (an error the caller is told
of: an HTTP status, a 200 without its caption, a refused or broken connection) or ``unanswered`` (neither an
answer nor an error within the client's deadline: must never happen either)."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import httpx
import numpy as np

from benchmarks.lib.percentiles import percentiles_ms
from food11_client import AsyncFood11Client
from pipeline_src.contract import CaptionStatus

T = TypeVar("T")
# Batched and single ONNX Runtime runs of the same photo may differ in the last bits of a float32
# probability; anything beyond this is a different photo's answer.
PROBABILITY_TOLERANCE = 1e-5
OK, WRONG, FAILED, UNANSWERED = "ok", "wrong", "failed", "unanswered"
CAPTIONED = (CaptionStatus.OK.value, CaptionStatus.LOW_CONFIDENCE.value)  # the others: no caption, and why


async def run_load(
    call: Callable[[int], Awaitable[T]],
    concurrency: int,
    total: int | None = None,
    until: float | None = None,
    stop: asyncio.Event | None = None,
    into: list[T] | None = None,
) -> tuple[list[T], float]:
    """``call(0)``, ``call(1)``, ... by ``concurrency`` workers, until ``total`` calls (None: no limit), or
    ``time.monotonic()`` past ``until``, or ``stop`` set: what the calls returned, appended to ``into`` as they
    end (a list read while the load runs), and the wall time (s)."""
    results: list[T] = [] if into is None else into
    indices = itertools.count() if total is None else iter(range(total))

    async def worker() -> None:
        for index in indices:
            if (until is not None and time.monotonic() > until) or (stop is not None and stop.is_set()):
                return
            results.append(await call(index))

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return results, time.perf_counter() - started


async def timed(work: Awaitable[object]) -> float:
    """The seconds ``work`` took."""
    started = time.perf_counter()
    await work
    return time.perf_counter() - started


def latency_summary(latencies: Sequence[float], wall_s: float) -> dict[str, float]:
    """Requests, throughput and p50/p95/p99 latency (ms) of one load run."""
    ms = np.asarray(latencies) * 1000
    return {"requests": len(latencies), "throughput": len(latencies) / wall_s, **percentiles_ms(ms)}


@dataclass(frozen=True)
class Expected:
    label: str
    probability: float
    caption: str


async def ground_truth(grpc_url: str, photos: Sequence[bytes]) -> list[Expected]:
    """Each photo alone, straight to Triton: what its answer must be under load."""
    async with AsyncFood11Client(grpc_url, timeout_s=600) as client:
        truth = []
        for photo in photos:
            (result,) = await client.caption([photo])
            truth.append(Expected(result.label, result.probability, result.caption))
        return truth


@dataclass(frozen=True)
class Outcome:
    request_id: str
    photo: int
    sent: float  # time.monotonic()
    ended: float  # when the answer, the error or the deadline came
    verdict: str  # OK, WRONG, FAILED or UNANSWERED
    failure: str = ""  # for FAILED: "503", "200 captioner_error", "connection: ConnectError", ...
    detail: str = ""


def judge(status: int, body: dict, echoed_id: str, request_id: str, expected: Expected) -> tuple[str, str, str]:
    """(verdict, failure, detail) of one HTTP answer to the photo whose answer is ``expected``."""
    if status != 200:
        return FAILED, str(status), str(body.get("detail", ""))[:300]
    label, probability = body.get("label"), body.get("probability", float("nan"))
    caption, caption_status = body.get("caption", ""), str(body.get("caption_status", ""))
    theirs = f"got {label} {probability} {caption!r} as {echoed_id!r}"
    if (
        echoed_id != request_id
        or label != expected.label
        or not abs(probability - expected.probability) <= (PROBABILITY_TOLERANCE)
    ):
        return WRONG, "", f"{theirs}, expected {expected.label} {expected.probability}"
    if caption_status.split(":")[0] not in CAPTIONED:  # its own label, told its caption failed: an error
        return FAILED, f"200 {caption_status.split(':')[0]}", caption_status[:300]
    if caption != expected.caption:
        return WRONG, "", f"{theirs}, expected the caption {expected.caption!r}"
    return OK, "", ""


async def upload(
    http: httpx.AsyncClient,
    photos: Sequence[bytes],
    truth: Sequence[Expected],
    index: int,
    id_prefix: str,
    deadline_s: float | None = None,
) -> Outcome:
    """Upload ``index`` (photo ``index`` mod their count, X-Request-ID ``<id_prefix>-<index>``), judged."""
    request_id, photo = f"{id_prefix}-{index}", index % len(photos)
    sent = time.monotonic()
    try:
        response = await asyncio.wait_for(
            http.post(
                "/caption",
                files={"photo": (f"{photo}.jpg", photos[photo], "image/jpeg")},
                headers={"X-Request-ID": request_id},
            ),
            deadline_s,
        )
    except (asyncio.TimeoutError, httpx.TimeoutException) as exc:
        return Outcome(request_id, photo, sent, time.monotonic(), UNANSWERED, "no answer", repr(exc))
    except httpx.HTTPError as exc:  # refused (the API restarting) or cut (it died mid-request)
        return Outcome(request_id, photo, sent, time.monotonic(), FAILED, f"connection: {type(exc).__name__}")
    ended = time.monotonic()
    try:
        body = response.json()
    except ValueError:
        return Outcome(request_id, photo, sent, ended, FAILED, f"{response.status_code} not JSON", response.text[:300])
    echoed = response.headers.get("x-request-id", "")
    verdict = judge(response.status_code, body if isinstance(body, dict) else {}, echoed, request_id, truth[photo])
    return Outcome(request_id, photo, sent, ended, *verdict)


def correct_since(outcomes: Sequence[Outcome], since: float) -> Outcome | None:
    """The first correct answer to a request sent at or after ``since``."""
    return next((o for o in outcomes if o.verdict == OK and o.sent >= since), None)
