"""food11-validate: the built repository is valid; each kind of fault, made in a copy, is reported by
name (model, step, tensor) without a server."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from pipeline_src import PROJECT_ROOT
from pipeline_src.repository.loading import parse_config
from pipeline_src.repository.validate import Report, Severity, validate_repository

# What these tests take from the repository they break, they read from it (its models, each ensemble's steps
# and their numbers), so a step added and wired into an ensemble breaks none of them. The faults they make
# edit lines of the pipeline's own steps (preprocess, classifier, caption_with_label, captioner): a change to
# one of those lines fails the edit that expects it, saying which text it did not find.


@pytest.fixture
def repo(model_repository, tmp_path) -> Path:
    """A copy of the session's built repository, for a test to break (the fixture itself stays intact)."""
    return shutil.copytree(model_repository, tmp_path / "model_repository")


def edit(path: Path, old: str, new: str) -> None:
    """Replace ``old``, which must occur exactly once, so a fixture change cannot silently void the fault."""
    text = path.read_text()
    assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times in {path}"
    path.write_text(text.replace(old, new))


def problem(report: Report, model: str, *fragments: str, severity: Severity = Severity.ERROR) -> str:
    """The one-line problem about ``model`` whose message holds every fragment; fails with the report."""
    for found in report.problems:
        if found.severity is severity and found.model == model and all(f in found.message for f in fragments):
            return str(found)
    raise AssertionError(f"no {severity.value} about {model} with {fragments}; the report:\n{report.text()}")


def config(repo: Path, model: str) -> Path:
    return repo / model / "config.pbtxt"


def models_of(repo: Path) -> list[str]:
    """The repository's model folders: what the validator reports on."""
    return sorted(path.parent.name for path in repo.glob("*/config.pbtxt"))


def step(repo: Path, ensemble: str, model: str, named: str | None = None) -> str:
    """How the validator names ``model``'s step in ``ensemble``: ``step N (model)``, numbered as the config
    lists the steps (``named``: the model name the step has after a test's edit)."""
    steps = [entry.model_name for entry in parse_config(config(repo, ensemble)).ensemble_scheduling.step]
    return f"step {steps.index(model) + 1} ({named or model})"


def ensembles_using(repo: Path, model: str) -> list[str]:
    ensembles = [name for name in models_of(repo) if parse_config(config(repo, name)).platform == "ensemble"]
    return [
        name
        for name in ensembles
        if model in (entry.model_name for entry in parse_config(config(repo, name)).ensemble_scheduling.step)
    ]


# --- the valid repository -------------------------------------------------------------------------------


def test_the_built_repository_is_valid_without_a_single_problem(model_repository):
    report = validate_repository(model_repository)
    assert report.problems == [], report.text()
    assert report.ok
    assert sorted(report.models) == models_of(model_repository)
    assert report.summary().startswith(f"OK: {len(models_of(model_repository))} model(s)")


def test_validation_needs_neither_torch_nor_transformers(model_repository):
    check = (
        "import sys; from pipeline_src.repository.validate import validate_repository; "
        f"assert validate_repository({str(model_repository)!r}).ok; "
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_missing_built_model_files_are_errors_that_say_to_run_make_models(repo):
    (repo / "classifier" / "1" / "model.onnx").unlink()
    shutil.rmtree(repo / "captioner" / "1" / "blip")
    report = validate_repository(repo)
    assert "make models" in problem(report, "classifier", "parameter onnx_file='model.onnx'", "is missing")
    assert "make models" in problem(report, "captioner", "parameter model_dir='blip'", "is missing")


def test_a_snapshot_or_graphs_folder_missing_a_file_is_an_error(repo):
    """A build from before the graphs' per-layer caches has no tokenizer.json: `make models` redoes it."""
    (repo / "captioner" / "1" / "blip" / "config.json").unlink()
    (repo / "captioner" / "1" / "text_decoder" / "decoder_step.onnx").unlink()
    (repo / "captioner" / "1" / "text_decoder" / "tokenizer.json").unlink()
    report = validate_repository(repo)
    problem(report, "captioner", "model_dir='blip'", "has no config.json")
    problem(report, "captioner", "graphs_dir='text_decoder'", "has no decoder_step.onnx")
    problem(report, "captioner", "graphs_dir='text_decoder'", "has no tokenizer.json", "make models")


# --- configs, folders, backend files ---------------------------------------------------------------------


def test_a_config_that_does_not_parse_is_reported_with_file_and_line(repo):
    edit(config(repo, "preprocess"), "max_batch_size: 32", "max_batch_size: 32\nmax_batch_sise: 4")
    message = problem(validate_repository(repo), "preprocess", "does not parse as Triton's ModelConfig")
    assert str(config(repo, "preprocess")) in message and "line 5" in message and "max_batch_sise" in message


def test_a_config_named_differently_from_its_folder_is_an_error(repo):
    edit(config(repo, "classifier"), 'name: "classifier"', 'name: "clasifier"')
    problem(validate_repository(repo), "classifier", "names the model 'clasifier'", "its folder is 'classifier'")


def test_a_model_without_a_version_folder_is_an_error(repo):
    shutil.rmtree(repo / "food11_pipeline" / "1")
    problem(validate_repository(repo), "food11_pipeline", "no version folder")


def test_a_python_step_without_model_py_is_an_error(repo):
    (repo / "preprocess" / "1" / "model.py").unlink()
    problem(validate_repository(repo), "preprocess", "model.py is missing")


def test_default_model_filename_is_where_the_python_backend_looks(repo):
    (repo / "preprocess" / "1" / "model.py").rename(repo / "preprocess" / "1" / "step.py")
    assert not validate_repository(repo).ok
    edit(config(repo, "preprocess"), 'backend: "python"', 'backend: "python"\ndefault_model_filename: "step.py"')
    assert validate_repository(repo).problems == []


# --- typed settings ----------------------------------------------------------------------------------------


def test_a_bad_parameter_value_is_refused_by_the_steps_settings(repo):
    edit(config(repo, "preprocess"), 'string_value: "40000000"', 'string_value: "lots"')
    problem(validate_repository(repo), "preprocess", "PreprocessSettings", "max_pixels='lots'")


def test_an_unknown_parameter_is_refused(repo):
    edit(config(repo, "caption_with_label"), 'key: "caption_timeout_ms"', 'key: "caption_timeout"')
    problem(validate_repository(repo), "caption_with_label", "unknown parameter", "caption_timeout")


def test_a_settings_parameter_naming_no_class_is_an_error(repo):
    edit(config(repo, "classifier"), "settings:ClassifierSettings", "settings:ClassifierSetings")
    problem(validate_repository(repo), "classifier", "ClassifierSetings", "names no importable class")


def test_a_step_without_a_settings_parameter_is_only_a_warning(repo):
    edit(config(repo, "preprocess"), 'key: "settings"', 'key: "note"')
    report = validate_repository(repo)
    problem(report, "preprocess", "no 'settings' parameter", "unchecked", severity=Severity.WARNING)
    assert report.ok and report.errors == []


def test_the_tensor_names_a_steps_code_declares_must_be_its_configs(repo):
    """top_labels' module declares OUTPUTS (food11-new-step's steps declare INPUTS and OUTPUTS)."""
    edit(config(repo, "top_labels"), '{ name: "TOP_LABELS",', '{ name: "BEST_LABELS",')
    problem(
        validate_repository(repo),
        "top_labels",
        "pipeline_src.steps.top_labels.OUTPUTS declares 'TOP_LABELS', which the config does not",
        "and lacks the config's 'BEST_LABELS'",
        "must be the same names",
    )


# --- ensemble graphs ---------------------------------------------------------------------------------------

ENSEMBLE = "food11_pipeline"


def test_a_consumed_tensor_nobody_produces_is_named_with_its_step(repo):
    edit(config(repo, ENSEMBLE), 'key: "input", value: "classifier_pixels"', 'key: "input", value: "classifier_pixelz"')
    report = validate_repository(repo)
    assert (
        f"ERROR food11_pipeline: {step(repo, ENSEMBLE, 'classifier')} consumes tensor 'classifier_pixelz', which "
        "no step produces and is not an ensemble input"
    ) in report.text().splitlines()
    problem(report, ENSEMBLE, f"tensor 'classifier_pixels' from {step(repo, ENSEMBLE, 'preprocess')} is used by no")
    assert not report.ok


def test_a_step_naming_a_model_not_in_the_repository_is_an_error(repo):
    label = step(repo, ENSEMBLE, "classifier", named="classifierz")
    edit(config(repo, ENSEMBLE), 'model_name: "classifier"', 'model_name: "classifierz"')
    problem(validate_repository(repo), ENSEMBLE, label, "model 'classifierz' is not in the repository")


def test_input_map_keys_must_be_the_models_inputs_and_feed_all_of_them(repo):
    edit(config(repo, ENSEMBLE), 'key: "input", value', 'key: "pixels", value')
    report = validate_repository(repo)
    label = step(repo, ENSEMBLE, "classifier")
    problem(report, ENSEMBLE, label, "input_map key 'pixels' is not an input of model 'classifier'")
    problem(report, ENSEMBLE, label, "input 'input' of model 'classifier' is not fed")


def test_an_output_map_key_must_be_an_output_of_the_model(repo):
    edit(config(repo, ENSEMBLE), 'key: "output", value: "logits"', 'key: "logits", value: "logits"')
    problem(
        validate_repository(repo),
        ENSEMBLE,
        step(repo, ENSEMBLE, "classifier"),
        "output_map key 'logits' is not an output of model 'classifier'",
    )


def test_a_tensor_produced_twice_and_an_ensemble_output_produced_by_nobody(repo):
    edit(config(repo, ENSEMBLE), 'value: "CAPTION_STATUS"', 'value: "CAPTION"')
    report = validate_repository(repo)
    problem(report, ENSEMBLE, "tensor 'CAPTION' is produced more than once", step(repo, ENSEMBLE, "caption_with_label"))
    problem(report, ENSEMBLE, "ensemble output 'CAPTION_STATUS' is produced by no step")


def test_an_unused_produced_tensor_is_an_error_as_triton_refuses_it(repo):
    edit(
        config(repo, ENSEMBLE),
        'output_map { key: "CAPTION_STATUS", value: "CAPTION_STATUS" }',
        'output_map { key: "CAPTION_STATUS", value: "CAPTION_STATUS" }\n'
        '      output_map { key: "PROMPT", value: "prompt" }',
    )
    captioning = step(repo, ENSEMBLE, "caption_with_label")
    problem(validate_repository(repo), ENSEMBLE, f"tensor 'prompt' from {captioning} is used by no step")


def test_steps_that_feed_each_other_form_a_cycle(repo):
    edit(
        config(repo, ENSEMBLE),
        'input_map { key: "IMAGE", value: "IMAGE" }',
        'input_map { key: "IMAGE", value: "logits" }',
    )
    report = validate_repository(repo)
    preprocess, classifier = step(repo, ENSEMBLE, "preprocess"), step(repo, ENSEMBLE, "classifier")
    cycle = f"{preprocess} needs {classifier} needs {preprocess.split(' (')[0]}"
    problem(report, ENSEMBLE, "steps form a cycle", cycle)
    problem(report, ENSEMBLE, "ensemble input 'IMAGE'", "is used by no step")


def test_data_types_must_agree_across_an_edge(repo):
    edit(
        config(repo, "label"),
        '{ name: "LOGITS", data_type: TYPE_FP32',
        '{ name: "LOGITS", data_type: TYPE_FP16',
    )
    problem(
        validate_repository(repo),
        ENSEMBLE,
        "tensor 'logits'",
        f"{step(repo, ENSEMBLE, 'classifier')} output 'output' is TYPE_FP32",
        f"{step(repo, ENSEMBLE, 'label')} input 'LOGITS' expects TYPE_FP16",
    )


def test_dims_must_agree_across_an_edge(repo):
    edit(
        config(repo, "label"),
        '{ name: "LOGITS", data_type: TYPE_FP32, dims: [ 11 ] }',
        '{ name: "LOGITS", data_type: TYPE_FP32, dims: [ 12 ] }',
    )
    problem(
        validate_repository(repo),
        ENSEMBLE,
        "tensor 'logits'",
        "dims [11]",
        "input 'LOGITS' expects TYPE_FP32 dims [12]",
    )


def test_a_variable_dim_matches_any_size(repo):
    edit(
        config(repo, "label"),
        '{ name: "LOGITS", data_type: TYPE_FP32, dims: [ 11 ] }',
        '{ name: "LOGITS", data_type: TYPE_FP32, dims: [ -1 ] }',
    )
    assert validate_repository(repo).problems == []


def test_a_step_batching_less_than_the_ensemble_is_an_error(repo):
    edit(config(repo, "classifier"), "max_batch_size: 32", "max_batch_size: 16")
    problem(
        validate_repository(repo),
        ENSEMBLE,
        step(repo, ENSEMBLE, "classifier"),
        "max_batch_size 16, smaller than the ensemble's 32",
    )


def test_a_step_without_batching_inside_a_batching_ensemble_is_an_error(repo):
    edit(config(repo, "preprocess"), "max_batch_size: 32", "max_batch_size: 0")
    report = validate_repository(repo)
    label = step(repo, ENSEMBLE, "preprocess")
    problem(report, ENSEMBLE, label, "max_batch_size 0 inside an ensemble that batches", "'IMAGE'")
    # once per ensemble using preprocess, not once more per edge
    assert sorted(p.model for p in report.errors) == ensembles_using(repo, "preprocess"), report.text()


# --- ensembles in ensembles --------------------------------------------------------------------------------


def add_ensemble(repo: Path, name: str, inner: str, image: str = "IMAGE") -> None:
    """An ensemble whose one step is the ensemble ``inner`` (food11_pipeline's interface)."""
    (repo / name / "1").mkdir(parents=True)
    config(repo, name).write_text(f'''
name: "{name}"
platform: "ensemble"
max_batch_size: 32
input [ {{ name: "PHOTO", data_type: TYPE_STRING, dims: [ 1 ] }} ]
output [ {{ name: "LABEL", data_type: TYPE_STRING, dims: [ 1 ] }} ]
ensemble_scheduling {{ step [ {{
  model_name: "{inner}"
  model_version: -1
  input_map {{ key: "{image}", value: "PHOTO" }}
  output_map {{ key: "LABEL", value: "LABEL" }}
}} ] }}
''')


def test_an_ensemble_may_contain_an_ensemble(repo):
    add_ensemble(repo, "labels_only", ENSEMBLE)
    report = validate_repository(repo)
    assert report.problems == [], report.text()


def test_a_fault_in_an_outer_ensemble_names_its_step_and_the_inner_ensemble(repo):
    add_ensemble(repo, "labels_only", ENSEMBLE, image="PHOTO")
    report = validate_repository(repo)
    problem(
        report,
        "labels_only",
        "step 1 (food11_pipeline)",
        "input_map key 'PHOTO' is not an input of model 'food11_pipeline'",
    )
    problem(report, "labels_only", "input 'IMAGE' of model 'food11_pipeline' is not fed")


def test_ensembles_containing_each_other_are_a_cycle(repo):
    add_ensemble(repo, "loop_a", "loop_b", image="PHOTO")
    add_ensemble(repo, "loop_b", "loop_a", image="PHOTO")
    problem(validate_repository(repo), "loop_a", "ensembles contain each other in a cycle: loop_a -> loop_b -> loop_a")


# --- BLS callees -------------------------------------------------------------------------------------------


def test_a_bls_callee_missing_from_the_repository_is_an_error(repo):
    edit(config(repo, "caption_with_label"), 'string_value: "captioner"', 'string_value: "blip_captioner"')
    problem(validate_repository(repo), "caption_with_label", "BLS call to 'blip_captioner'", "not in the repository")


def test_a_bls_callee_without_the_input_sent_is_an_error(repo):
    edit(config(repo, "captioner"), '{ name: "PROMPT",', '{ name: "TEXT",')
    report = validate_repository(repo)
    problem(report, "caption_with_label", "BLS call to 'captioner'", "sends tensor 'PROMPT', which is not an input")
    problem(report, "caption_with_label", "BLS call to 'captioner'", "does not send input 'TEXT'")


def test_a_bls_callee_output_read_must_exist_with_its_type(repo):
    edit(
        config(repo, "captioner"),
        '{ name: "CAPTION", data_type: TYPE_STRING',
        '{ name: "CAPTION", data_type: TYPE_FP32',
    )
    problem(
        validate_repository(repo),
        "caption_with_label",
        "BLS call to 'captioner'",
        "'captioner' output 'CAPTION' is TYPE_FP32",
    )


def test_a_bls_callee_with_other_dims_or_a_smaller_batch_is_an_error(repo):
    edit(config(repo, "captioner"), "dims: [ 577, -1 ]", "dims: [ 197, -1 ]")
    edit(config(repo, "captioner"), "max_batch_size: 32", "max_batch_size: 8")
    report = validate_repository(repo)
    problem(
        report,
        "caption_with_label",
        "tensor 'IMAGE_EMBEDS'",
        "'captioner' input 'IMAGE_EMBEDS' expects TYPE_FP32 dims [197, -1]",
    )
    problem(report, "caption_with_label", "'captioner' has max_batch_size 8, smaller than this step's 32")


def test_a_forwarded_bls_tensor_must_be_the_callers_own_input(repo):
    edit(
        config(repo, "caption_with_label"),
        '{ name: "IMAGE_EMBEDS", data_type: TYPE_FP32, dims: [ 577, -1 ], optional: true }',
        '{ name: "IMAGE_EMBEDS", data_type: TYPE_FP16, dims: [ 577, -1 ], optional: true }',
    )
    problem(
        validate_repository(repo),
        "caption_with_label",
        "BLS call to 'captioner'",
        "this step's input 'IMAGE_EMBEDS' is TYPE_FP16",
    )


def test_an_input_sent_only_when_present_must_be_optional_for_the_callee(repo):
    edit(
        config(repo, "captioner"),
        '{ name: "CAPTIONER_PIXELS", data_type: TYPE_UINT8, dims: [ 3, 384, 384 ], optional: true }',
        '{ name: "CAPTIONER_PIXELS", data_type: TYPE_UINT8, dims: [ 3, 384, 384 ] }',
    )
    problem(
        validate_repository(repo),
        "caption_with_label",
        "BLS call to 'captioner'",
        "sends 'CAPTIONER_PIXELS' only when it has it, but model 'captioner' needs it",
    )


# --- ONNX files --------------------------------------------------------------------------------------------


def test_the_classifiers_onnx_file_must_match_its_config(repo):
    # Both ends of the ensemble edge change together: only the ONNX file disagrees.
    edit(config(repo, "classifier"), "dims: [ 11 ]", "dims: [ 12 ]")
    edit(
        config(repo, "label"),
        '"LOGITS", data_type: TYPE_FP32, dims: [ 11 ]',
        '"LOGITS", data_type: TYPE_FP32, dims: [ 12 ]',
    )
    edit(config(repo, "classifier"), '{ name: "input",', '{ name: "pixels",')
    for ensemble in ensembles_using(repo, "classifier"):
        edit(config(repo, ensemble), 'key: "input", value', 'key: "pixels", value')
    report = validate_repository(repo)
    problem(report, "classifier", "output 'output'", "the ONNX file has shape ['batch', 11], the config [12]")
    problem(report, "classifier", "config input 'pixels' is not an input of ONNX model")
    problem(report, "classifier", "has input 'input', which the config does not declare")
    assert {p.model for p in report.errors} == {"classifier"}, report.text()


def tiny_onnx(path: Path, batch: int | str = "batch", elem_type: int = TensorProto.FLOAT) -> None:
    """A real one-op ONNX model: X [batch, 4] -> Relu -> Y [batch, 4]."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["X"], ["Y"])],
        "tiny",
        [helper.make_tensor_value_info("X", elem_type, [batch, 4])],
        [helper.make_tensor_value_info("Y", elem_type, [batch, 4])],
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(helper.make_model(graph), str(path))


def add_onnx_model(repo: Path, dims: str = "4", extra: str = "") -> Path:
    (repo / "tiny_onnx").mkdir()
    config(repo, "tiny_onnx").write_text(f"""
name: "tiny_onnx"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ {{ name: "X", data_type: TYPE_FP32, dims: [ {dims} ] }} ]
output [ {{ name: "Y", data_type: TYPE_FP32, dims: [ 4 ] }} ]
{extra}
""")
    return repo / "tiny_onnx" / "1"


LOCAL_BACKEND = "config.pbtxt runs on Triton's onnxruntime backend, which the local server"


def test_an_onnxruntime_model_matching_its_file_is_valid_with_a_warning_that_the_local_server_cannot_load_it(repo):
    tiny_onnx(add_onnx_model(repo) / "model.onnx")
    report = validate_repository(repo)
    warning = problem(report, "tiny_onnx", LOCAL_BACKEND, "--onnx FILE", severity=Severity.WARNING)
    assert report.ok and [str(found) for found in report.problems] == [warning]


def test_a_native_variant_under_configs_is_no_warning(repo):
    """The classifier's configs/onnxruntime.pbtxt, which NVIDIA's image selects, is not what the local server reads."""
    report = validate_repository(repo, "onnxruntime")
    assert (repo / "classifier" / "configs" / "onnxruntime.pbtxt").is_file()
    assert report.problems == [], report.text()


def test_an_onnxruntime_model_whose_file_has_other_shapes_or_types(repo):
    version = add_onnx_model(repo, dims="5")
    tiny_onnx(version / "model.onnx")
    problem(validate_repository(repo), "tiny_onnx", "input 'X'", "the ONNX file has shape ['batch', 4], the config [5]")
    tiny_onnx(version / "model.onnx", elem_type=TensorProto.DOUBLE)
    report = validate_repository(repo)
    problem(report, "tiny_onnx", "input 'X'", "element type TYPE_FP64, the config says TYPE_FP32")
    problem(report, "tiny_onnx", "output 'Y'", "element type TYPE_FP64")


def test_an_onnx_file_with_a_fixed_batch_dimension_cannot_batch(repo):
    tiny_onnx(add_onnx_model(repo) / "model.onnx", batch=1)
    problem(
        validate_repository(repo), "tiny_onnx", "input 'X'", "fixes the batch dimension to 1, but max_batch_size is 8"
    )


def test_an_onnxruntime_model_without_its_file_and_default_model_filename(repo):
    version = add_onnx_model(repo, extra='default_model_filename: "tiny.onnx"')
    tiny_onnx(version / "model.onnx")
    problem(validate_repository(repo), "tiny_onnx", "tiny.onnx is missing")
    (version / "model.onnx").rename(version / "tiny.onnx")
    assert validate_repository(repo).errors == []


# --- the command line --------------------------------------------------------------------------------------


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pipeline_src.repository.validate", *args],
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
    )


def test_the_cli_lists_every_problem_and_exits_1_on_errors(repo):
    label = step(repo, ENSEMBLE, "classifier", named="classifierz")
    edit(config(repo, ENSEMBLE), 'model_name: "classifier"', 'model_name: "classifierz"')
    edit(config(repo, "preprocess"), 'string_value: "40000000"', 'string_value: "-1"')
    result = run_cli(str(repo))
    assert result.returncode == 1, result.stdout
    lines = result.stdout.splitlines()
    assert any(line.startswith(f"ERROR food11_pipeline: {label}") for line in lines), result.stdout
    assert any(line.startswith("ERROR preprocess: ") and "max_pixels must be positive" in line for line in lines)
    assert lines[-1].startswith("INVALID: ")


def test_the_cli_exits_0_with_an_ok_summary_and_warnings_alone(repo):
    result = run_cli(str(repo))
    summary = f"OK: {len(models_of(repo))} model(s) in {repo} are consistent, 0 warning(s)"
    assert (result.returncode, result.stdout.splitlines()) == (0, [summary])
    edit(config(repo, "preprocess"), 'key: "settings"', 'key: "note"')
    result = run_cli(str(repo))
    assert result.returncode == 0, result.stdout
    assert result.stdout.splitlines()[0].startswith("WARNING preprocess: "), result.stdout


def test_a_model_file_its_manifest_does_not_describe_is_an_error(repo):
    """The identity every answer carries is read from the manifests: a file replaced after the build would
    make answers lie about which weights made them."""
    with open(repo / "classifier" / "1" / "model.onnx", "ab") as onnx_file:
        onnx_file.write(b"\0")
    (repo / "captioner" / "1" / "text_decoder" / "decoder.json").unlink()
    report = validate_repository(repo)
    problem(report, "classifier", "version 1:", "model.onnx is not the file manifest.json describes")
    problem(report, "captioner", "version 1:", "manifest.json lists text_decoder/decoder.json, which is missing")


# --- the wire contract -------------------------------------------------------------------------------------


def test_the_ensemble_keeps_the_wire_contracts_outputs(repo):
    # An output removed (the step still produces it) and one retyped: both break every caller.
    edit(config(repo, ENSEMBLE), '{ name: "CAPTION_STATUS", data_type: TYPE_STRING, dims: [ 1 ] },', "")
    edit(config(repo, ENSEMBLE), '"PROBABILITY", data_type: TYPE_FP32', '"PROBABILITY", data_type: TYPE_FP64')
    report = validate_repository(repo)
    problem(report, ENSEMBLE, "declares no CAPTION_STATUS", "wire contract", "pipeline_src/contract.py")
    problem(report, ENSEMBLE, "PROBABILITY is TYPE_FP64 [1], the wire contract's is TYPE_FP32 [1]")


def test_the_classify_ensemble_keeps_the_label_outputs_of_the_wire_contract(repo):
    classify = "food11_classify"  # what client.classify reads
    edit(config(repo, classify), '"PROBABILITY", data_type: TYPE_FP32', '"PROBABILITY", data_type: TYPE_FP64')
    report = validate_repository(repo)
    problem(report, classify, "PROBABILITY is TYPE_FP64 [1], the wire contract's is TYPE_FP32 [1]")
