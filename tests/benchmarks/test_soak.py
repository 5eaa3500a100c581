"""The soak's short version: a few dozen concurrent uploads through the real API, every one answered
once, by its own photo's label and probability (the full run: make soak)."""

import asyncio

import pytest

from benchmarks.lib.load import Expected, Outcome, judge
from benchmarks.lib.photos import varied_photos
from benchmarks.lib.soak import check, soak

pytestmark = pytest.mark.integration


def test_concurrent_uploads_are_all_answered_each_with_its_own_photos_result(triton, api_factory):
    api = api_factory(min_in_flight=8, max_in_flight=8)  # the limit pinned: this checks answers, not admission
    result = asyncio.run(soak(api.url, triton.grpc_url, varied_photos(12), total=48, concurrency=8))
    assert result["examples"] == []
    assert (result["answered"], result["failed"], result["lost"], result["mismatched"]) == (48, 0, 0, 0)
    assert result["distinct_probabilities"] == 12  # each photo tells itself apart
    # The six originals have six captions; rescalings of one crop look alike at 384 px and may share one.
    assert result["distinct_captions"] >= 6


def answer(label: str, probability: float, caption: str) -> dict:
    return {"label": label, "probability": probability, "caption": caption, "caption_status": "ok"}


def test_the_check_catches_a_swapped_a_lost_and_a_failed_answer():
    truth = [Expected("Bread", 0.7, "a photo of bread, x"), Expected("Soup", 0.6, "a photo of soup, y")]
    soup = answer("Soup", 0.6, "a photo of soup, y")
    outcomes = [
        Outcome("soak-0", 0, 0.0, 0.1, *judge(200, soup, "soak-0", "soak-0", truth[0])),  # photo 1's for photo 0
        Outcome("soak-1", 1, 0.0, 0.1, *judge(503, {"detail": "down"}, "soak-1", "soak-1", truth[1])),
    ]
    checks = check(outcomes, sent=3)
    assert (len(checks.mismatched), len(checks.failed), checks.lost) == (1, 1, ["soak-2"])
    assert not checks.ok


def test_the_check_catches_a_caption_that_belongs_to_another_photo():
    truth = [Expected("Bread", 0.7, "a photo of bread, x")]
    wrong_caption = judge(200, answer("Bread", 0.7, "a photo of bread, z"), "soak-0", "soak-0", truth[0])
    right_label_wrong_caption = Outcome("soak-0", 0, 0.0, 0.1, *wrong_caption)
    assert check([right_label_wrong_caption], sent=1).mismatched
