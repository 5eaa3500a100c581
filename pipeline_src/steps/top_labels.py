"""The k most probable Food-11 labels of each photo, best first, with their probabilities.

The worked example of extending the pipeline (docs/EXTENDING.md): created by ``food11-new-step top_labels``,
then edited. It reads the label step's PROBABILITIES (the softmax over the 11 classes), so its first label
and probability are the pipeline's LABEL and PROBABILITY: ties go to the lower class index, as argmax does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from pipeline_src.steps.classification import ENCODED_CLASSES
from pipeline_src.steps.labels import FOOD11_CLASSES
from pipeline_src.steps.settings import SettingsError, StepSettings

OUTPUTS = ("TOP_LABELS", "TOP_PROBABILITIES")  # both declare k per row in the config


@dataclass(frozen=True)
class TopLabelsSettings(StepSettings):
    k: int = 3  # labels per photo; the outputs' dims in config.pbtxt say the same (or -1)

    def validate(self) -> None:
        if not 1 <= self.k <= len(FOOD11_CLASSES):
            raise SettingsError(f"k must lie in [1, {len(FOOD11_CLASSES)}] (the Food-11 classes), not {self.k}")


def check_output_dims(k: int, output_dims: Mapping[str, Sequence[int]]) -> None:
    """Refuse a config whose outputs declare another row size than k: Triton would refuse every answer."""
    wrong = {
        name: list(output_dims.get(name, ()))
        for name in OUTPUTS
        if [int(dim) for dim in output_dims.get(name, ())] not in ([k], [-1])
    }
    if wrong:
        raise SettingsError(f"parameter k={k}, but the outputs declare dims {wrong}: make them [ {k} ] (or [ -1 ])")


@dataclass(frozen=True)
class TopLabels:
    labels: np.ndarray  # object [n, k]: UTF-8 bytes, as Triton's BYTES tensors carry them
    probabilities: np.ndarray  # float32 [n, k], descending in each row


def top_labels(batch: np.ndarray, k: int) -> TopLabels:
    """The k best classes of every row of a stacked batch, at once; rows keep their order."""
    order = np.argsort(-batch, axis=1, kind="stable")[:, :k]  # stable: ties keep the lower index first
    return TopLabels(ENCODED_CLASSES[order], np.take_along_axis(batch, order, axis=1).astype(np.float32))
