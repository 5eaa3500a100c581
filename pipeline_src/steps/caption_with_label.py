"""Step 4's logic, BLS: a caption conditioned on the label step's answer, deciding what an ensemble cannot: caption
without the label when unsure, answer an empty caption and why when the captioner fails or is too slow, refuse the
request when the captioner's queue refused it under load. Handed the captioner call (``model.py`` makes it by BLS),
it runs without Triton. The label is the ``label`` step's, so a classify-only call never runs this step."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from pipeline_src.contract import CAPTION, CAPTION_STATUS, CaptionStatus, refused_under_load
from pipeline_src.steps.batching import BatchContractError, Refused, bytes_rows, check_outputs
from pipeline_src.steps.classification import PROBABILITIES, plan_captions  # its input: the label step's
from pipeline_src.steps.settings import CaptionWithLabelSettings

# For the steps after this one, outputs that are no ensemble output of the shipped ensembles: a step reads
# these, never CAPTION, since Triton drops a step from a call that names none of the ensemble outputs it maps,
# even when another step reads them (pipeline_src/ensemble_pruning.py; docs/EXTENDING.md).
PROMPT = "PROMPT"  # the prompt each caption was conditioned on ("" when unsure)
CAPTION_AFTER_PROMPT = "CAPTION_AFTER_PROMPT"  # the caption's own words: BLIP's caption begins with its prompt
# which mode made the caption (the captioner's: "exact", or "fast" with how often its guard stepped in; "" for none):
# an ensemble output of the pipelines, each answer's provenance
CAPTION_MODE = "CAPTION_MODE"
OUTPUTS = (CAPTION, CAPTION_STATUS, PROMPT, CAPTION_AFTER_PROMPT, CAPTION_MODE)  # as its config.pbtxt declares
# The captioner call's tensors, from its declaration, which food11-validate checks against the captioner's config.
CAPTIONER_CALL = CaptionWithLabelSettings.CAPTIONER_CALL
# EMBEDS_SENT, PIXELS_SENT: the step's own inputs, forwarded as they are (whichever it was given)
EMBEDS_SENT, PIXELS_SENT, PROMPT_SENT = CAPTIONER_CALL.inputs
CAPTION_READ, CAPTION_ERROR_READ, CAPTION_MODE_READ = CAPTIONER_CALL.outputs


def _text(value: str | bytes) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else value


@dataclass(frozen=True)
class Captioned:
    """The captioner's answer: one caption per prompt, and which mode made each (exact, or fast...): str, or a
    BYTES tensor's bytes."""

    captions: Sequence[str | bytes]
    modes: Sequence[str | bytes]


# The captioner call: prompts -> Captioned; CaptionerFailed when the captioner answers with an error.
CaptionerCall = Callable[[list[str]], Awaitable[Captioned]]


class CaptionerFailed(Exception):
    """The captioner answered with an error; the message is its."""


def after_prompt(caption: str, prompt: str) -> str:
    """The words a caption adds to its prompt (the whole caption when unprompted or not prompt-led)."""
    return caption[len(prompt) :].strip() if prompt and caption.startswith(prompt) else caption


def _forget(call: asyncio.Future) -> None:
    """Mark a call nobody waits for any more as seen, so that its late error is not logged as unhandled."""
    if not call.cancelled():
        call.exception()


@dataclass(frozen=True)
class CaptionWithLabel:
    """The step's answer to one request at a time: its captioner call carries that request's trace and timeout."""

    settings: CaptionWithLabelSettings
    warn: Callable[[str], None]  # the step's logger: a captioner's failure is logged, not only answered
    # The config's outputs (with their data_type inside Triton): an answer holds these, one row per photo.
    declared_outputs: Collection[str] | Mapping[str, str] = OUTPUTS
    # Refuse (UNAVAILABLE) a request whose caption failed instead of answering an empty one: where Triton caches
    # answers, an empty caption would be served again for as long as the entry lives (settings.on_caption_failure).
    refuse_failed_captions: bool = False

    async def answer(
        self, probabilities: np.ndarray, call_captioner: CaptionerCall, time_left_us: int = 0
    ) -> dict[str, np.ndarray]:
        """The outputs for one request's ``probabilities [n, classes]``, as ``batching.check_outputs`` holds them
        to ``declared_outputs``. ``time_left_us``: the request's timeout (0: none), which shortens the wait for
        captions (``CaptionWithLabelSettings.caption_wait_ms``). Refused: INVALID_ARG for rows that are not
        distributions, INTERNAL for a broken output contract, UNAVAILABLE when the captioner was over capacity."""
        try:
            plans = plan_captions(probabilities, self.settings.prompt_template, self.settings.confidence_threshold)
        except ValueError as exc:
            raise Refused(f"{PROBABILITIES}: {exc}", "INVALID_ARG") from exc
        wait_ms = self.settings.caption_wait_ms(time_left_us)
        captions, modes, failure = await self.captions(call_captioner, plans.prompts, wait_ms)
        if failure and refused_under_load(failure):
            # Overload is the caller's to handle (retry later, elsewhere): refuse the request as the
            # captioner refused its call, rather than answer without a caption.
            raise Refused(f"the captioner is over capacity ({failure}): retry later", "UNAVAILABLE")
        if failure and self.refuse_failed_captions:
            raise Refused(f"no caption ({failure}): retry later", "UNAVAILABLE")
        outputs = {
            CAPTION: bytes_rows(captions),
            CAPTION_STATUS: bytes_rows([failure or status for status in plans.statuses]),
            PROMPT: bytes_rows(plans.prompts),
            CAPTION_AFTER_PROMPT: bytes_rows(list(map(after_prompt, captions, plans.prompts))),
            CAPTION_MODE: bytes_rows(modes),
        }
        try:
            check_outputs(outputs, self.declared_outputs, len(plans.predictions))
        except BatchContractError as exc:
            raise Refused(f"internal error: {exc}", "INTERNAL") from exc
        return outputs

    async def captions(
        self, call_captioner: CaptionerCall, prompts: list[str], wait_ms: int
    ) -> tuple[list[str], list[str], str | None]:
        """(captions, their modes, None), or (empty captions and modes, the status saying why) when the captioner
        let us down."""
        call = asyncio.ensure_future(call_captioner(prompts))
        empty = [""] * len(prompts)
        try:
            # shield: on timeout stop waiting, but let the captioner finish instead of cancelling mid-flight.
            answer = await asyncio.wait_for(asyncio.shield(call), wait_ms / 1000.0)
        except asyncio.TimeoutError:
            call.add_done_callback(_forget)
            return empty, empty, CaptionStatus.CAPTIONER_TIMEOUT.with_detail(f"no caption within {wait_ms} ms")
        except CaptionerFailed as exc:
            self.warn(f"captioner failed: {exc}")
            return empty, empty, CaptionStatus.CAPTIONER_ERROR.with_detail(str(exc))
        return list(map(_text, answer.captions)), list(map(_text, answer.modes)), None
