"""A step added as docs/EXTENDING.md says passes every check the suite holds the repository and its docs to, with
no edit of a test or a page.

Each case copies model_repository/ (configs and code, not the built model files) and docs/ into a tmp folder,
adds one step to the copy with the project's own command, ``food11-new-step NAME ... --self-contained
--repository COPY --tests-dir TMP`` (which writes the step's settings' rows into the docs/configuration.md beside
the copy), wires it into the copy's food11_pipeline as EXTENDING tells a user, and runs every check of
tests/repository_checks.py on the copy: the checks the suite's tests run on this tree (SUITE_CHECKS). Nothing is
written into this tree (checked). The last test breaks each copy on purpose, to show that the checks see the
added step rather than pass over it.

The kinds: an image step (EXTENDING's walkthrough: it reads preprocess's ``captioner_pixels``), a text step after
the caption ("A text step after the caption": caption_with_label maps ``CAPTION_AFTER_PROMPT`` and the step reads
it), and a step that is a model file (``food11-new-step NAME --onnx FILE``: a tiny ONNX graph of the preprocessed
classifier pixels, one score a photo, reading preprocess's ``classifier_pixels``)."""

from __future__ import annotations

import contextlib
import io
import shutil
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from google.protobuf import text_format
from repository_checks import (
    SUITE_CHECKS,
    configuration_table,
    ensemble_outputs,
    ensemble_steps,
    ensemble_wiring_problems,
    models_run_for,
    settings_problems,
)
from tritonclient.grpc import model_config_pb2

from pipeline_src import PROJECT_ROOT
from pipeline_src.contract import ENSEMBLE
from pipeline_src.repository.loading import parse_config
from pipeline_src.repository.scaffold import main as new_step

KEPT_SUFFIXES = (".pbtxt", ".py")  # what the checks read: configs and code, not the built model files


@dataclass(frozen=True)
class AddedStep:
    """A step of one kind as a user adds it: ``food11-new-step``'s arguments (``{onnx_file}``: a small ONNX
    model made for the case), the ensemble tensor each of its inputs reads (in its config's order), and the outputs
    of shipped steps that the wiring maps to new ensemble tensors (by step: output -> tensor)."""

    name: str
    arguments: tuple[str, ...]
    reads: tuple[str, ...]
    maps: Mapping[str, Mapping[str, str]] = field(default_factory=dict)


ADDED_STEPS = {
    "image": AddedStep(
        "added_image_quality",
        ("--input", "PIXELS:UINT8:3,384,384", "--output", "BRIGHTNESS:FP32:1", "--output", "SHARPNESS:FP32:1"),
        reads=("captioner_pixels",),
    ),
    "text": AddedStep(
        "added_caption_tags",
        ("--input", "WORDS:BYTES:1", "--output", "TAGS:BYTES:1", "--output", "WORD_COUNT:INT32:1"),
        reads=("caption_after_prompt",),
        maps={"caption_with_label": {"CAPTION_AFTER_PROMPT": "caption_after_prompt"}},
    ),
    # A step that is a model file (``tiny_onnx_model``): its tensors come from the graph, FP32 [3, 224, 224] in
    # (what preprocess makes for the classifier), one score a photo out.
    "onnx": AddedStep("added_onnx_scores", ("--onnx", "{onnx_file}"), reads=("classifier_pixels",)),
}


def tiny_onnx_model(path: Path) -> Path:
    """An ONNX model of the classifier's pixels, FP32 [n, 3, 224, 224], to one score a photo, FP32 [n, 1] (their
    mean): the model-file step's."""
    import onnx  # only the ONNX case needs it
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [
            helper.make_node("ReduceMean", ["PIXELS"], ["mean"], axes=[1, 2, 3], keepdims=1),
            helper.make_node("Flatten", ["mean"], ["SCORE"], axis=1),
        ],
        "added_scores",
        [helper.make_tensor_value_info("PIXELS", TensorProto.FLOAT, ["n", 3, 224, 224])],
        [helper.make_tensor_value_info("SCORE", TensorProto.FLOAT, ["n", 1])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def configs_and_code(directory: str, names: list[str]) -> list[str]:
    """shutil.copytree's ignore: every file but configs and code (built model files can be large), and caches."""
    return [
        name
        for name in names
        if name == "__pycache__" or ((Path(directory) / name).is_file() and not name.endswith(KEPT_SUFFIXES))
    ]


def copy_of_the_tree(work: Path) -> tuple[Path, Path]:
    """model_repository/ and docs/ copied side by side into ``work``, as in this tree."""
    repository = shutil.copytree(
        PROJECT_ROOT / "model_repository", work / "model_repository", symlinks=True, ignore=configs_and_code
    )
    return repository, shutil.copytree(PROJECT_ROOT / "docs", work / "docs")


def scaffold(step: AddedStep, repository: Path, tests_dir: Path, onnx_file: Path | None) -> None:
    """``food11-new-step`` as a user runs it, into the copy: the logic module in the model's folder, the
    generated unit test into ``tests_dir``; its "Next:" text is not needed here."""
    arguments = [argument.format(onnx_file=onnx_file) for argument in step.arguments]
    where = ["--self-contained", "--repository", str(repository), "--tests-dir", str(tests_dir)]
    with contextlib.redirect_stdout(io.StringIO()):
        new_step([step.name, *arguments, *where])


def wire_into_the_pipeline(repository: Path, step: AddedStep) -> None:
    """As docs/EXTENDING.md wires a step into food11_pipeline: the shipped steps map the tensors the step needs
    (``step.maps``), the step goes into ``ensemble_scheduling`` reading them, and each of its outputs becomes an
    ensemble output of its name, declared in the ``output`` list with its type."""
    path = repository / ENSEMBLE / "config.pbtxt"
    ensemble, added = parse_config(path), parse_config(repository / step.name / "config.pbtxt")
    for shipped in ensemble.ensemble_scheduling.step:
        shipped.output_map.update(step.maps.get(shipped.model_name, {}))
    wired = ensemble.ensemble_scheduling.step.add(model_name=step.name, model_version=-1)
    wired.input_map.update(zip([tensor.name for tensor in added.input], step.reads))
    for output in added.output:
        wired.output_map[output.name] = output.name
        ensemble.output.add(name=output.name, data_type=output.data_type, dims=output.dims)
    path.write_text(text_format.MessageToString(ensemble))


def forget_modules_from(folder: Path) -> None:
    """Drop the modules imported from ``folder`` (the step's self-contained logic module), so that another case
    or test imports its own."""
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if file and Path(file).is_relative_to(folder):
            del sys.modules[name]


@dataclass(frozen=True)
class Extended:
    step: AddedStep
    repository: Path
    docs: Path
    work: Path


@pytest.fixture(scope="module", params=list(ADDED_STEPS))
def extended(request, tmp_path_factory) -> Iterator[Extended]:
    """A copy of the tree with one step of the parameter's kind added and wired into food11_pipeline."""
    step = ADDED_STEPS[request.param]
    work = tmp_path_factory.mktemp(f"added_{request.param}")
    repository, docs = copy_of_the_tree(work)
    onnx_file = tiny_onnx_model(work / "scores.onnx") if any("{onnx_file}" in a for a in step.arguments) else None
    scaffold(step, repository, work / "tests", onnx_file)
    wire_into_the_pipeline(repository, step)
    yield Extended(step, repository, docs, work)
    forget_modules_from(work)


def test_the_step_is_added_to_the_copy_and_wired_into_its_pipeline_and_this_tree_is_left_alone(extended):
    """The copy really has the step, so the checks below see it: in food11_pipeline's steps, its outputs among
    the ensemble's, run by a call naming them, and its settings' rows in the copy's table. This tree has none
    of it."""
    name, repository = extended.step.name, extended.repository
    outputs = [output.name for output in parse_config(repository / name / "config.pbtxt").output]
    assert name in [step.model for step in ensemble_steps(repository, ENSEMBLE)]
    assert set(outputs) <= set(ensemble_outputs(repository, ENSEMBLE))
    assert name in models_run_for(repository, ENSEMBLE, outputs)
    assert any(step == name for step, _ in configuration_table((extended.docs / "configuration.md").read_text()))
    assert not (PROJECT_ROOT / "model_repository" / name).exists()
    assert name not in (PROJECT_ROOT / "docs" / "configuration.md").read_text()
    assert not (PROJECT_ROOT / "tests" / "unit" / f"test_step_{name}.py").exists()


@pytest.mark.parametrize("check", list(SUITE_CHECKS))
def test_the_suites_check_passes_on_the_copy_with_no_other_edit(extended, check):
    assert SUITE_CHECKS[check](extended.repository, extended.docs) == []


def test_the_checks_still_hold_the_added_step(extended, tmp_path):
    """The checks look at the added step: its settings' rows removed from the table, or its input fed a tensor of
    another type, and they name it."""
    name, repository = extended.step.name, extended.repository
    docs = shutil.copytree(extended.docs, tmp_path / "docs")
    table = docs / "configuration.md"
    table.write_text("".join(line for line in table.read_text().splitlines(True) if not line.startswith(f"| {name} ")))
    assert any(f"no row for {name}'s" in problem for problem in settings_problems(repository, docs))

    broken = shutil.copytree(repository, tmp_path / "model_repository", symlinks=True)
    config = broken / ENSEMBLE / "config.pbtxt"
    ensemble = parse_config(config)
    wired = next(step for step in ensemble.ensemble_scheduling.step if step.model_name == name)
    first_input = parse_config(broken / name / "config.pbtxt").input[0]
    # logits is FP32 [11], IMAGE BYTES [1]: one of them is not what the step's first input declares.
    other = (
        "IMAGE" if (first_input.data_type, list(first_input.dims)) == (model_config_pb2.TYPE_FP32, [11]) else "logits"
    )
    wired.input_map[first_input.name] = other
    config.write_text(text_format.MessageToString(ensemble))
    assert any(f"{name}.{first_input.name}" in problem for problem in ensemble_wiring_problems(broken, ENSEMBLE))
