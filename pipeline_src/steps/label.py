"""Step 3's logic: the Food-11 label and its probability from the classifier's logits, and which models answer.

Everything a classify-only caller asks for (LABEL, PROBABILITY, MODELS) comes from here, so such a call costs
the preprocess step, the classifier and this: Triton's ensemble leaves out the steps no requested output needs
(the vision encoder, ``caption_with_label`` and its captioner). PROBABILITIES feeds the steps after it.
"""

from __future__ import annotations

import numpy as np

from pipeline_src.contract import LABEL, MODELS, PROBABILITY
from pipeline_src.steps.batching import bytes_rows
from pipeline_src.steps.classification import ENCODED_CLASSES, logits_problem, softmax

LOGITS = "LOGITS"  # the step's input: the classifier's, one row per photo
PROBABILITIES = "PROBABILITIES"  # every class's probability, for the steps after it (caption_with_label, top_labels)
OUTPUTS = (LABEL, PROBABILITY, PROBABILITIES, MODELS)  # as its config.pbtxt declares
CHECKS = {LOGITS: logits_problem}  # a request whose logits are unusable fails alone, naming why


def label_outputs(logits: np.ndarray, models: str) -> dict[str, np.ndarray]:
    """The outputs for stacked ``logits [n, classes]``, a row each: the most probable class (ties: the lower
    index, as argmax), its softmax probability, every class's, and ``models`` (JSON, which models answer:
    pipeline_src.provenance.served)."""
    probabilities = softmax(logits)
    best = np.argmax(probabilities, axis=1)
    return {
        LABEL: ENCODED_CLASSES[best].reshape(-1, 1),
        PROBABILITY: np.take_along_axis(probabilities, best[:, None], axis=1),
        PROBABILITIES: probabilities,
        MODELS: bytes_rows([models] * len(probabilities)),
    }
