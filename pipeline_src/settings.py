"""Typed settings of each step, read from the ``parameters`` of its ``config.pbtxt``.

Every tunable of a step lives in its config, so a repository validator can check them before the
server starts (``StepSettings.from_parameters`` raises on a bad value) and users tune a step without
touching code.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from typing import Any, Mapping, TypeVar

T = TypeVar("T", bound="StepSettings")


class SettingsError(ValueError):
    """A config parameter is unknown or has a value of the wrong type."""


def config_parameters(model_config: Mapping[str, Any]) -> dict[str, str]:
    """``{"parameters": {"k": {"string_value": "v"}}}`` (Triton's JSON model config) -> ``{"k": "v"}``."""
    return {key: value["string_value"] for key, value in model_config.get("parameters", {}).items()}


@dataclass(frozen=True)
class StepSettings:
    @classmethod
    def from_parameters(cls: type[T], parameters: Mapping[str, str]) -> T:
        known = {field.name: field for field in fields(cls)}
        unknown = sorted(set(parameters) - set(known))
        if unknown:
            raise SettingsError(f"{cls.__name__}: unknown parameter(s) {unknown}; known: {sorted(known)}")
        values = {}
        for name, text in parameters.items():
            kind = type(getattr(cls(), name))
            try:
                values[name] = _parse(kind, text)
            except ValueError as exc:
                raise SettingsError(f"{cls.__name__}: parameter {name}={text!r} is not a {kind.__name__}") from exc
        settings = cls(**values)
        settings.validate()
        return settings

    @classmethod
    def from_model_config(cls: type[T], model_config: Mapping[str, Any]) -> T:
        return cls.from_parameters(config_parameters(model_config))

    def validate(self) -> None:
        """Subclasses check ranges here."""

    def replace(self: T, **changes: Any) -> T:
        return dataclasses.replace(self, **changes)


def _parse(kind: type, text: str) -> Any:
    if kind is bool:
        lowered = text.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise ValueError(text)
    return kind(text)


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise SettingsError(message)


@dataclass(frozen=True)
class PreprocessSettings(StepSettings):
    max_pixels: int = 40_000_000  # refuse larger images before decoding them (decompression bombs)

    def validate(self) -> None:
        _require(self.max_pixels > 0, "max_pixels must be positive")


@dataclass(frozen=True)
class ClassifierSettings(StepSettings):
    onnx_file: str = "model.onnx"  # relative to the model version directory
    intra_op_threads: int = 0  # 0: ONNX Runtime's default (one per physical core)

    def validate(self) -> None:
        _require(self.intra_op_threads >= 0, "intra_op_threads must be >= 0")


@dataclass(frozen=True)
class LabelAndCaptionSettings(StepSettings):
    captioner_model: str = "captioner"
    prompt_template: str = "a photo of {label},"
    confidence_threshold: float = 0.5  # below it, caption without the label prompt
    caption_timeout_ms: int = 30_000

    def validate(self) -> None:
        _require("{label}" in self.prompt_template, "prompt_template must contain {label}")
        _require(0.0 <= self.confidence_threshold <= 1.0, "confidence_threshold must lie in [0, 1]")
        _require(self.caption_timeout_ms > 0, "caption_timeout_ms must be positive")


@dataclass(frozen=True)
class CaptionerSettings(StepSettings):
    model_dir: str = "blip"  # a local Hugging Face snapshot, relative to the model version directory
    max_new_tokens: int = 30
    num_beams: int = 1
    repetition_penalty: float = 1.0
    fp16_on_gpu: bool = True

    def validate(self) -> None:
        _require(self.max_new_tokens > 0, "max_new_tokens must be positive")
        _require(self.num_beams > 0, "num_beams must be positive")
        _require(self.repetition_penalty > 0, "repetition_penalty must be positive")
