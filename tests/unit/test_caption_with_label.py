"""caption_with_label's logic without Triton: its captioner call is a fake, handed in as model.py hands in BLS."""

import asyncio

import numpy as np
import pytest

from pipeline_src.contract import CAPTION, CAPTION_STATUS, QUEUE_REFUSALS, CaptionStatus
from pipeline_src.steps.caption_with_label import (
    CAPTION_AFTER_PROMPT,
    CAPTION_MODE,
    PROMPT,
    Captioned,
    CaptionerFailed,
    CaptionWithLabel,
    Refused,
)
from pipeline_src.steps.classification import caption_plan, pick, plan_captions, softmax
from pipeline_src.steps.labels import FOOD11_CLASSES
from pipeline_src.steps.settings import CaptionWithLabelSettings

CONFIDENT_BREAD = softmax(np.array([9.0] + [0.0] * 10))  # the label step's: Bread, probability ~0.999
UNSURE = softmax(np.zeros(11))  # every class 1/11: under the 0.5 threshold


class FakeCaptioner:
    """Records the prompts it is asked for; answers with ``answer(prompts)``."""

    def __init__(self, answer):
        self.answer = answer
        self.prompts: list[list[str]] = []

    async def __call__(self, prompts):
        self.prompts.append(prompts)
        captions = await self.answer(prompts)
        return Captioned(captions, [b"exact"] * len(captions))


async def captions_as_bytes(prompts):
    # As Triton's BYTES tensor holds them: bytes, not str.
    return np.array([f"{prompt} caption {index}".strip().encode() for index, prompt in enumerate(prompts)], object)


def failing_with(message):
    async def fail(prompts):
        raise CaptionerFailed(message)

    return fail


def labeller(warnings: list[str] | None = None, **settings):
    warn = warnings.append if warnings is not None else [].append
    return CaptionWithLabel(CaptionWithLabelSettings(**settings), warn)


def answer(step, probabilities, captioner, time_left_us=0):
    return asyncio.run(step.answer(np.stack(probabilities), captioner, time_left_us))


def rows(outputs, name):
    return [value.decode() if isinstance(value, bytes) else value for value in outputs[name].reshape(-1)]


def test_captions_come_back_with_their_prompt_and_ok_status():
    captioner = FakeCaptioner(captions_as_bytes)
    outputs = answer(labeller(), [CONFIDENT_BREAD, CONFIDENT_BREAD], captioner)

    assert captioner.prompts == [["a photo of bread,", "a photo of bread,"]]
    assert rows(outputs, CAPTION) == ["a photo of bread, caption 0", "a photo of bread, caption 1"]
    assert rows(outputs, CAPTION_STATUS) == [CaptionStatus.OK.value] * 2
    assert rows(outputs, PROMPT) == ["a photo of bread,"] * 2
    assert rows(outputs, CAPTION_AFTER_PROMPT) == ["caption 0", "caption 1"]
    assert outputs[CAPTION].shape == outputs[PROMPT].shape == outputs[CAPTION_AFTER_PROMPT].shape == (2, 1)
    assert rows(outputs, CAPTION_MODE) == ["exact"] * 2  # the captioner's: which mode made each caption
    assert list(outputs) == [CAPTION, CAPTION_STATUS, PROMPT, CAPTION_AFTER_PROMPT, CAPTION_MODE]


def test_low_confidence_captions_without_the_label_prompt():
    captioner = FakeCaptioner(captions_as_bytes)
    outputs = answer(labeller(), [UNSURE, CONFIDENT_BREAD], captioner)

    assert captioner.prompts == [["", "a photo of bread,"]]
    assert rows(outputs, CAPTION_STATUS) == [CaptionStatus.LOW_CONFIDENCE.value, CaptionStatus.OK.value]
    assert rows(outputs, CAPTION) == ["caption 0", "a photo of bread, caption 1"]
    assert rows(outputs, PROMPT) == ["", "a photo of bread,"]
    assert rows(outputs, CAPTION_AFTER_PROMPT) == ["caption 0", "caption 1"]


def test_the_threshold_is_the_settings_one():
    captioner = FakeCaptioner(captions_as_bytes)
    outputs = answer(labeller(confidence_threshold=0.0), [UNSURE], captioner)
    assert captioner.prompts == [[f"a photo of {FOOD11_CLASSES[0].lower()},"]]
    assert rows(outputs, CAPTION_STATUS) == [CaptionStatus.OK.value]


def never_answers():
    """A captioner that never answers, and says whether its call was cancelled."""
    cancelled = []

    async def hang(prompts):
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    return hang, cancelled


@pytest.mark.parametrize(
    "settings, time_left_us, waited_ms",
    [
        ({"caption_timeout_ms": 1}, 0, 1),  # the step's own bound
        ({}, 2_000, 2),  # the caller's time left, shorter than caption_timeout_ms
    ],
)
def test_captioner_timeout_answers_an_empty_caption_saying_why(settings, time_left_us, waited_ms):
    hang, cancelled = never_answers()
    step = labeller(**settings)

    async def run():
        outputs = await step.answer(np.stack([CONFIDENT_BREAD, UNSURE]), FakeCaptioner(hang), time_left_us)
        await asyncio.sleep(0)  # a cancelled call would see its CancelledError now
        return outputs, list(cancelled)  # asyncio.run cancels what is left once run() returns

    outputs, cancelled_while_running = asyncio.run(run())
    status = CaptionStatus.CAPTIONER_TIMEOUT.with_detail(f"no caption within {waited_ms} ms")
    assert rows(outputs, CAPTION_STATUS) == [status, status]
    assert rows(outputs, CAPTION) == ["", ""]
    assert rows(outputs, PROMPT) == ["a photo of bread,", ""]
    assert not cancelled_while_running  # shielded: the captioner finishes its work instead of being cut mid-flight


def test_captioner_error_answers_its_message_and_is_logged():
    warnings: list[str] = []
    outputs = answer(labeller(warnings), [CONFIDENT_BREAD], FakeCaptioner(failing_with("out of memory")))

    assert rows(outputs, CAPTION_STATUS) == [CaptionStatus.CAPTIONER_ERROR.with_detail("out of memory")]
    assert rows(outputs, CAPTION) == [""]
    assert warnings == ["captioner failed: out of memory"]


def test_where_answers_are_cached_a_failed_caption_refuses_the_request_instead():
    step = CaptionWithLabel(CaptionWithLabelSettings(), [].append, refuse_failed_captions=True)
    with pytest.raises(Refused) as refused:
        answer(step, [CONFIDENT_BREAD], FakeCaptioner(failing_with("out of memory")))
    assert refused.value.code == "UNAVAILABLE"
    assert str(refused.value) == f"no caption ({CaptionStatus.CAPTIONER_ERROR.value}: out of memory): retry later"


@pytest.mark.parametrize(
    ("setting", "cached", "refuses"),
    [
        ("auto", False, False),
        ("auto", True, True),
        ("empty_caption", True, False),
        ("refuse", False, True),
    ],
)
def test_on_caption_failure_auto_refuses_only_where_answers_are_cached(setting, cached, refuses):
    settings = CaptionWithLabelSettings(on_caption_failure=setting)
    assert settings.refuses_failed_captions(responses_cached=cached) is refuses


@pytest.mark.parametrize("refusal", QUEUE_REFUSALS)
def test_overload_refuses_the_request_as_unavailable(refusal):
    with pytest.raises(Refused) as refused:
        answer(labeller(), [CONFIDENT_BREAD], FakeCaptioner(failing_with(f"captioner: {refusal}")))
    assert refused.value.code == "UNAVAILABLE"
    assert str(refused.value) == (
        f"the captioner is over capacity ({CaptionStatus.CAPTIONER_ERROR.value}: captioner: {refusal}): retry later"
    )


def test_rows_that_are_not_distributions_are_refused_as_invalid_without_calling_the_captioner():
    captioner = FakeCaptioner(captions_as_bytes)
    with pytest.raises(Refused, match="PROBABILITIES: row 2 of 2 is not a probability distribution") as refused:
        answer(labeller(), [CONFIDENT_BREAD, np.full(11, np.nan, dtype=np.float32)], captioner)
    assert refused.value.code == "INVALID_ARG"
    assert captioner.prompts == []


def test_a_caption_short_of_a_row_breaks_the_output_contract():
    async def one_caption(prompts):
        return ["only one"]

    with pytest.raises(Refused, match="output CAPTION has 1 rows for 2 input rows") as refused:
        answer(labeller(), [CONFIDENT_BREAD, CONFIDENT_BREAD], FakeCaptioner(one_caption))
    assert refused.value.code == "INTERNAL"


def test_outputs_must_be_the_configs():
    step = CaptionWithLabel(CaptionWithLabelSettings(), [].append, declared_outputs=(CAPTION, "SCORE"))
    with pytest.raises(Refused, match=r"returned but not declared: .*; declared but not returned: SCORE") as refused:
        answer(step, [CONFIDENT_BREAD], FakeCaptioner(captions_as_bytes))
    assert refused.value.code == "INTERNAL"


def test_plan_captions_picks_then_plans_each_row():
    plans = plan_captions(np.stack([UNSURE, CONFIDENT_BREAD]), "a dish of {label}", 0.5)
    assert [p.label for p in plans.predictions] == [FOOD11_CLASSES[0], "Bread"]
    expected = [caption_plan(pick(row), "a dish of {label}", 0.5) for row in (UNSURE, CONFIDENT_BREAD)]
    assert (
        list(zip(plans.prompts, plans.statuses))
        == expected
        == [
            ("", CaptionStatus.LOW_CONFIDENCE),
            ("a dish of bread", CaptionStatus.OK),
        ]
    )
