"""Softmax, label, probability, and the captioning prompt."""

import numpy as np
import pytest

from pipeline_src.contract import CaptionStatus
from pipeline_src.steps.classification import build_prompt, caption_plan, predict, softmax
from pipeline_src.steps.labels import FOOD11_CLASSES


def test_softmax_is_stable_for_huge_logits():
    probabilities = softmax(np.array([1e4, 1e4 - 1.0, -1e4]))
    assert np.all(np.isfinite(probabilities))
    assert probabilities.sum() == pytest.approx(1.0, abs=1e-6)
    assert probabilities[0] / probabilities[1] == pytest.approx(np.e, rel=1e-5)


def test_softmax_matches_the_textbook_formula_on_small_logits():
    logits = np.array([0.5, -1.0, 2.0, 0.0])
    expected = np.exp(logits) / np.exp(logits).sum()
    np.testing.assert_allclose(softmax(logits), expected, rtol=1e-6)


def test_predict_gives_the_top_class_and_its_real_probability():
    logits = np.zeros(11, dtype=np.float32)
    logits[FOOD11_CLASSES.index("Soup")] = 3.0
    prediction = predict(logits)
    assert prediction.label == "Soup"
    assert prediction.probability == pytest.approx(np.exp(3) / (np.exp(3) + 10), rel=1e-6)
    assert prediction.probabilities.sum() == pytest.approx(1.0, abs=1e-6)
    assert prediction.probability != pytest.approx(1 / (1 + np.exp(-3.0)))  # not the sigmoid of the top logit


@pytest.mark.parametrize(
    "logits, message",
    [
        (np.zeros(10), "expected 11 logits"),
        (np.array([np.nan] + [0.0] * 10), "NaN"),
    ],
)
def test_predict_refuses_unusable_logits(logits, message):
    with pytest.raises(ValueError, match=message):
        predict(logits)


def test_prompt_lowercases_the_label_for_blips_uncased_vocabulary():
    assert build_prompt("a photo of {label},", "Noodles/Pasta") == "a photo of noodles/pasta,"


def test_caption_plan_drops_the_label_below_the_threshold():
    confident = predict(np.array([9.0] + [0.0] * 10))
    unsure = predict(np.zeros(11))
    assert caption_plan(confident, "a photo of {label},", 0.5) == ("a photo of bread,", CaptionStatus.OK)
    assert caption_plan(unsure, "a photo of {label},", 0.5) == ("", CaptionStatus.LOW_CONFIDENCE)
