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
import json
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pipeline_src import PROJECT_ROOT, contract
from pipeline_src.profiling.step_runners import (
    COMPLETIONS,
    PHOTOS_INPUT,
    Arrays,
    Model,
    Runner,
    Unfed,
    load_models,
    make_runner,
    sent_by_call,
)
from pipeline_src.steps.batching import NUMPY_TYPES, bytes_rows

PHOTO_SUFFIXES = {".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif"}
DEFAULT_OUTPUT = PROJECT_ROOT / "build" / "perf_input"
WRITE_IT_YOURSELF = (
    "to profile it anyway, write its input file yourself (the format: pipeline_src/profiling/perf_input.py; "
    "docs/profiling.md, 'A step this cannot feed')"
)
STRING_TYPE = "TYPE_STRING"


def tensor_entry(row: np.ndarray, data_type: str) -> dict:
    """One request's tensor (a row, without the batch dimension) in perf_analyzer's encoding, with its shape."""
    if data_type == STRING_TYPE:
        elements = [value if isinstance(value, bytes) else str(value).encode("utf-8") for value in row.flat]
        raw = b"".join(struct.pack("<I", len(value)) + value for value in elements)
    else:
        dtype = np.dtype(NUMPY_TYPES[data_type]).newbyteorder("<")
        raw = np.ascontiguousarray(row, dtype=dtype).tobytes()
    return {"content": {"b64": base64.b64encode(raw).decode("ascii")}, "shape": list(row.shape)}


@dataclass(frozen=True)
class CalleeRun:
    """A BLS callee run here for its caller's answers (the captioner for caption_with_label's CAPTION)."""

    callee: str
    caller: str
    photos: int
    seconds: float


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
            self.runners[name] = make_runner(self.models, name)
        found = self.runners[name]
        if isinstance(found, str):
            raise Unfed(found)
        return found

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


def _feed_from_ensembles(tensors: Tensors, model: Model) -> tuple[dict[str, np.ndarray] | None, list[str]]:
    """The model's inputs as an ensemble hands them (the first ensemble that can, the pipeline's first), or the
    reasons none can."""
    reasons = []
    ensembles = [other for other in tensors.models.values() if other.is_ensemble]
    for ensemble in sorted(ensembles, key=lambda other: (other.name != contract.ENSEMBLE, other.name)):
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
        entries = [
            {input_name: tensor_entry(rows[index], model.inputs[input_name]) for input_name, rows in inputs.items()}
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
        print(f"ran {run.callee} here for {run.caller}'s answers to {run.photos} photos: {run.seconds:.1f} s")


if __name__ == "__main__":
    main()
