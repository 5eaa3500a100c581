"""Step 3's logic, BLS: label and probability from the logits, then a caption conditioned on the label.

Decisions a plain ensemble cannot make: caption without the label when unsure; answer with label and
probability (caption empty, status saying why) when the captioner fails or is too slow; refuse the request
when the captioner's queue refused it under load. The captioner call is handed in (the step's ``model.py``
makes it by BLS), so this runs and is unit-tested without Triton.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from pipeline_src.contract import CAPTION, CAPTION_STATUS, LABEL, MODELS, PROBABILITY, CaptionStatus, refused_under_load
from pipeline_src.steps.batching import BatchContractError, bytes_rows, check_outputs
from pipeline_src.steps.classification import Prediction, plan_captions
from pipeline_src.steps.settings import LabelAndCaptionSettings

LOGITS = "LOGITS"  # the step's input: the classifier's, one row per photo
PROBABILITIES = "PROBABILITIES"  # every class's probability, for the steps after it (top_labels)
OUTPUTS = (LABEL, PROBABILITY, PROBABILITIES, CAPTION, CAPTION_STATUS, MODELS)  # as its config.pbtxt declares
# The captioner call's tensors, from its declaration, which food11-validate checks against the captioner's config.
CAPTIONER_CALL = LabelAndCaptionSettings.CAPTIONER_CALL
EMBEDS_SENT, PROMPT_SENT = CAPTIONER_CALL.inputs  # EMBEDS_SENT: the step's own input, forwarded as is
(CAPTION_READ,) = CAPTIONER_CALL.outputs

# The captioner call: prompts -> one caption per prompt (str, or a BYTES tensor's bytes); CaptionerFailed
# when the captioner answers with an error.
CaptionerCall = Callable[[list[str]], Awaitable[Sequence[str | bytes]]]


class CaptionerFailed(Exception):
    """The captioner answered with an error; the message is its."""


class Refused(Exception):
    """The request is failed whole. ``code``: a ``pb_utils.TritonError`` code's name (INTERNAL, UNAVAILABLE)."""

    def __init__(self, message: str, code: str):
        super().__init__(message)
        self.code = code


def label_outputs(predictions: Sequence[Prediction]) -> dict[str, np.ndarray]:
    """The outputs the step computes without the captioner (LABEL, PROBABILITY, PROBABILITIES), a row each."""
    return {
        LABEL: bytes_rows([prediction.label for prediction in predictions]),
        PROBABILITY: np.array([[prediction.probability] for prediction in predictions], dtype=np.float32),
        PROBABILITIES: np.stack([prediction.probabilities for prediction in predictions]).astype(np.float32),
    }


def _forget(call: asyncio.Future) -> None:
    """Mark a call nobody waits for any more as seen, so that its late error is not logged as unhandled."""
    if not call.cancelled():
        call.exception()


@dataclass(frozen=True)
class LabelAndCaption:
    """The step's answer to one request at a time: its captioner call carries that request's trace and timeout."""

    settings: LabelAndCaptionSettings
    models: str  # JSON, which models answer (pipeline_src.provenance.served): every row names them
    warn: Callable[[str], None]  # the step's logger: a captioner's failure is logged, not only answered
    # The config's outputs (with their data_type inside Triton): an answer holds these, one row per photo.
    declared_outputs: Collection[str] | Mapping[str, str] = OUTPUTS

    async def answer(
        self, logits: np.ndarray, call_captioner: CaptionerCall, time_left_us: int = 0
    ) -> dict[str, np.ndarray]:
        """The outputs for one request's ``logits [n, classes]``, as ``batching.check_outputs`` holds them to
        ``declared_outputs``. ``time_left_us``: the request's timeout (0: none), which shortens the wait for
        captions (``LabelAndCaptionSettings.caption_wait_ms``). Refused: INTERNAL for unusable logits or a
        broken output contract, UNAVAILABLE when the captioner was over capacity."""
        try:
            plans = plan_captions(logits, self.settings.prompt_template, self.settings.confidence_threshold)
        except ValueError as exc:
            raise Refused(f"classifier output unusable: {exc}", "INTERNAL") from exc
        wait_ms = self.settings.caption_wait_ms(time_left_us)
        captions, failure = await self.captions(call_captioner, plans.prompts, wait_ms)
        if failure and refused_under_load(failure):
            # Overload is the caller's to handle (retry later, elsewhere): refuse the request as the
            # captioner refused its call, rather than answer without a caption.
            raise Refused(f"the captioner is over capacity ({failure}): retry later", "UNAVAILABLE")
        outputs = {
            **label_outputs(plans.predictions),
            CAPTION: bytes_rows(captions),
            CAPTION_STATUS: bytes_rows([failure or status for status in plans.statuses]),
            MODELS: bytes_rows([self.models] * len(plans.predictions)),
        }
        try:
            check_outputs(outputs, self.declared_outputs, len(plans.predictions))
        except BatchContractError as exc:
            raise Refused(f"internal error: {exc}", "INTERNAL") from exc
        return outputs

    async def captions(
        self, call_captioner: CaptionerCall, prompts: list[str], wait_ms: int
    ) -> tuple[list[str], str | None]:
        """(captions, None), or (empty captions, the status saying why) when the captioner let us down."""
        call = asyncio.ensure_future(call_captioner(prompts))
        try:
            # shield: on timeout stop waiting, but let the captioner finish instead of cancelling mid-flight.
            captions = await asyncio.wait_for(asyncio.shield(call), wait_ms / 1000.0)
        except asyncio.TimeoutError:
            call.add_done_callback(_forget)
            return [""] * len(prompts), CaptionStatus.CAPTIONER_TIMEOUT.with_detail(f"no caption within {wait_ms} ms")
        except CaptionerFailed as exc:
            self.warn(f"captioner failed: {exc}")
            return [""] * len(prompts), CaptionStatus.CAPTIONER_ERROR.with_detail(str(exc))
        return [caption.decode("utf-8") if isinstance(caption, bytes) else caption for caption in captions], None
