"""top_labels' logic: the k best Food-11 labels of each row, in order, and its settings."""

import numpy as np
import pytest

from pipeline_src.steps.classification import distribution_problem, predict, softmax
from pipeline_src.steps.labels import FOOD11_CLASSES
from pipeline_src.steps.settings import SettingsError
from pipeline_src.steps.top_labels import TopLabelsSettings, check_output_dims, top_labels


def distribution(**weights: float) -> np.ndarray:
    """Probabilities over the Food-11 classes, ``Soup=4`` style (underscores for spaces and slashes)."""
    row = np.full(len(FOOD11_CLASSES), 0.1, dtype=np.float64)
    for name, weight in weights.items():
        row[[c.replace(" ", "_").replace("/", "_") for c in FOOD11_CLASSES].index(name)] = weight
    return (row / row.sum()).astype(np.float32)


def decoded(labels: np.ndarray) -> list[list[str]]:
    return [[label.decode("utf-8") for label in row] for row in labels]


def test_each_row_gets_its_k_best_labels_in_descending_probability():
    batch = np.stack([distribution(Soup=4, Rice=3, Egg=2), distribution(Bread=5, Vegetable_Fruit=1, Meat=0.5)])
    best = top_labels(batch, 3)
    assert decoded(best.labels) == [["Soup", "Rice", "Egg"], ["Bread", "Vegetable/Fruit", "Meat"]]
    assert best.probabilities.dtype == np.float32 and best.probabilities.shape == (2, 3)
    assert np.all(np.diff(best.probabilities, axis=1) <= 0)
    np.testing.assert_array_equal(best.probabilities[0], batch[0][[9, 7, 3]])


def test_the_first_label_is_the_pipelines_label_even_on_ties():
    logits = np.zeros(len(FOOD11_CLASSES), dtype=np.float32)
    logits[[2, 5]] = 3.0  # Dessert and Meat tie: argmax, and so LABEL, takes the lower index
    prediction = predict(logits)
    best = top_labels(softmax(logits)[None, :], 2)
    assert decoded(best.labels) == [[prediction.label, "Meat"]] == [["Dessert", "Meat"]]
    assert best.probabilities[0, 0] == np.float32(prediction.probability)


def test_k_of_all_eleven_classes_lists_every_class_once():
    best = top_labels(distribution(Rice=2)[None, :], len(FOOD11_CLASSES))
    assert sorted(decoded(best.labels)[0]) == sorted(FOOD11_CLASSES)


@pytest.mark.parametrize(
    "rows, message",
    [
        (np.full((2, 11), 0.5, dtype=np.float32), "row 1 of 2 is not a probability distribution"),
        (np.stack([distribution(), np.full(11, np.nan, dtype=np.float32)]), "row 2 of 2 is not a probability"),
        (np.stack([distribution(), -distribution()]), "row 2 of 2 is not a probability"),
        (np.full((1, 10), 0.1, dtype=np.float32), "expected [n, 11] probabilities, got shape [1, 10]"),
    ],
)
def test_rows_that_are_not_distributions_are_named(rows, message):
    assert message in distribution_problem(rows)


def test_softmax_rows_pass():
    assert distribution_problem(softmax(np.random.default_rng(0).normal(size=(4, 11)))) is None


@pytest.mark.parametrize("k", ["0", "12"])
def test_k_outside_the_classes_is_refused(k):
    with pytest.raises(SettingsError, match=r"k must lie in \[1, 11\]"):
        TopLabelsSettings.from_parameters({"k": k})


def test_output_dims_must_say_k_or_any():
    check_output_dims(3, {"TOP_LABELS": [3], "TOP_PROBABILITIES": [3]})
    check_output_dims(5, {"TOP_LABELS": [-1], "TOP_PROBABILITIES": [-1]})
    with pytest.raises(SettingsError, match=r"k=5, but the outputs declare dims .*'TOP_LABELS': \[3\]"):
        check_output_dims(5, {"TOP_LABELS": [3], "TOP_PROBABILITIES": [-1]})
