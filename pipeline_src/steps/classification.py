"""From classifier logits to a Food-11 label and a real probability (the ``label`` step), and from those
probabilities to the captioning prompt (``caption_with_label``).

Everything a classify-only caller asks for (LABEL, PROBABILITY, MODELS) comes from the label step, so such a call
costs the preprocess step, the classifier and that: Triton's ensemble leaves out the steps no requested output needs
(the vision encoder, ``caption_with_label`` and its captioner)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline_src.contract import LABEL, MODELS, PROBABILITY, CaptionStatus
from pipeline_src.steps.batching import bytes_rows
from pipeline_src.steps.labels import FOOD11_CLASSES

LOGITS = "LOGITS"  # the label step's input: the classifier's, one row per photo
PROBABILITIES = "PROBABILITIES"  # every class's probability, the label step's for the steps after it
OUTPUTS = (LABEL, PROBABILITY, PROBABILITIES, MODELS)  # the label step's, as its config.pbtxt declares


def softmax(logits: np.ndarray, axis: int = -1) -> np.ndarray:
    """Numerically stable softmax: shifting by the max keeps exp() from overflowing."""
    logits = np.asarray(logits, dtype=np.float64)
    shifted = logits - np.max(logits, axis=axis, keepdims=True)
    exps = np.exp(shifted)
    return (exps / np.sum(exps, axis=axis, keepdims=True)).astype(np.float32)


@dataclass(frozen=True)
class Prediction:
    label: str
    probability: float
    probabilities: np.ndarray  # float32 [11], sums to 1


ENCODED_CLASSES = np.array([name.encode("utf-8") for name in FOOD11_CLASSES], dtype=np.object_)  # as BYTES rows
SUM_TOLERANCE = 1e-3  # float32 softmax rows sum to 1 within ~1e-6; more means this is not a distribution


def logits_problem(rows: np.ndarray) -> str | None:
    """Why one request's rows are not usable logits over the classes (it then fails alone)."""
    if rows.ndim != 2 or rows.shape[1] != len(FOOD11_CLASSES):
        return f"expected [n, {len(FOOD11_CLASSES)}] logits, got shape {list(rows.shape)}"
    if not np.all(np.isfinite(rows)):
        return "logits contain NaN or infinity"
    return None


def distribution_problem(rows: np.ndarray) -> str | None:
    """Why one request's rows are not probability distributions over the classes (it then fails alone)."""
    if rows.ndim != 2 or rows.shape[1] != len(FOOD11_CLASSES):
        return f"expected [n, {len(FOOD11_CLASSES)}] probabilities, got shape {list(rows.shape)}"
    for index, row in enumerate(rows):
        if not np.all(np.isfinite(row)) or np.any(row < 0) or abs(float(row.sum()) - 1.0) > SUM_TOLERANCE:
            return f"row {index + 1} of {len(rows)} is not a probability distribution (sum {row.sum():.6g})"
    return None


def label_outputs(logits: np.ndarray, models: str) -> dict[str, np.ndarray]:
    """The label step's outputs for stacked ``logits [n, classes]``, a row each: the most probable class (ties: the
    lower index, as argmax), its softmax probability, every class's, and ``models`` (JSON, which models answer:
    pipeline_src.provenance.served)."""
    probabilities = softmax(logits)
    best = np.argmax(probabilities, axis=1)
    return {
        LABEL: ENCODED_CLASSES[best].reshape(-1, 1),
        PROBABILITY: np.take_along_axis(probabilities, best[:, None], axis=1),
        PROBABILITIES: probabilities,
        MODELS: bytes_rows([models] * len(probabilities)),
    }


def pick(probabilities: np.ndarray, classes: tuple[str, ...] = FOOD11_CLASSES) -> Prediction:
    """The top class of one row of probabilities (ties: the lower index, as argmax)."""
    index = int(np.argmax(probabilities))
    return Prediction(classes[index], float(probabilities[index]), np.asarray(probabilities, dtype=np.float32))


def predict(logits: np.ndarray, classes: tuple[str, ...] = FOOD11_CLASSES) -> Prediction:
    """The top class of one row of logits, with its softmax probability."""
    logits = np.asarray(logits)
    if logits.shape != (len(classes),):
        raise ValueError(f"expected {len(classes)} logits, got shape {logits.shape}")
    if not np.all(np.isfinite(logits)):
        raise ValueError("logits contain NaN or infinity")
    return pick(softmax(logits), classes)


def build_prompt(template: str, label: str) -> str:
    """The captioning prompt for a label, e.g. ``"a photo of {label},"`` -> ``"a photo of bread,"``.

    BLIP's tokenizer is uncased, so the label is lower-cased to make the prompt the exact prefix of
    the caption it produces.
    """
    return template.format(label=label.lower()).strip()


def caption_plan(prediction: Prediction, template: str, threshold: float) -> tuple[str, str]:
    """The prompt to caption with and the status a successful caption gets.

    Below the confidence threshold a wrong label would steer the caption wrong, so BLIP captions
    without a prompt instead.
    """
    if prediction.probability < threshold:
        return "", CaptionStatus.LOW_CONFIDENCE.value
    return build_prompt(template, prediction.label), CaptionStatus.OK.value


@dataclass(frozen=True)
class CaptionPlans:
    """A batch's predictions, each row's prompt to caption with and the status its caption gets if it comes."""

    predictions: list[Prediction]
    prompts: list[str]
    statuses: list[str]


def plan_captions(probabilities: np.ndarray, template: str, threshold: float) -> CaptionPlans:
    """``pick`` each row of ``probabilities [n, classes]`` (the label step's), then ``caption_plan`` it: what
    caption_with_label does before calling the captioner (the step itself, the in-process pipeline and the
    benchmarks' input data). ValueError names the first row that is not a distribution."""
    problem = distribution_problem(np.asarray(probabilities))
    if problem:
        raise ValueError(problem)
    predictions = [pick(row) for row in probabilities]
    plans = [caption_plan(prediction, template, threshold) for prediction in predictions]
    return CaptionPlans(predictions, [prompt for prompt, _ in plans], [status for _, status in plans])
