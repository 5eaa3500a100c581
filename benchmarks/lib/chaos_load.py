"""The chaos run's load: uploads through the API without pause while faults are injected, each with a client
deadline, each judged against its own photo's answer (benchmarks/lib/soak.py's ground truth).

Every request ends one of four ways: ``ok`` (its own photo's label, probability and caption), ``wrong`` (a 200
with another photo's answer, or another request's id: must never happen), ``failed`` (an error the caller is
told of: an HTTP status, a 200 without its caption, a refused or broken connection) or ``unanswered`` (neither
an answer nor an error within the deadline: must never happen either)."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass

import httpx

from benchmarks.lib.soak import PROBABILITY_TOLERANCE, Expected
from pipeline_src.contract import CaptionStatus

OK, WRONG, FAILED, UNANSWERED = "ok", "wrong", "failed", "unanswered"
CAPTIONED = (CaptionStatus.OK.value, CaptionStatus.LOW_CONFIDENCE.value)  # the others: no caption, and why


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


class Load:
    """``concurrency`` workers, each sending the next photo as soon as its last request ended (after
    ``retry_pause_s`` when that one did not end well, as a client backing off would), until stopped."""

    def __init__(
        self,
        api_url: str,
        photos: Sequence[bytes],
        truth: Sequence[Expected],
        concurrency: int,
        deadline_s: float,
        retry_pause_s: float = 0.5,
    ):
        self.api_url, self.photos, self.truth = api_url, photos, truth
        self.concurrency, self.deadline_s, self.retry_pause_s = concurrency, deadline_s, retry_pause_s
        self.outcomes: list[Outcome] = []
        self._counter = itertools.count()
        self._stop = asyncio.Event()

    def correct_since(self, since: float) -> Outcome | None:
        """The first correct answer to a request sent at or after ``since``."""
        return next((o for o in self.outcomes if o.verdict == OK and o.sent >= since), None)

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        limits = httpx.Limits(max_connections=self.concurrency, max_keepalive_connections=self.concurrency)
        # httpx's own timeout is a backstop only: the deadline below bounds the whole request.
        async with httpx.AsyncClient(base_url=self.api_url, timeout=self.deadline_s + 30, limits=limits) as http:
            await asyncio.gather(*(self._worker(http) for _ in range(self.concurrency)))

    async def _worker(self, http: httpx.AsyncClient) -> None:
        while not self._stop.is_set():
            outcome = await self._one(http, next(self._counter))
            self.outcomes.append(outcome)
            if outcome.verdict != OK:
                await asyncio.sleep(self.retry_pause_s)

    async def _one(self, http: httpx.AsyncClient, index: int) -> Outcome:
        request_id, photo = f"chaos-{index}", index % len(self.photos)
        sent = time.monotonic()
        try:
            response = await asyncio.wait_for(
                http.post(
                    "/caption",
                    files={"photo": (f"{photo}.jpg", self.photos[photo], "image/jpeg")},
                    headers={"X-Request-ID": request_id},
                ),
                self.deadline_s,
            )
        except (asyncio.TimeoutError, httpx.TimeoutException) as exc:
            return Outcome(request_id, photo, sent, time.monotonic(), UNANSWERED, "no answer", repr(exc))
        except httpx.HTTPError as exc:  # refused (the API restarting) or cut (it died mid-request)
            return Outcome(request_id, photo, sent, time.monotonic(), FAILED, f"connection: {type(exc).__name__}")
        ended = time.monotonic()
        try:
            body = response.json()
        except ValueError:
            return Outcome(
                request_id, photo, sent, ended, FAILED, f"{response.status_code} not JSON", response.text[:300]
            )
        verdict, failure, detail = judge(
            response.status_code,
            body if isinstance(body, dict) else {},
            response.headers.get("x-request-id", ""),
            request_id,
            self.truth[photo],
        )
        return Outcome(request_id, photo, sent, ended, verdict, failure, detail)
