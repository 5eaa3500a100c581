"""The captioner step's loop, in-flight batching: a request's rows join the decoder's table (``fixed_buffers``) at the
next step boundary, whole and in arrival order, and leave when their captions end: no request waits for a batch in
progress. It runs in a thread and knows nothing of Triton: ``model.py`` hands it jobs, each with the function that
answers it, and returns at once, so Triton's queue in front of the step stays empty and the loop plays its policy for
the waiting requests (``max_waiting_requests``, ``waiting_timeout_microseconds``: docs/configuration.md), in Triton's
words, which callers read as over capacity (``pipeline_src.contract.QUEUE_REFUSALS``). A request whose caller has gone
is dropped before it joins. One state (waiting requests, rows, answers) that one thread changes between steps.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnxruntime as ort

from pipeline_src.contract import QUEUE_REFUSALS, QUEUE_TIMED_OUT
from pipeline_src.steps.batching import Refused
from pipeline_src.steps.captioning import GreedyCaptioner, join_caption
from pipeline_src.steps.fixed_buffers import FixedBufferDecoder, runs
from pipeline_src.steps.settings import CaptionerSettings

QUEUE_FULL = QUEUE_REFUSALS[0]
EXACT, FAST = "exact", "fast"  # CAPTION_MODE: which graphs made a caption


@dataclass(frozen=True)
class QueuePolicy:
    """What Triton's ``default_queue_policy`` would do, for the requests waiting to join the table."""

    max_queue_size: int = 0  # 0: no limit (Triton's meaning)
    default_timeout_us: int = 0  # 0: none
    allow_timeout_override: bool = False

    @classmethod
    def from_settings(cls, settings: CaptionerSettings) -> QueuePolicy:
        """The captioner's ``max_waiting_requests`` and ``waiting_timeout_microseconds``; a caller's time left
        overrides (as ``allow_timeout_override``)."""
        return cls(settings.max_waiting_requests, settings.waiting_timeout_microseconds, allow_timeout_override=True)

    def deadline(self, arrived: float, request_timeout_us: int) -> float | None:
        """When a request that arrived at ``arrived`` (time.monotonic) must have joined, or None. Triton's rule
        (core's PolicyQueue::Enqueue): the default timeout, or the request's own where the policy allows an
        override and it is shorter; 0 is none."""
        timeout_us = self.default_timeout_us
        if self.allow_timeout_override and 0 < request_timeout_us < timeout_us:
            timeout_us = request_timeout_us
        return arrived + timeout_us / 1e6 if timeout_us else None


@dataclass
class Job:
    """One request: its images' embeddings and prompts, and how to answer it (called once, from the loop's thread,
    with the captions or the exception that ends it)."""

    image_embeds: np.ndarray | None  # [n, image tokens, width], or None with pixels
    prompts: list[str]
    # called with the captions and, for each, which mode made it (CAPTION_MODE), or with the error that ends it
    answer: Callable[[list[str] | None, BaseException | None, list[str] | None], None]
    deadline: float | None = None  # time.monotonic by which it must have joined
    is_cancelled: Callable[[], bool] = lambda: False
    pixels: np.ndarray | None = None  # uint8 [n, 3, 384, 384], in place of image_embeds: the loop encodes them
    rows: list[int] = field(default_factory=list)  # its rows in the table, once joined
    tokens: list[list[int]] = field(default_factory=list)
    redone: list[int] = field(default_factory=list)  # per row: the steps the fast mode's guard redid exactly
    open_rows: int = 0


class CaptionEngine:
    """The loop over the decoder's table (see the module's docstring). ``close`` stops it; every request still
    waiting or in progress is then answered with an error, none is dropped silently."""

    def __init__(
        self,
        captioner: GreedyCaptioner,
        policy: QueuePolicy = QueuePolicy(),
        warn: Callable[[str], None] = print,
        report: Callable[[], None] = lambda: None,
        threaded: bool = True,
        vision: Callable[[np.ndarray], np.ndarray | ort.OrtValue] | None = None,
    ):
        """``report``: called in the loop's thread before it answers and when it goes idle (the step's metrics reach
        Triton before the answers they timed). ``threaded=False``: the caller runs ``iterate`` itself (the tests).
        ``vision``: joining pixels -> embeddings on the decoder's device, in one run; None: pixels are refused."""
        if not isinstance(captioner.decoder, FixedBufferDecoder):
            raise TypeError("the loop needs a FixedBufferDecoder: rows join and leave its table")
        self.captioner = captioner
        self.decoder: FixedBufferDecoder = captioner.decoder
        self.policy = policy
        self.warn = warn
        self.report = report
        self.vision = vision
        # this iteration's answers: (job, captions, error, modes)
        self.answers: list[tuple[Job, list[str] | None, BaseException | None, list[str] | None]] = []
        self.sep = self.decoder.shape["sep_token_id"]
        self.max_new_tokens = captioner.max_new_tokens
        self.waiting: deque[Job] = deque()
        self.refusals: list[tuple[Job, BaseException]] = []  # answered by the loop's next iteration
        self.rows: list[tuple[Job, int] | None] = [None] * self.decoder.capacity  # each row: (job, its index)
        self.condition = threading.Condition()
        self.stopped = False
        self.thread = threading.Thread(target=self._loop, name="caption-engine", daemon=True) if threaded else None

    def start(self) -> CaptionEngine:
        """Starts the loop's thread (the owner first finishes setting up what ``report`` reads)."""
        if self.thread:
            self.thread.start()
        return self

    # --- the step's side -------------------------------------------------------------------------------------

    def submit(self, job: Job, refusal: Refused | None = None) -> None:
        """Queue ``job`` to join at the next step boundary, or refuse it: with ``refusal`` (a problem its step found),
        its own problem, or a full queue. That answer too is sent from the loop's thread, after ``submit`` returns (a
        response sent before the step's execute has returned races python_backend's bookkeeping of the request).
        Refused (raised) only when the loop has stopped."""
        with self.condition:
            if self.stopped:
                raise Refused("the captioner is stopping")
            full = self.policy.max_queue_size and len(self.waiting) >= self.policy.max_queue_size
            if refusal is None and (problem := self._problem(job)):
                refusal = Refused(problem, "INVALID_ARG")
            elif refusal is None and full:
                refusal = Refused(f"{QUEUE_FULL} ({self.policy.max_queue_size} requests wait to join)")
            if refusal is None:
                self.waiting.append(job)
            else:
                self.refusals.append((job, refusal))
            self.condition.notify()

    def _problem(self, job: Job) -> str | None:
        images = job.pixels if job.image_embeds is None else job.image_embeds
        if images is None or (job.pixels is not None and job.image_embeds is not None):
            return "send either IMAGE_EMBEDS or CAPTIONER_PIXELS"
        if job.pixels is not None and self.vision is None:
            return "this captioner takes IMAGE_EMBEDS only (its vision_encoder_graph is empty)"
        if len(job.prompts) != len(images):
            return f"{len(images)} images but {len(job.prompts)} prompts"
        return None

    def close(self, timeout_s: float = 30.0) -> None:
        with self.condition:
            self.stopped = True
            self.condition.notify()
        if self.thread:
            self.thread.join(timeout_s)
        else:
            self._stop()

    @property
    def rows_in_use(self) -> int:
        return sum(row is not None for row in self.rows)

    # --- the loop --------------------------------------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            with self.condition:
                if self._idle():
                    self._report()
                self.condition.wait_for(lambda: not self._idle())
                if self.stopped:
                    break
            try:
                self.iterate()
            except Exception:  # the loop itself must never die: every request after would hang
                self.warn(f"caption loop: an iteration failed: {traceback.format_exc()}")
        self._stop()

    def _idle(self) -> bool:
        return not self.stopped and not self.waiting and not self.refusals and not self.rows_in_use

    def _report(self) -> None:
        try:
            self.report()
        except Exception:  # the figures are lost, not the answers
            self.warn(f"caption loop: reporting failed: {traceback.format_exc()}")

    def iterate(self) -> None:
        """One iteration: refuse what waited too long, let in what fits, one step of every row in use; then the
        answers of the requests that ended (after ``report``)."""
        with self.condition:
            refused, joining = self._take_waiting()
            refused, self.refusals = self.refusals + refused, []
        self.answers = [(job, None, error, None) for job, error in refused]
        try:
            with self.captioner.clock.timing("iteration"):
                self._iterate(joining)
        except Exception as exc:  # a failed run fails what it held, and the loop serves on
            self.warn(f"caption loop: a step failed, its requests get the error: {traceback.format_exc()}")
            self._fail_in_progress(exc)
        self._send_answers()

    def _send_answers(self) -> None:
        if self.answers:
            self._report()
            answers, self.answers = self.answers, []
            for job, captions, error, modes in answers:
                self._answer(job, captions, error, modes)

    def _stop(self) -> None:
        with self.condition:
            left = list(self.waiting)
            self.waiting.clear()
            refused, self.refusals = self.refusals, []
        self.answers = [(job, None, error, None) for job, error in refused]
        self.answers += [(job, None, Refused("the captioner stopped before this request began"), None) for job in left]
        self._fail_in_progress(Refused("the captioner stopped while this request was in progress"))
        self._send_answers()

    def _take_waiting(self) -> tuple[list[tuple[Job, BaseException]], list[Job]]:
        """Under the lock: the waiting requests to refuse (timed out, cancelled), and those that join now (in order,
        while the head fits in the free rows)."""
        now = time.monotonic()
        refused: list[tuple[Job, BaseException]] = []
        joining: list[Job] = []
        free = [index for index, row in enumerate(self.rows) if row is None]
        kept: deque[Job] = deque()
        while self.waiting:
            job = self.waiting.popleft()
            if job.deadline is not None and now > job.deadline:
                refused.append((job, Refused(f"{QUEUE_TIMED_OUT} (waited to join the captioner's rows)")))
            elif job.is_cancelled():
                refused.append((job, Refused("the request was cancelled", "CANCELLED")))
            elif not kept and len(job.prompts) <= len(free):
                job.rows, free = free[: len(job.prompts)], free[len(job.prompts) :]
                for index, row in enumerate(job.rows):
                    self.rows[row] = (job, index)
                joining.append(job)
            else:
                kept.append(job)  # arrival order: nothing overtakes a request that waits for rows
        self.waiting = kept
        return refused, joining

    def _iterate(self, joining: Sequence[Job]) -> None:
        """The joining requests' prompts, then one step of every row in use; answers the requests that ended."""
        encoded = self._encode(joining)
        for job in joining:
            self._join(job, *encoded.get(id(job), (job.image_embeds, 0)))
        in_use = [index for index, row in enumerate(self.rows) if row is not None]
        if in_use:
            clock = self.captioner.clock
            with clock.timing("decoder_step"):
                tokens = self.decoder.step_rows(self.decoder.size_for(in_use[-1] + 1), in_use)
            clock.count("row_step", len(in_use))  # captions in progress per step: row_step runs / decoder_step runs
            redone = set(self.decoder.last_redone)
            for index in in_use:
                self._record(index, int(tokens[index]), index in redone)

    def _encode(self, joining: Sequence[Job]) -> dict[int, tuple[np.ndarray | ort.OrtValue, int]]:
        """The joining requests' pixels encoded in one batch (on the decoder's device: they stay there): for each
        such request (by id), the embeddings and the row its images begin at."""
        pixels = {id(job): job.pixels for job in joining if job.pixels is not None}
        if not pixels or self.vision is None:
            return {}
        with self.captioner.clock.timing("vision"):
            embeds = self.vision(np.concatenate(list(pixels.values())))
        encoded, start = {}, 0
        for key, images in pixels.items():
            encoded[key], start = (embeds, start), start + len(images)
        return encoded

    def _join(self, job: Job, embeds: np.ndarray | ort.OrtValue | None, base: int) -> None:
        """``job``'s rows begin, its images at rows ``base..`` of ``embeds``."""
        job.tokens = [[] for _ in job.prompts]
        job.redone = [0] * len(job.prompts)
        job.open_rows = len(job.prompts)
        assert embeds is not None  # submit refused the others
        prompt_ids = [self.captioner.prompt_ids(prompt) for prompt in job.prompts]
        if not self.decoder.fits(prompt_ids, self.max_new_tokens):  # longer prompts than the table's slots
            self._release(job)
            host = (embeds.numpy() if isinstance(embeds, ort.OrtValue) else embeds)[base : base + len(job.prompts)]
            captions = self.captioner.caption(host, job.prompts)  # outside the table: the exact graphs
            self.answers.append((job, captions, None, [EXACT] * len(captions)))
            return
        with self.captioner.clock.timing("prefill"):
            for first, last in runs(job.rows):  # rows next to each other begin in one run
                start = job.rows.index(first)
                span = slice(start, start + last - first + 1)
                tokens = self.decoder.admit(
                    first, embeds, prompt_ids[span], self.captioner.repetition_penalty, embeds_row=base + start
                )
                redone = set(self.decoder.last_redone)
                for row, token in zip(range(first, last + 1), tokens):
                    self._record(row, int(token), row in redone)

    def _record(self, row: int, token: int, redone: bool = False) -> None:
        """One new token of the caption in ``row`` (``redone``: by the fast mode's guard, exactly); the row leaves at
        [SEP] or the last token, the request answered when its last row leaves."""
        held = self.rows[row]
        if held is None:
            return
        job, index = held
        job.tokens[index].append(token)
        job.redone[index] += redone
        if token == self.sep or len(job.tokens[index]) == self.max_new_tokens:
            self.rows[row] = None
            job.open_rows -= 1
            if job.open_rows == 0:
                texts = self.captioner.text_tokenizer().decode_batch(job.tokens, skip_special_tokens=True)
                captions = [join_caption(p, text) for p, text in zip(job.prompts, texts)]
                self.answers.append((job, captions, None, self._modes(job)))

    def _modes(self, job: Job) -> list[str]:
        """Which mode made each caption: exact, or fast (and on how many of its steps the guard stepped in)."""
        if self.decoder.fast is None:
            return [EXACT] * len(job.tokens)
        return [
            f"{FAST}, {redone} of {len(tokens)} steps exact" if redone else FAST
            for tokens, redone in zip(job.tokens, job.redone)
        ]

    def _release(self, job: Job) -> None:
        for row in job.rows:
            held = self.rows[row]
            if held is not None and held[0] is job:
                self.rows[row] = None

    def _fail_in_progress(self, error: BaseException) -> None:
        """Every request in the table ends with ``error`` (those answered already in this iteration keep theirs)."""
        jobs = {id(held[0]): held[0] for held in self.rows if held is not None}
        self.rows = [None] * len(self.rows)
        self.answers += [(job, None, error, None) for job in jobs.values()]

    def _answer(
        self, job: Job, captions: list[str] | None, error: BaseException | None, modes: list[str] | None
    ) -> None:
        try:
            job.answer(captions, error, modes)
        except Exception:  # one request's answer failing (its caller gone) must not stop the others'
            self.warn(f"caption loop: answering a request failed: {traceback.format_exc()}")
