"""A repository's steps run in this process, with their own code and their config's settings, on what an
ensemble or a BLS caller would hand them: what perf_input computes each step's input data with.

``SPECIAL_RUNNERS`` runs the pipeline's own steps (the real decoding and resizing, the ONNX steps, the label,
caption_with_label's prompts, the captioner on ONNX Runtime, top_labels); any other step whose settings class's
module has ``compute(batch, settings)`` returning a dict of outputs (what ``food11-new-step`` writes) runs that.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from pipeline_src import contract
from pipeline_src.provenance.served import identity_json
from pipeline_src.repository.loading import ModelEntry, parse_config
from pipeline_src.repository.step_settings import stub_import_path
from pipeline_src.repository.tensors import data_type_name
from pipeline_src.steps.batching import NUMPY_TYPES, bytes_rows
from pipeline_src.steps.bls import BlsCall
from pipeline_src.steps.caption_with_label import (
    CAPTION_AFTER_PROMPT,
    CAPTION_ERROR_READ,
    CAPTION_MODE_READ,
    CAPTION_READ,
    EMBEDS_SENT,
    PIXELS_SENT,
    PROBABILITIES,
    PROMPT,
    PROMPT_SENT,
    after_prompt,
)
from pipeline_src.steps.classification import LOGITS, label_outputs, plan_captions
from pipeline_src.steps.imaging import image_tensors
from pipeline_src.steps.settings import (
    CaptionerSettings,
    CaptionWithLabelSettings,
    LabelSettings,
    OnnxStepSettings,
    PreprocessSettings,
    StepSettings,
    declared_settings_class,
)
from pipeline_src.steps.top_labels import TopLabelsSettings, top_labels

PHOTOS_INPUT = "IMAGE"  # the ensemble input the photos feed (pipeline_src.contract.IMAGE)

Arrays = dict[str, np.ndarray]
Runner = Callable[[Mapping[str, np.ndarray]], Arrays]


class Unfed(Exception):
    """A tensor that cannot be computed here; the message says why."""


class Model(ModelEntry):
    """A model of the repository, with what this module reads of its config."""

    @property
    def inputs(self) -> dict[str, str]:
        """Input name -> data type name (``TYPE_FP32``)."""
        return {tensor.name: data_type_name(tensor.data_type) for tensor in self.parsed_config.input}

    def parameters(self) -> dict[str, str]:
        return {key: value.string_value for key, value in self.parsed_config.parameters.items()}

    def settings(self) -> StepSettings | None:
        """Its typed settings; its logic module imported as the server's stub imports it (a self-contained
        step's from its model folder)."""
        with stub_import_path(self):
            cls = declared_settings_class(self.parameters())
        return cls.from_parameters(self.parameters()) if cls is not None else None


def load_models(repository: Path) -> dict[str, Model]:
    """Every model with a config; a config that does not parse raises (food11-validate says more)."""
    return {
        path.parent.name: Model(
            path.parent.name,
            path.parent,
            parse_config(path),
            sorted(version for version in path.parent.iterdir() if version.is_dir() and version.name.isdigit()),
        )
        for path in sorted(repository.glob("*/config.pbtxt"))
    }


def _preprocess_runner(model: Model, settings: StepSettings) -> Runner:
    assert isinstance(settings, PreprocessSettings)

    def run(inputs: Mapping[str, np.ndarray]) -> Arrays:
        tensors = [image_tensors(photo, settings.max_pixels) for photo in inputs[PHOTOS_INPUT].reshape(-1)]
        return {
            "CLASSIFIER_PIXELS": np.stack([t.classifier for t in tensors]),
            "CAPTIONER_PIXELS": np.stack([t.captioner for t in tensors]),
        }

    return run


def _onnx_runner(model: Model, settings: StepSettings) -> Runner:
    from pipeline_src.steps.onnx_runtime import OnnxModel

    assert isinstance(settings, OnnxStepSettings)
    onnx = OnnxModel.from_settings(settings, model.directory / "1")
    ((input_name, data_type),) = model.inputs.items()
    output_name = model.parsed_config.output[0].name
    dtype = np.dtype(NUMPY_TYPES[data_type])
    return lambda inputs: {output_name: onnx(np.asarray(inputs[input_name], dtype=dtype))}


def _label_runner(model: Model, settings: StepSettings) -> Runner:
    assert isinstance(settings, LabelSettings)
    models = identity_json(model.directory.parent)
    return lambda inputs: label_outputs(np.asarray(inputs[LOGITS], dtype=np.float32), models)


def _caption_with_label_runner(model: Model, settings: StepSettings) -> Runner:
    """Its outputs but the caption, and the prompt it sends the captioner (``Tensors`` runs the captioner, only
    when a step needs the caption: it takes seconds a photo)."""
    assert isinstance(settings, CaptionWithLabelSettings)

    def run(inputs: Mapping[str, np.ndarray]) -> Arrays:
        plans = plan_captions(inputs[PROBABILITIES], settings.prompt_template, settings.confidence_threshold)
        assert PROMPT_SENT.name == PROMPT  # its PROMPT output is what it sends the captioner by BLS
        return {
            contract.CAPTION_STATUS: bytes_rows(plans.statuses),  # what it answers when the caption comes
            PROMPT: bytes_rows(plans.prompts),
        }

    return run


def _caption_with_label_completion(computed: Arrays) -> Arrays:
    """Its outputs that need the caption, once the captioner's answer is in."""
    captions = [caption.decode("utf-8") for caption in computed[contract.CAPTION].reshape(-1)]
    prompts = [prompt.decode("utf-8") for prompt in computed[PROMPT].reshape(-1)]
    return {CAPTION_AFTER_PROMPT: bytes_rows(list(map(after_prompt, captions, prompts)))}


# A BLS step's outputs that its code derives from its callee's answer, by settings class.
COMPLETIONS: dict[type[StepSettings], tuple[tuple[str, ...], Callable[[Arrays], Arrays]]] = {
    CaptionWithLabelSettings: ((CAPTION_AFTER_PROMPT,), _caption_with_label_completion),
}


def _captioner_runner(model: Model, settings: StepSettings) -> Runner:
    """The captioner step's captioning on the CPU, with the step's own code and settings, on ONNX Runtime."""
    from pipeline_src.steps.captioning import GreedyCaptioner
    from pipeline_src.steps.onnx_runtime import OnnxModel

    assert isinstance(settings, CaptionerSettings)
    captioner = GreedyCaptioner.from_settings(settings, model.directory / "1")

    def run(inputs: Mapping[str, np.ndarray]) -> Arrays:
        prompts = [prompt.decode("utf-8") for prompt in inputs[PROMPT_SENT.name].reshape(-1)]
        embeds = inputs.get(EMBEDS_SENT.name)
        if embeds is None:  # the pixels, which it encodes itself (food11_pipeline_merged)
            embeds = OnnxModel((model.directory / "1" / settings.vision_encoder_graph).resolve())(
                inputs[PIXELS_SENT.name]
            )
        captions = captioner.caption(embeds, prompts)
        return {
            CAPTION_READ.name: bytes_rows(captions),
            CAPTION_ERROR_READ.name: bytes_rows([""] * len(captions)),
            CAPTION_MODE_READ.name: bytes_rows(["exact"] * len(captions)),  # the runner's are the exact graphs
        }

    return run


def _top_labels_runner(model: Model, settings: StepSettings) -> Runner:
    assert isinstance(settings, TopLabelsSettings)

    def run(inputs: Mapping[str, np.ndarray]) -> Arrays:
        best = top_labels(inputs["PROBABILITIES"], settings.k)
        return {"TOP_LABELS": best.labels, "TOP_PROBABILITIES": best.probabilities}

    return run


# The pipeline's own steps, by settings class (their model.py files are not plain compute functions).
SPECIAL_RUNNERS: dict[type[StepSettings], Callable[[Model, StepSettings], Runner]] = {
    PreprocessSettings: _preprocess_runner,
    LabelSettings: _label_runner,
    CaptionWithLabelSettings: _caption_with_label_runner,
    CaptionerSettings: _captioner_runner,
    TopLabelsSettings: _top_labels_runner,
    OnnxStepSettings: _onnx_runner,  # the classifier, the vision encoder, an ONNX step of yours
}


def make_runner(models: Mapping[str, Model], name: str) -> Runner | str:
    """The runner of the model ``name``, or why there is none."""
    model = models.get(name)
    if model is None:
        return f"model '{name}' is not in the repository"
    if model.is_ensemble:
        return f"'{name}' is an ensemble: an ensemble inside an ensemble is not run here"
    try:
        settings = model.settings()
    except Exception as exc:  # its settings do not load: food11-validate says more
        return f"{name}'s settings do not load ({exc})"
    if settings is None:
        return f"{name}'s config names no settings class, so its code is unknown here"
    try:
        for kind, make in SPECIAL_RUNNERS.items():
            if isinstance(settings, kind):
                return make(model, settings)
        # any other step: its logic module's (its settings class's) compute, as food11-new-step writes it
        compute = getattr(importlib.import_module(type(settings).__module__), "compute", None)
    except Exception as exc:  # a model file missing, a module that does not import
        return f"{name} cannot run here: {exc}"
    if not callable(compute):
        return (
            f"{name}'s code ({type(settings).__module__}) has no compute(batch, settings) returning its "
            "outputs, which this would run"
        )
    return lambda inputs: dict(compute(dict(inputs), settings))


def sent_by_call(call: BlsCall, caller_inputs: Mapping[str, np.ndarray], computed: Arrays) -> Arrays:
    """What a BLS caller sends its callee: its own input where it forwards it, else what its code computed."""
    missing = [t.name for t in call.inputs if not t.forwarded and t.name not in computed]
    if missing:
        raise Unfed(f"its code for {missing} is not run here")
    sent = [t for t in call.inputs if not (t.optional and t.name not in caller_inputs)]  # optional: when it has it
    return {t.name: caller_inputs[t.name] if t.forwarded else computed[t.name] for t in sent}
