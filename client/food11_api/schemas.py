"""Request and response bodies, with the examples Swagger shows."""

from __future__ import annotations

from pydantic import Base64Bytes, BaseModel, Field

CAPTION_STATUS_DOC = ("ok | low_confidence (captioned without the label) | captioner_timeout: ... | "
                      "captioner_error: ... (both: caption empty, label and probability still valid)")


class CaptionResponse(BaseModel):
    label: str = Field(description="Food-11 class", examples=["Vegetable/Fruit"])
    probability: float = Field(ge=0, le=1, description="softmax probability of the label", examples=[0.998])
    caption: str = Field(description="BLIP caption, conditioned on the label",
                         examples=["a photo of vegetable/fruit, a green apple on a table"])
    caption_status: str = Field(description=CAPTION_STATUS_DOC, examples=["ok"])
    elapsed_ms: float = Field(description="time this API spent on the request, milliseconds", examples=[41.7])


class PredictRequest(BaseModel):
    image: Base64Bytes = Field(description="the photo's file bytes, base64-encoded",
                               examples=["/9j/4AAQSkZJRgABAQ..."])


class PredictResponse(BaseModel):
    """The course's ``/predict`` answer (``prediction``, ``probability``) plus the caption."""

    prediction: str = Field(description="Food-11 class", examples=["Vegetable/Fruit"])
    probability: float = Field(ge=0, le=1, examples=[0.998])
    caption: str = Field(examples=["a photo of vegetable/fruit, a green apple on a table"])
    caption_status: str = Field(description=CAPTION_STATUS_DOC, examples=["ok"])


class ErrorResponse(BaseModel):
    detail: str = Field(description="what went wrong; for a bad photo, the pipeline's message")
    request_id: str = Field(description="also in the API's log and the X-Request-ID header")


class Health(BaseModel):
    status: str = Field(examples=["ok"])
