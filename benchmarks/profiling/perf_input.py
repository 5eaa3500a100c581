"""perf_analyzer ``--input-data`` files for the ensembles and for each step, from a folder of photos.

Each model gets one JSON file with one entry per photo (perf_analyzer sends them in turn). A step gets what
an ensemble would hand it: the ensemble's wiring (each step's ``input_map``) says which ensemble tensor feeds
each of its inputs, and that tensor is computed here, from the photos, by the steps that produce it, run in
this process with their own code and their config's settings:

- ``preprocess`` (the real decoding and resizing), the ONNX steps (``OnnxStepSettings``: the classifier, the
  vision encoder), ``label``, ``caption_with_label``'s status and the prompt it sends the captioner,
  ``top_labels``;
- a BLS caller's output that its callee makes (``caption_with_label``'s CAPTION, the captioner's), only when a
  step needs it: the callee (the captioner, on ONNX Runtime, as ``InProcessPipeline`` runs it) is run here on
  what the caller sends it, and how long that took is printed, so a step after the BLS step gets data too;
- any step whose settings class's module has ``compute(batch, settings)`` returning a dict of outputs (what
  ``food11-new-step`` writes), so a step fed by a step of yours gets data too;
- a BLS callee (the captioner) gets what its caller sends: the caller's own input where it forwards it, else
  what the caller's code computes (``caption_with_label``'s prompts).

What cannot be computed here (a step whose code has no ``compute``, a model no ensemble feeds, a captioner
whose model files are missing) is named, with the reason and what to do, in what ``write_all`` returns and
the command prints.
Encodings, as perf_analyzer's docs/input_data.md gives them: a numeric tensor as base64 of its little-endian
bytes; a BYTES tensor as base64 of its elements, each a 4-byte little-endian length then the bytes (the form
Triton serialises them in).
"""

from __future__ import annotations

import argparse
import base64
import importlib
import json
import struct
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tritonclient.grpc import model_config_pb2

from pipeline_src import PROJECT_ROOT, contract
from pipeline_src.provenance.served import identity_json
from pipeline_src.repository.loading import ModelEntry, parse_config
from pipeline_src.repository.step_settings import stub_import_path
from pipeline_src.steps.batching import bytes_rows
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
from pipeline_src.steps.classification import plan_captions
from pipeline_src.steps.imaging import image_tensors
from pipeline_src.steps.label import LOGITS, label_outputs
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

PHOTO_SUFFIXES = {".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif"}
DEFAULT_OUTPUT = PROJECT_ROOT / "build" / "perf_input"
WRITE_IT_YOURSELF = (
    "to profile it anyway, write its input file yourself (the format: benchmarks/profiling/perf_input.py; "
    "docs/profiling.md, 'A step this cannot feed')"
)
PHOTOS_INPUT = "IMAGE"  # the ensemble input the photos feed (pipeline_src.contract.IMAGE)
STRING_TYPE = "TYPE_STRING"

Arrays = dict[str, np.ndarray]
Runner = Callable[[Mapping[str, np.ndarray]], Arrays]


class Unfed(Exception):
    """A tensor that cannot be computed here; the message says why."""


def tensor_content(row: np.ndarray, data_type: str) -> dict:
    """One request's tensor (a row, without the batch dimension) in perf_analyzer's encoding."""
    if data_type == STRING_TYPE:
        elements = [value if isinstance(value, bytes) else str(value).encode("utf-8") for value in row.flat]
        raw = b"".join(struct.pack("<I", len(value)) + value for value in elements)
    else:
        dtype = np.dtype(_NUMPY_TYPES[data_type]).newbyteorder("<")
        raw = np.ascontiguousarray(row, dtype=dtype).tobytes()
    return {"b64": base64.b64encode(raw).decode("ascii")}


_NUMPY_TYPES = {
    "TYPE_BOOL": "bool",
    "TYPE_FP16": "float16",
    "TYPE_FP32": "float32",
    "TYPE_FP64": "float64",
    **{f"TYPE_INT{bits}": f"int{bits}" for bits in (8, 16, 32, 64)},
    **{f"TYPE_UINT{bits}": f"uint{bits}" for bits in (8, 16, 32, 64)},
}


class Model(ModelEntry):
    """A model of the repository, with what this module reads of its config."""

    @property
    def inputs(self) -> dict[str, str]:
        """Input name -> data type name (``TYPE_FP32``)."""
        return {tensor.name: _type_name(tensor.data_type) for tensor in self.parsed_config.input}

    def parameters(self) -> dict[str, str]:
        return {key: value.string_value for key, value in self.parsed_config.parameters.items()}

    def settings(self) -> StepSettings | None:
        """Its typed settings; its logic module imported as the server's stub imports it (a self-contained
        step's from its model folder)."""
        with stub_import_path(self):
            cls = declared_settings_class(self.parameters())
        return cls.from_parameters(self.parameters()) if cls is not None else None


def _type_name(value: int) -> str:
    return model_config_pb2.DataType.Name(value)


# --- running steps in this process ---------------------------------------------------------------------------


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
    dtype = np.dtype(_NUMPY_TYPES[data_type])
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
    """The captioner step's captioning on the CPU, as the in-process pipeline runs it (benchmarks.lib.in_process)."""
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


def _compute_runner(model: Model, settings: StepSettings) -> Runner | None:
    """A step whose logic module (its settings class's) has ``compute(batch, settings)`` -> dict: as
    food11-new-step writes it."""
    module = importlib.import_module(type(settings).__module__)
    compute = getattr(module, "compute", None)
    if not callable(compute):
        return None
    return lambda inputs: dict(compute(dict(inputs), settings))


# The pipeline's own steps, by settings class (their model.py files are not plain compute functions).
SPECIAL_RUNNERS: dict[type[StepSettings], Callable[[Model, StepSettings], Runner]] = {
    PreprocessSettings: _preprocess_runner,
    LabelSettings: _label_runner,
    CaptionWithLabelSettings: _caption_with_label_runner,
    CaptionerSettings: _captioner_runner,
    TopLabelsSettings: _top_labels_runner,
    OnnxStepSettings: _onnx_runner,  # the classifier, the vision encoder, an ONNX step of yours
}


def sent_by_call(call: BlsCall, caller_inputs: Mapping[str, np.ndarray], computed: Arrays) -> Arrays:
    """What a BLS caller sends its callee: its own input where it forwards it, else what its code computed."""
    missing = [t.name for t in call.inputs if not t.forwarded and t.name not in computed]
    if missing:
        raise Unfed(f"its code for {missing} is not run here")
    sent = [t for t in call.inputs if not (t.optional and t.name not in caller_inputs)]  # optional: when it has it
    return {t.name: caller_inputs[t.name] if t.forwarded else computed[t.name] for t in sent}


@dataclass(frozen=True)
class CalleeRun:
    """A BLS callee run here for its caller's answers (the captioner for caption_with_label's CAPTION)."""

    callee: str
    caller: str
    photos: int
    seconds: float

    def text(self) -> str:
        return f"ran {self.callee} here for {self.caller}'s answers to {self.photos} photos: {self.seconds:.1f} s"


# --- an ensemble's tensors, from its wiring -----------------------------------------------------------------


@dataclass
class Tensors:
    """The tensors of the repository's ensembles for the photos, computed on demand, each once."""

    models: dict[str, Model]
    photos: Sequence[bytes]
    runners: dict[str, Runner | str] = field(default_factory=dict)  # model -> runner, or why there is none
    results: dict[tuple, Arrays] = field(default_factory=dict)  # (model, its inputs' sources) -> its outputs
    callee_runs: list[CalleeRun] = field(default_factory=list)

    def runner(self, name: str) -> Runner:
        if name not in self.runners:
            self.runners[name] = self._make_runner(name)
        found = self.runners[name]
        if isinstance(found, str):
            raise Unfed(found)
        return found

    def _make_runner(self, name: str) -> Runner | str:
        model = self.models.get(name)
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
            runner = _compute_runner(model, settings)
        except Exception as exc:  # a model file missing, a module that does not import
            return f"{name} cannot run here: {exc}"
        if runner is None:
            return (
                f"{name}'s code ({type(settings).__module__}) has no compute(batch, settings) returning its "
                "outputs, which this would run"
            )
        return runner

    def source(self, ensemble: Model, tensor: str) -> tuple:
        """What an ensemble tensor is: the photos, or (producing model, its output, its inputs' sources)."""
        if tensor in {t.name for t in ensemble.parsed_config.input}:
            if tensor != PHOTOS_INPUT:
                raise Unfed(f"{ensemble.name}'s input '{tensor}': only '{PHOTOS_INPUT}' (the photos) is known here")
            return (PHOTOS_INPUT,)
        for step in ensemble.parsed_config.ensemble_scheduling.step:
            for key, value in step.output_map.items():
                if value == tensor:
                    inputs = tuple(sorted((k, self.source(ensemble, v)) for k, v in step.input_map.items()))
                    return (step.model_name, key, inputs)
        raise Unfed(f"{ensemble.name}: no step produces '{tensor}'")

    def value(self, source: tuple) -> np.ndarray:
        """The tensor, one row per photo."""
        if source == (PHOTOS_INPUT,):
            return bytes_rows(self.photos)
        model, output, inputs = source
        key = (model, inputs)
        if key not in self.results:
            self.results[key] = self._run(model, self._arguments(model, inputs))
        outputs = self.results[key]
        if output not in outputs:
            outputs.update(self._callee_answers(model, output, inputs, outputs))
        return outputs[output]

    def _arguments(self, model: str, inputs: tuple) -> Arrays:
        try:
            return {name: self.value(input_source) for name, input_source in inputs}
        except Unfed as exc:
            raise Unfed(f"{model}'s input: {exc}") from None

    def _run(self, model: str, arguments: Arrays) -> Arrays:
        runner = self.runner(model)
        try:
            return runner(arguments)
        except Exception as exc:  # a step's own code failing on these photos
            raise Unfed(f"{model} failed here on these photos: {exc!r}") from exc

    def _callee_answers(self, caller: str, output: str, inputs: tuple, computed: Arrays) -> Arrays:
        """A caller's output that its BLS callee makes, under the callee's name for it (caption_with_label's
        CAPTION, the captioner's): the callee run here on what the caller sends it."""
        settings = self.models[caller].settings()
        calls = getattr(settings, "BLS_CALLS", ())
        derived, complete = next(
            (found for kind, found in COMPLETIONS.items() if isinstance(settings, kind)), ((), lambda _: {})
        )
        # An output the callee answers, or one the caller's code derives from its (first) call's answer.
        fallback = calls[0] if output in derived and calls else None
        call = next((c for c in calls if output in {t.name for t in c.outputs}), fallback)
        if call is None:
            raise Unfed(f"{caller}'s output '{output}' is not computed here")
        callee = call.callee(settings)
        started = time.perf_counter()
        try:
            answers = self._run(callee, sent_by_call(call, self._arguments(caller, inputs), computed))
        except Unfed as exc:
            raise Unfed(f"{caller}'s output '{output}' comes from {callee}, called by BLS: {exc}") from None
        self.callee_runs.append(CalleeRun(callee, caller, len(self.photos), time.perf_counter() - started))
        answered = {tensor.name: answers[tensor.name] for tensor in call.outputs}
        return {**answered, **complete({**computed, **answered})}


@dataclass
class PerfInputs:
    """What ``write_all`` wrote (model -> file), what it could not (model -> why), and the BLS callees it ran
    for a step after a BLS step (how long each took)."""

    written: dict[str, Path]
    unfed: dict[str, str]
    callee_runs: list[CalleeRun] = field(default_factory=list)


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


def _ensembles_first(models: dict[str, Model]) -> list[Model]:
    """The ensembles, the pipeline's first: where a step's feed is looked for."""
    ensembles = [model for model in models.values() if model.is_ensemble]
    return sorted(ensembles, key=lambda model: (model.name != contract.ENSEMBLE, model.name))


def _feed_from_ensembles(tensors: Tensors, model: Model) -> tuple[dict[str, np.ndarray] | None, list[str]]:
    """The model's inputs as an ensemble hands them (the first ensemble that can), or the reasons none can."""
    reasons = []
    for ensemble in _ensembles_first(tensors.models):
        for step in ensemble.parsed_config.ensemble_scheduling.step:
            if step.model_name != model.name:
                continue
            try:
                return {
                    key: tensors.value(tensors.source(ensemble, value)) for key, value in step.input_map.items()
                }, []
            except Unfed as exc:
                reasons.append(f"in {ensemble.name}: {exc}")
    return None, reasons


def _feed_by_bls(tensors: Tensors, callee: Model) -> tuple[dict[str, np.ndarray] | None, list[str]]:
    """A BLS callee's inputs as a caller sends them: the caller's own input where it forwards it, else what
    its code computes (its runner's tensor of that name)."""
    reasons = []
    for caller in tensors.models.values():
        try:
            settings = caller.settings() if caller.parsed_config.backend == "python" else None
        except Exception:
            continue
        for call in getattr(settings, "BLS_CALLS", ()):
            if call.callee(settings) != callee.name:
                continue
            fed, why = _feed_from_ensembles(tensors, caller)
            if fed is None:
                reasons += [f"its BLS caller {caller.name} is not fed: {'; '.join(why) or 'no ensemble runs it'}"]
                continue
            try:
                computed = tensors.runner(caller.name)(fed) if not all(t.forwarded for t in call.inputs) else {}
                return sent_by_call(call, fed, computed), []
            except Unfed as exc:
                reasons.append(f"as {caller.name} calls it by BLS: {exc}")
    return None, reasons


def model_feeds(tensors: Tensors) -> tuple[dict[str, tuple[Model, Arrays]], dict[str, str]]:
    """Every model's inputs, one row per photo, as the pipeline would hand them; and the models that cannot
    be fed here, each with why and what to do."""
    feeds, unfed = {}, {}
    for name, model in tensors.models.items():
        if not model.inputs:
            unfed[name] = "it takes no inputs (perf_analyzer needs no input data for it)"
            continue
        if model.is_ensemble:
            other = sorted(set(model.inputs) - {PHOTOS_INPUT})
            if other:
                unfed[name] = f"its inputs {other}: only '{PHOTOS_INPUT}' (the photos) is known here"
            else:
                feeds[name] = (model, {PHOTOS_INPUT: tensors.value((PHOTOS_INPUT,))})
            continue
        fed, reasons = _feed_from_ensembles(tensors, model)
        if fed is None:
            fed, bls_reasons = _feed_by_bls(tensors, model)
            reasons += bls_reasons
        if fed is None:
            why = "; ".join(reasons) or "no ensemble feeds it and it is no BLS call's callee"
            unfed[name] = f"{why}: {WRITE_IT_YOURSELF}"
        else:
            feeds[name] = (model, fed)
    return feeds, unfed


def write_all(repository: Path, photos: Sequence[bytes], output_dir: Path) -> PerfInputs:
    """One ``<model>.json`` per model that can be fed (one entry per photo); the others, with why."""
    tensors = Tensors(load_models(repository), photos)
    feeds, unfed = model_feeds(tensors)
    output_dir.mkdir(parents=True, exist_ok=True)
    written = {}
    for name, (model, inputs) in feeds.items():
        types = model.inputs
        entries = [
            {
                input_name: {
                    "content": tensor_content(rows[index], types[input_name]),
                    "shape": list(rows[index].shape),
                }
                for input_name, rows in inputs.items()
            }
            for index in range(len(photos))
        ]
        path = output_dir / f"{name}.json"
        path.write_text(json.dumps({"data": entries}))
        written[name] = path
    return PerfInputs(written, unfed, tensors.callee_runs)


def write_input_data(repository: Path, photos: Sequence[bytes], output_dir: Path) -> dict[str, Path]:
    """One ``<model>.json`` per model that can be fed; returns model -> file (``write_all`` says the rest)."""
    return write_all(repository, photos, output_dir).written


def read_photos(folder: Path) -> list[bytes]:
    files = sorted(path for path in folder.iterdir() if path.suffix.lower() in PHOTO_SUFFIXES)
    if not files:
        raise SystemExit(f"no photos ({', '.join(sorted(PHOTO_SUFFIXES))}) in {folder}")
    return [path.read_bytes() for path in files]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "photos",
        type=Path,
        nargs="?",
        default=PROJECT_ROOT / "tests" / "photos",
        help="a folder of photos (default: %(default)s)",
    )
    parser.add_argument(
        "--repository",
        type=Path,
        default=PROJECT_ROOT / "model_repository",
        help="a built model repository: its configs and model files (default: %(default)s)",
    )
    parser.add_argument("--output-dir", type=Path, default=DEFAULT_OUTPUT, help="default: %(default)s")
    args = parser.parse_args(argv)
    result = write_all(args.repository, read_photos(args.photos), args.output_dir)
    for model, path in result.written.items():
        print(f"{model}: {path}")
    for model, why in result.unfed.items():
        print(f"{model}: not written: {why}")
    for run in result.callee_runs:
        print(run.text())


if __name__ == "__main__":
    main()
