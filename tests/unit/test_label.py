"""The label step's logic: label, probability and every class's from stacked logits, and the models answering."""

import numpy as np
import pytest

from pipeline_src.contract import LABEL, MODELS, PROBABILITY
from pipeline_src.steps.classification import OUTPUTS, PROBABILITIES, label_outputs, logits_problem, predict
from pipeline_src.steps.labels import FOOD11_CLASSES

MODELS_JSON = '[{"model": "stand-in"}]'


def test_each_row_gets_the_label_and_probability_that_predict_gives_it():
    logits = np.random.default_rng(3).normal(scale=3.0, size=(5, 11)).astype(np.float32)
    outputs = label_outputs(logits, MODELS_JSON)

    assert list(outputs) == list(OUTPUTS)
    for row, expected in zip(range(5), (predict(row) for row in logits)):
        assert outputs[LABEL][row, 0] == expected.label.encode()
        assert outputs[PROBABILITY][row, 0] == pytest.approx(expected.probability, rel=1e-6)
        np.testing.assert_allclose(outputs[PROBABILITIES][row], expected.probabilities, rtol=1e-6)
    assert outputs[PROBABILITY].dtype == outputs[PROBABILITIES].dtype == np.float32
    assert outputs[PROBABILITY].shape == outputs[LABEL].shape == outputs[MODELS].shape == (5, 1)
    assert outputs[MODELS][:, 0].tolist() == [MODELS_JSON.encode()] * 5


def test_ties_go_to_the_lower_class_index():
    outputs = label_outputs(np.zeros((1, 11), dtype=np.float32), MODELS_JSON)
    assert outputs[LABEL][0, 0] == FOOD11_CLASSES[0].encode()
    assert outputs[PROBABILITY][0, 0] == pytest.approx(1 / 11, rel=1e-5)


@pytest.mark.parametrize(
    "rows, message",
    [
        (np.full((2, 11), np.nan, dtype=np.float32), "logits contain NaN or infinity"),
        (np.zeros((1, 10), dtype=np.float32), "expected [n, 11] logits, got shape [1, 10]"),
    ],
)
def test_unusable_logits_are_named(rows, message):
    assert logits_problem(rows) == message


def test_finite_logits_pass():
    assert logits_problem(np.random.default_rng(0).normal(size=(3, 11)).astype(np.float32)) is None
