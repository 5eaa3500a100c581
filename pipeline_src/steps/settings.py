"""Typed settings of each step, read from the ``parameters`` of its ``config.pbtxt`` (docs/configuration.md), so
``food11-validate`` checks them before the server starts. A config names its class in its ``settings`` parameter
(``pipeline_src.steps.settings:PreprocessSettings``): how the validator finds it, and ``from_model_config`` refuses
a config naming another class than the one ``model.py`` reads."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar, TypeVar

from pipeline_src.steps.bls import BlsCall, BlsTensor

T = TypeVar("T", bound="StepSettings")


class SettingsError(ValueError):
    """A config parameter is unknown or has a value of the wrong type."""


SETTINGS_PARAMETER = "settings"  # the parameter naming a step's settings class, "module:Class"


def config_parameters(model_config: Mapping[str, Any]) -> dict[str, str]:
    """``{"parameters": {"k": {"string_value": "v"}}}`` (Triton's JSON model config) -> ``{"k": "v"}``."""
    return {key: value["string_value"] for key, value in model_config.get("parameters", {}).items()}


def declared_settings_class(parameters: Mapping[str, str]) -> type[StepSettings] | None:
    """The class a step's ``settings`` parameter names, or None when it names none."""
    reference = parameters.get(SETTINGS_PARAMETER)
    if reference is None:
        return None
    module_name, _, class_name = reference.partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError, ValueError) as exc:
        raise SettingsError(f"parameter {SETTINGS_PARAMETER}={reference!r} names no importable class: {exc}") from exc
    if not (isinstance(cls, type) and issubclass(cls, StepSettings)):
        raise SettingsError(f"parameter {SETTINGS_PARAMETER}={reference!r} is not a StepSettings class")
    return cls


@dataclass(frozen=True)
class StepSettings:
    # What food11-validate checks beyond the values, declared by each step for its own fields. Paths are
    # relative to the model's version folder.
    FILE_FIELDS: ClassVar[tuple[str, ...]] = ()  # fields naming a file that must exist
    # fields naming a directory that must exist, with the files it must hold (e.g. a snapshot's config.json)
    DIRECTORY_FIELDS: ClassVar[Mapping[str, tuple[str, ...]]] = {}
    # fields naming an ONNX model file whose inputs and outputs are this step's own: it must exist, and its
    # names, element types and shapes must match the config
    ONNX_FILE_FIELDS: ClassVar[tuple[str, ...]] = ()
    BLS_CALLS: ClassVar[tuple[BlsCall, ...]] = ()  # the models this step calls by BLS (pipeline_src.steps.bls)

    @classmethod
    def reference(cls) -> str:
        """What a config's ``settings`` parameter says to name this class."""
        return f"{cls.__module__}:{cls.__qualname__}"

    @classmethod
    def from_parameters(cls: type[T], parameters: Mapping[str, str]) -> T:
        parameters = dict(parameters)
        declared = parameters.pop(SETTINGS_PARAMETER, None)
        if declared is not None and declared != cls.reference():
            raise SettingsError(f"the config declares settings {declared!r}, but this step reads {cls.reference()!r}")
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
    decode_threads: int = 0  # a batch's photos decoded this many at a time; 0: one per core the step may use

    def validate(self) -> None:
        _require(self.max_pixels > 0, "max_pixels must be positive")
        _require(self.decode_threads >= 0, "decode_threads must be 0 (one per core) or more")


@dataclass(frozen=True)
class ModelManifestsSettings(StepSettings):
    """No parameters: the step serves what the build wrote (pipeline_src.provenance)."""


@dataclass(frozen=True)
class OnnxStepSettings(StepSettings):
    """A step that runs one ONNX model (pipeline_src.steps.onnx_step)."""

    onnx_file: str = "model.onnx"  # relative to the model version directory
    intra_op_threads: int = 0  # 0: ONNX Runtime's default (one per physical core)
    # GPU: "1,8,32" pads each batch to the smallest size that holds it, one session per size (no new shapes for
    # cuDNN to set up again); empty: batches as they come (docs/configuration.md)
    gpu_batch_sizes: str = ""

    ONNX_FILE_FIELDS = ("onnx_file",)

    @property
    def padded_batch_sizes(self) -> tuple[int, ...]:
        return tuple(int(size) for size in self.gpu_batch_sizes.split(",") if size.strip())

    def validate(self) -> None:
        _require(self.intra_op_threads >= 0, "intra_op_threads must be >= 0")
        try:
            sizes = self.padded_batch_sizes
        except ValueError:
            raise SettingsError(f"gpu_batch_sizes must be comma-separated integers: {self.gpu_batch_sizes!r}") from None
        _require(
            all(size > 0 for size in sizes) and list(sizes) == sorted(set(sizes)),
            f"gpu_batch_sizes must be positive and increasing: {self.gpu_batch_sizes!r}",
        )


@dataclass(frozen=True)
class OnnxFileSettings(OnnxStepSettings):
    """A step that is a model file of yours, any number of inputs and outputs (``food11-new-step NAME --onnx
    FILE``, pipeline_src.steps.onnx_file_step)."""

    # A request with NaN or infinity in a float input fails alone, naming the row: most graphs would answer it
    # with NaN, which a JSON caller cannot read. false: every value goes to the graph.
    refuse_non_finite: bool = True


@dataclass(frozen=True)
class ClassifierSettings(OnnxStepSettings):
    gpu_batch_sizes: str = "1,8,32"  # padded to these: 2.5-12 ms a batch, not 97-550 (configuration.md)


@dataclass(frozen=True)
class PrecisionSettings(StepSettings):
    """How a BLIP step computes on a CPU instance (pipeline_src.steps.precision): fp32 (exact, the
    default), int8 (int8 weights, built next to the fp32 graphs), or auto (int8 where the build measured
    its teacher-forced top-1 agreement with fp32 at ``auto_min_agreement`` or more, else fp32)."""

    cpu_precision: str = "fp32"
    auto_min_agreement: float = 0.99

    CPU_PRECISIONS: ClassVar[tuple[str, ...]] = ("fp32", "int8", "auto")

    def choose_precision(self, directory, on_gpu: bool):
        """fp32 or int8 for the graphs in ``directory`` (pipeline_src.steps.precision.choose_precision)."""
        from pipeline_src.steps.precision import choose_precision  # light, but only steps need it

        return choose_precision(self.cpu_precision, directory, self.auto_min_agreement, on_gpu)

    def validate(self) -> None:
        super().validate()  # the next class's checks first: OnnxStepSettings' for the vision encoder
        _require(self.cpu_precision in self.CPU_PRECISIONS, f"cpu_precision must be one of {self.CPU_PRECISIONS}")
        _require(0.0 <= self.auto_min_agreement <= 1.0, "auto_min_agreement must lie in [0, 1]")


@dataclass(frozen=True)
class VisionEncoderSettings(PrecisionSettings, OnnxStepSettings):
    """An ONNX step with a CPU precision to choose; both bases' checks run (PrecisionSettings.validate)."""


@dataclass(frozen=True)
class LabelSettings(StepSettings):
    """The label step has nothing to tune; its class names its code for the tools that run steps outside Triton
    (the benchmarks' input data)."""


@dataclass(frozen=True)
class CaptionWithLabelSettings(StepSettings):
    captioner_model: str = "captioner"
    prompt_template: str = "a photo of {label},"
    confidence_threshold: float = 0.5  # below it, caption without the label prompt
    caption_timeout_ms: int = 300_000  # the longest wait for a caption; a caller's shorter time left wins
    # the captioner failed or was too slow: empty_caption (and why), refuse (UNAVAILABLE), auto: refuse where Triton
    # caches answers (an empty caption would be served again), else empty_caption
    on_caption_failure: str = "auto"
    ON_CAPTION_FAILURE: ClassVar[tuple[str, ...]] = ("auto", "empty_caption", "refuse")

    # model.py builds its captioner request from this; food11-validate checks it against the captioner.
    CAPTIONER_CALL: ClassVar[BlsCall] = BlsCall(
        callee_field="captioner_model",
        inputs=(
            # whichever this step was given: the embeddings (1 + 24 x 24 patches), or pixels the captioner encodes
            BlsTensor("IMAGE_EMBEDS", "TYPE_FP32", (577, -1), forwarded=True, optional=True),
            BlsTensor("CAPTIONER_PIXELS", "TYPE_UINT8", (3, 384, 384), forwarded=True, optional=True),
            BlsTensor("PROMPT", "TYPE_STRING", (1,)),  # empty: an unconditional caption
        ),
        outputs=(
            BlsTensor("CAPTION", "TYPE_STRING", (1,)),
            BlsTensor("CAPTION_ERROR", "TYPE_STRING", (1,)),  # why no caption, in band (captioner/config.pbtxt)
            BlsTensor("CAPTION_MODE", "TYPE_STRING", (1,)),  # which mode made each caption: exact, or fast (...)
        ),
    )
    BLS_CALLS = (CAPTIONER_CALL,)

    def validate(self) -> None:
        _require("{label}" in self.prompt_template, "prompt_template must contain {label}")
        _require(0.0 <= self.confidence_threshold <= 1.0, "confidence_threshold must lie in [0, 1]")
        _require(self.caption_timeout_ms > 0, "caption_timeout_ms must be positive")
        _require(
            self.on_caption_failure in self.ON_CAPTION_FAILURE,
            f"on_caption_failure must be one of {self.ON_CAPTION_FAILURE}",
        )

    def refuses_failed_captions(self, responses_cached: bool) -> bool:
        """Whether a request whose caption failed is refused rather than answered with an empty caption."""
        return self.on_caption_failure == "refuse" or (self.on_caption_failure == "auto" and responses_cached)

    def caption_wait_ms(self, request_timeout_us: int) -> int:
        """How long to wait for the captioner: the caller's time left (0: unset), at most
        caption_timeout_ms."""
        if request_timeout_us <= 0:
            return self.caption_timeout_ms
        return max(1, min(self.caption_timeout_ms, request_timeout_us // 1000))


@dataclass(frozen=True)
class CaptionerSettings(PrecisionSettings):
    # Every setting's meaning: docs/configuration.md. Paths are relative to the model version directory.
    model_dir: str = "blip"  # the BLIP snapshot the graphs were built from: serving reads only its STAND_IN.json
    graphs_dir: str = "text_decoder"
    max_new_tokens: int = 20
    repetition_penalty: float = 1.0  # 1.0: none (Hugging Face's definition otherwise)
    intra_op_threads: int = 0  # 0: ONNX Runtime's default (one per physical core)
    # in the step, not the config's model_warmup: this step's input width is the built model's, unknown to its config
    warm_up: bool = True
    rows_in_flight: int = 32  # the decoder's table (fixed_buffers): at least max_batch_size, a request joins whole
    max_prompt_tokens: int = 32  # a longer prompt is captioned alone, outside the table
    max_waiting_requests: int = 128  # the loop's queue policy, as Triton's would be (caption_engine)
    waiting_timeout_microseconds: int = 240_000_000  # Triton's unit, as its default_timeout_microseconds
    gpu_cuda_graphs: bool = True  # on a GPU instance: each step size recorded once, replayed as a CUDA graph
    mode: str = "exact"  # exact: the fp32 graphs; fast: the fp16 ones (make models BUILD_ARGS=--fast), guarded
    fast_guard_margin: float = -1.0  # < 0: the margin the build calibrated (text_decoder/fidelity.json)
    MODES: ClassVar[tuple[str, ...]] = ("exact", "fast")
    # for requests sending CAPTIONER_PIXELS (food11_pipeline_merged), loaded at the first; "": they are refused
    vision_encoder_graph: str = "../../vision_encoder/1/model.onnx"

    DIRECTORY_FIELDS: ClassVar[Mapping[str, tuple[str, ...]]] = {
        "model_dir": ("config.json",),
        "graphs_dir": ("cross_kv.onnx", "decoder_step.onnx", "decoder.json", "tokenizer.json"),
    }

    def validate(self) -> None:
        super().validate()
        sizes = ("max_new_tokens", "max_prompt_tokens", "rows_in_flight", "max_waiting_requests")
        for name in (*sizes, "repetition_penalty", "waiting_timeout_microseconds"):
            _require(getattr(self, name) > 0, f"{name} must be positive")
        _require(self.mode in self.MODES, f"mode must be one of {self.MODES}")
        _require(self.intra_op_threads >= 0, "intra_op_threads must be >= 0")
