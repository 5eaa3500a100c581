"""From classifier logits to a Food-11 label, a real probability, and the captioning prompt."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline_src.contract import CaptionStatus
from pipeline_src.steps.labels import FOOD11_CLASSES


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


def predict(logits: np.ndarray, classes: tuple[str, ...] = FOOD11_CLASSES) -> Prediction:
    """The top class of one row of logits, with its softmax probability."""
    logits = np.asarray(logits)
    if logits.shape != (len(classes),):
        raise ValueError(f"expected {len(classes)} logits, got shape {logits.shape}")
    if not np.all(np.isfinite(logits)):
        raise ValueError("logits contain NaN or infinity")
    probabilities = softmax(logits)
    index = int(np.argmax(probabilities))
    return Prediction(classes[index], float(probabilities[index]), probabilities)


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


def plan_captions(logits: np.ndarray, template: str, threshold: float) -> CaptionPlans:
    """``predict`` each row of ``logits [n, classes]``, then ``caption_plan`` it: what label_and_caption does
    before calling the captioner (the step itself, the in-process pipeline and the benchmarks' input data).
    ValueError names the first unusable row's problem."""
    predictions = [predict(row) for row in logits]
    plans = [caption_plan(prediction, template, threshold) for prediction in predictions]
    return CaptionPlans(predictions, [prompt for prompt, _ in plans], [status for _, status in plans])
