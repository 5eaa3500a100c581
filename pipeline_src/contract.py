"""The pipeline's wire contract, defined once: what a caller of the ``food11_pipeline`` ensemble sends and
reads, the caption-status codes, and the words of Triton's refusals under load.

Standard library only: the steps' ``model.py`` files (inside Triton), the client, the API's schema and
``food11-validate`` all import it, each in an environment that holds only its own dependencies.
A caller that names the outputs it reads keeps working when the ensemble declares more (``extra`` outputs);
renaming or removing one of ``CORE_OUTPUTS`` breaks every caller.
"""

from __future__ import annotations

from enum import Enum

ENSEMBLE = "food11_pipeline"  # the ensemble a caller calls by default
# The ensemble that answers CLASSIFY_OUTPUTS alone (preprocess, classifier, label): a classify call goes there,
# not to ENSEMBLE naming a subset of its outputs, since Triton's response cache keys an answer on the ensemble
# and its inputs, not on the outputs named (a cached partial answer would be served to a full call).
CLASSIFY_ENSEMBLE = "food11_classify"

# Set ("1") in tritonserver's environment, which its steps inherit, when it caches ensembles' answers
# (pipeline_src/serving/response_cache.py): an answer must then be whole, as a cached one is served again.
RESPONSES_CACHED_ENV = "FOOD11_RESPONSES_CACHED"

IMAGE = "IMAGE"  # BYTES [n, 1]: each row one photo's encoded file bytes (JPEG, PNG, ...)

# The ensemble's core outputs, each [n, 1], row i answering photo i.
LABEL = "LABEL"  # BYTES: the Food-11 class
PROBABILITY = "PROBABILITY"  # FP32: the label's softmax probability
CAPTION = "CAPTION"  # BYTES: the caption, conditioned on the label
CAPTION_STATUS = "CAPTION_STATUS"  # BYTES: a CaptionStatus code, ": <detail>" after the failures'
MODELS = "MODELS"  # BYTES: JSON, the models that answered (pipeline_src.provenance.served)
CORE_OUTPUTS = (LABEL, PROBABILITY, CAPTION, CAPTION_STATUS, MODELS)
# CLASSIFY_ENSEMBLE's outputs: the label without captioning, milliseconds instead of the captioner's seconds.
# A call of ENSEMBLE naming only these runs the same steps (Triton runs only those its outputs need), but with
# Triton's response cache on, its partial answer would be cached as ENSEMBLE's answer for that photo.
CLASSIFY_OUTPUTS = (LABEL, PROBABILITY, MODELS)
# As config.pbtxt spells each (data_type, one row's dims); food11-validate holds the ensemble to them.
CONFIG_TYPES = {
    IMAGE: ("TYPE_STRING", (1,)),
    LABEL: ("TYPE_STRING", (1,)),
    PROBABILITY: ("TYPE_FP32", (1,)),
    CAPTION: ("TYPE_STRING", (1,)),
    CAPTION_STATUS: ("TYPE_STRING", (1,)),
    MODELS: ("TYPE_STRING", (1,)),
}

MANIFESTS_MODEL = "model_manifests"  # the step that serves the loaded models' whole manifests
MANIFESTS = "MANIFESTS"  # its one output: BYTES [1], a JSON list


class CaptionStatus(str, Enum):
    """The code a ``CAPTION_STATUS`` row starts with."""

    OK = "ok"  # captioned with the label's prompt
    LOW_CONFIDENCE = "low_confidence"  # probability under the threshold: captioned without the label
    CAPTIONER_TIMEOUT = "captioner_timeout"  # the captioner did not answer in time: empty caption
    CAPTIONER_ERROR = "captioner_error"  # the captioner failed: empty caption

    def with_detail(self, detail: str) -> str:
        return f"{self.value}: {detail}"


# What Triton answers (status UNAVAILABLE) when a step's queue policy refuses a request: the queue is full,
# or the request waited past its queue timeout. The step is over capacity, not broken. Triton core,
# RequestQueue::Enqueue and the dynamic batcher's timeout check.
QUEUE_TIMED_OUT = "Request timeout expired"  # waited past the request's timeout (or the queue's default)
QUEUE_REFUSALS = ("Exceeds maximum queue size", QUEUE_TIMED_OUT)


# What Triton answers for a request to a Python step whose stub process died or stopped (python_backend's
# stub_launcher.cc): the step is being healed, not the request at fault.
STUB_DEAD = "is not healthy"


def refused_under_load(message: str) -> bool:
    return any(refusal in message for refusal in QUEUE_REFUSALS)
