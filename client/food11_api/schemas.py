"""Request and response bodies, with the examples Swagger shows."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Base64Bytes, BaseModel, Field, StringConstraints

from food11_api.extra_outputs import EXTRA_DOC
from food11_client import ServedModel
from pipeline_src.contract import CaptionStatus
from pipeline_src.provenance.standins import BLIP_STANDIN_WARNING, CLASSIFIER_STANDIN_WARNING

# What the offline defaults answer with: Swagger's examples say so, as the page does.
STANDIN_WARNINGS = [BLIP_STANDIN_WARNING, CLASSIFIER_STANDIN_WARNING]
WARNINGS_DOC = (
    "what the user must know about this answer, in plain words: a stand-in model's warning (random "
    "weights: meaningless captions), or that a model's origin is unknown. Empty when every model that "
    "answered is real"
)
MODELS_EXAMPLE = [
    {
        "model": "captioner",
        "version": "1",
        "kind": "stand-in",
        "sha256": "9d1ca878c3faccbc",
        "source": "BLIP stand-in 'base', random weights (seed 0), built by scripts/build_models.py",
        "warning": STANDIN_WARNINGS[0],
    }
]


# A code may be followed by ": <detail>" (the timeout, the captioner's error): the status goes out as the
# pipeline wrote it, so the schema takes a bare code or a code with its detail.
CaptionStatusWithDetail = Annotated[
    str, StringConstraints(pattern=f"^({'|'.join(code.value for code in CaptionStatus)}): ")
]
CaptionStatusText = Annotated[
    CaptionStatus | CaptionStatusWithDetail,
    Field(
        description="ok | low_confidence (captioned without the label) | captioner_timeout: ... | "
        "captioner_error: ... (both: caption empty, label and probability still valid)",
        examples=[CaptionStatus.OK.value],
    ),
]


class ServedModelInfo(BaseModel):
    """One model whose weights took part in the answer, as its build's manifest says."""

    model: str = Field(description="the model's name in Triton", examples=["captioner"])
    version: str = Field(description="the version Triton served", examples=["1"])
    kind: str = Field(
        description="real | stand-in | unknown (files not built by scripts/build_models.py) | user (a model file of "
        "yours: food11-new-step --onnx)",
        examples=["stand-in"],
    )
    sha256: str = Field(
        description="the first 16 hex digits of the manifest's hash over the model's files: "
        "two answers with the same hash came from the same weights",
        examples=["9d1ca878c3faccbc"],
    )
    source: str = Field(description="where the weights came from", examples=[MODELS_EXAMPLE[0]["source"]])
    warning: str = Field(default="", description="a stand-in's warning", examples=[STANDIN_WARNINGS[0]])

    @classmethod
    def of(cls, models: tuple[ServedModel, ...]) -> list[ServedModelInfo]:
        return [cls.model_validate(model, from_attributes=True) for model in models]


class CaptionResponse(BaseModel):
    label: str = Field(description="Food-11 class", examples=["Vegetable/Fruit"])
    probability: float = Field(ge=0, le=1, description="softmax probability of the label", examples=[0.998])
    caption: str = Field(
        description="BLIP caption, conditioned on the label. From the offline default's BLIP "
        "stand-in (random weights) it is meaningless words: `warnings` says so",
        examples=["a photo of vegetable/fruit, a green apple on a table"],
    )
    caption_status: CaptionStatusText
    warnings: list[str] = Field(description=WARNINGS_DOC, examples=[STANDIN_WARNINGS])
    models: list[ServedModelInfo] = Field(
        description="which models answered: Triton's names and versions, what each is, its weights' hash",
        examples=[MODELS_EXAMPLE],
    )
    extra: dict[str, Any] = Field(default_factory=dict, description=EXTRA_DOC, examples=[{}])
    elapsed_ms: float = Field(description="time this API spent on the request, milliseconds", examples=[41.7])


class ClassifyResponse(BaseModel):
    """The label alone: the pipeline runs no captioning for it (the preprocess step, the classifier and the
    label step: milliseconds where a caption takes seconds)."""

    label: str = Field(description="Food-11 class", examples=["Vegetable/Fruit"])
    probability: float = Field(ge=0, le=1, description="softmax probability of the label", examples=[0.998])
    warnings: list[str] = Field(description=WARNINGS_DOC, examples=[STANDIN_WARNINGS])
    models: list[ServedModelInfo] = Field(description="which models answer", examples=[MODELS_EXAMPLE])
    elapsed_ms: float = Field(description="time this API spent on the request, milliseconds", examples=[12.3])


class PredictRequest(BaseModel):
    image: Base64Bytes = Field(description="the photo's file bytes, base64-encoded", examples=["/9j/4AAQSkZJRgABAQ..."])


class PredictResponse(BaseModel):
    """The course's ``/predict`` answer (``prediction``, ``probability``) plus the caption."""

    prediction: str = Field(description="Food-11 class", examples=["Vegetable/Fruit"])
    probability: float = Field(ge=0, le=1, examples=[0.998])
    caption: str = Field(
        description="as /caption's: meaningless words from the offline BLIP stand-in (see warnings)",
        examples=["a photo of vegetable/fruit, a green apple on a table"],
    )
    caption_status: CaptionStatusText
    warnings: list[str] = Field(description=WARNINGS_DOC, examples=[STANDIN_WARNINGS])
    models: list[ServedModelInfo] = Field(description="which models answered", examples=[MODELS_EXAMPLE])
    extra: dict[str, Any] = Field(default_factory=dict, description=EXTRA_DOC, examples=[{}])


class ErrorResponse(BaseModel):
    detail: str = Field(description="what went wrong; for a bad photo, the pipeline's message")
    request_id: str = Field(description="also in the API's log and the X-Request-ID header")


class Health(BaseModel):
    status: str = Field(examples=["ok"])


class ModelState(BaseModel):
    """A model Triton knows, with its build's manifest when it has one."""

    name: str = Field(examples=["captioner"])
    version: str = Field(default="", examples=["1"])
    state: str = Field(default="", description="Triton's: READY, UNAVAILABLE, LOADING, ...", examples=["READY"])
    reason: str = Field(default="", description="why it is not ready, when Triton says")
    manifest: dict | None = Field(
        default=None,
        description="what the build wrote of it (kind, source, file hashes, "
        "precisions, measured fidelity); null: no manifest",
    )
