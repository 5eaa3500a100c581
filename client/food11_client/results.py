"""What a call answers: per photo, a ``CaptionResult`` (``caption``) or a ``Classification`` (``classify``), the
models that served it, and the outputs the ensemble declares beyond the core contract."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar


@dataclass(frozen=True)
class ServedModel:
    """One model whose weights took part in an answer, as its build's manifest describes it."""

    model: str
    version: str
    kind: str  # "real", "stand-in", "unknown" (files not built by scripts/build_models.py) or "user" (your file)
    sha256: str  # the first 16 hex digits of the manifest's hash: tells builds apart
    source: str  # where the weights came from
    warning: str = ""  # a stand-in's, in plain words


@dataclass(frozen=True)
class OutputSpec:
    """An output the ensemble declares beyond the core contract (a step someone added), as Triton's model
    metadata describes it."""

    name: str
    datatype: str  # Triton's: BYTES, FP32, INT64, BOOL, ...
    shape: tuple[int, ...]  # one row's, without the batch dimension; -1: any size


class _Answer:
    """What every answer carries: the models that served it. Its subclasses are the dataclasses."""

    __dataclass_fields__: ClassVar[dict[str, Any]]  # tells mypy that asdict(self) is sound: subclasses are dataclasses
    models: tuple[ServedModel, ...]

    @property
    def warnings(self) -> list[str]:
        """What a user must know about this answer (a stand-in's words), each once."""
        return list(dict.fromkeys(model.warning for model in self.models if model.warning))

    def to_dict(self) -> dict:
        return {**asdict(self), "models": [asdict(model) for model in self.models], "warnings": self.warnings}


@dataclass(frozen=True)
class CaptionResult(_Answer):
    label: str
    probability: float
    caption: str
    caption_status: str  # "ok", "low_confidence", "captioner_timeout: ...", "captioner_error: ..."
    models: tuple[ServedModel, ...] = ()
    # Every output the ensemble declares beyond the core contract, by name: this photo's row as JSON values
    # (a one-element row as its value, others as lists; BYTES as text). Empty for the shipped ensemble.
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Classification(_Answer):
    """A classify-only answer: the label and its probability, without a caption (nor its cost)."""

    label: str
    probability: float
    models: tuple[ServedModel, ...] = ()
