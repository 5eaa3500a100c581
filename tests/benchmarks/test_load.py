"""The load generator's judge (soak, chaos, overload): an HTTP answer against what its own photo gets alone."""

from __future__ import annotations

import pytest

from benchmarks.lib.load import FAILED, OK, WRONG, Expected, judge

EXPECTED = Expected(label="Bread", probability=0.5, caption="a photo of bread")
RIGHT = {"label": "Bread", "probability": 0.5, "caption": "a photo of bread", "caption_status": "ok"}


@pytest.mark.parametrize(
    ("status", "body", "echoed", "verdict"),
    [
        (200, RIGHT, "id-1", OK),
        (200, RIGHT, "id-2", WRONG),  # another request's answer
        (200, {**RIGHT, "label": "Soup"}, "id-1", WRONG),
        (200, {**RIGHT, "caption": "a bowl"}, "id-1", WRONG),
        (200, {**RIGHT, "caption": "", "caption_status": "captioner_error: it died"}, "id-1", FAILED),
        (503, {"detail": "overloaded"}, "", FAILED),
    ],
)
def test_each_answer_is_judged_against_its_own_photos(status, body, echoed, verdict):
    assert judge(status, body, echoed, "id-1", EXPECTED)[0] == verdict


def test_a_failure_says_its_status_and_why():
    body = {**RIGHT, "caption": "", "caption_status": "captioner_timeout: 30 s"}
    assert judge(200, body, "id-1", "id-1", EXPECTED) == (FAILED, "200 captioner_timeout", "captioner_timeout: 30 s")
