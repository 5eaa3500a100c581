"""food11-new-step: a scaffolded step is valid, passes `make lint` and its own unit test as written, and it loads
and answers in the real server, with one input and output or several, of any shapes and types, text (BYTES)
included. Everything is scaffolded
into temporary folders (or the session's repository copy), never the source tree.

A self-contained step keeps its logic module in its model folder: the Python backend's stub appends the model's
folder to sys.path before importing 1/model.py (python_backend r24.10, src/pb_stub.cc), and ignores PYTHONPATH.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2
from tritonclient.utils import InferenceServerException

from pipeline_src import PROJECT_ROOT
from pipeline_src.repository.scaffold import (
    DEFAULT_TESTS_DIR,
    Layout,
    ScaffoldError,
    StepSpec,
    Tensor,
    create_step,
    main,
    next_steps,
    plan_files,
    plan_onnx_files,
    read_spec,
)
from pipeline_src.repository.validate import validate_repository


def unique(prefix: str) -> str:
    """A fresh step name: tests can run twice in one session, and imported modules never collide."""
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


@pytest.fixture
def forget_new_modules(tmp_path):
    """Drop the modules a test imported from its temporary folders (and only those)."""
    yield
    for name, module in list(sys.modules.items()):
        if Path(getattr(module, "__file__", None) or "/").is_relative_to(tmp_path):
            del sys.modules[name]


@pytest.fixture
def package_layout(tmp_path) -> Layout:
    """An empty repository, tests folder and importable package of its own, all under tmp_path."""
    package = unique("scaffolded_steps")
    (tmp_path / "src" / package).mkdir(parents=True)
    (tmp_path / "src" / package / "__init__.py").touch()
    (tmp_path / "repository").mkdir()
    return Layout(tmp_path / "repository", tmp_path / "tests", tmp_path / "src" / package, package)


def run_generated_tests(tests_dir: Path, pythonpath: Path) -> subprocess.CompletedProcess:
    """pytest on the generated tests, in a fresh process outside this project (no conftest, no cache)."""
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tests_dir)],
        cwd=tests_dir.parent,
        env={**os.environ, "PYTHONPATH": str(pythonpath)},
        capture_output=True,
        text=True,
        timeout=300,
    )


# --- what it creates ------------------------------------------------------------------------------------


def test_by_default_the_step_goes_to_the_repository_pipeline_src_steps_and_tests():
    layout = Layout(PROJECT_ROOT / "model_repository", DEFAULT_TESTS_DIR, PROJECT_ROOT / "pipeline_src" / "steps")
    files = plan_files(StepSpec("crop_scores"), layout)  # planned only: nothing is written
    assert sorted(path.relative_to(PROJECT_ROOT).as_posix() for path in files) == [
        "model_repository/crop_scores/1/model.py",
        "model_repository/crop_scores/config.pbtxt",
        "pipeline_src/steps/crop_scores.py",
        "tests/unit/test_step_crop_scores.py",
    ]
    config = text_format.Parse(
        files[PROJECT_ROOT / "model_repository/crop_scores/config.pbtxt"], model_config_pb2.ModelConfig()
    )
    assert config.name == "crop_scores" and config.backend == "python" and config.max_batch_size == 32
    assert config.parameters["settings"].string_value == "pipeline_src.steps.crop_scores:CropScoresSettings"
    assert config.parameters["scale"].string_value == "2.0"
    model_py = files[PROJECT_ROOT / "model_repository/crop_scores/1/model.py"]
    assert "from pipeline_src.steps.crop_scores import INPUTS, CropScoresSettings, compute, find_problem" in model_py
    assert "from pipeline_src.steps.triton_step import StepContext, answer_stacked" in model_py


def test_tensor_names_types_and_dims_are_declared_as_asked(package_layout):
    spec = StepSpec(
        "rescale",
        inputs=(Tensor("SCORES", "INT16", (3, -1)), Tensor("WEIGHTS", "FP64", (5,))),
        outputs=(Tensor("RESCALED", "UINT8", (1,)), Tensor("SUMMARY", "FP16", (2, 2, 2))),
        max_batch_size=8,
        instances=2,
    )
    files = plan_files(spec, package_layout)
    config = text_format.Parse(
        files[package_layout.repository / "rescale" / "config.pbtxt"], model_config_pb2.ModelConfig()
    )
    declared = [(t.name, model_config_pb2.DataType.Name(t.data_type), list(t.dims)) for t in config.input]
    assert declared == [("SCORES", "TYPE_INT16", [3, -1]), ("WEIGHTS", "TYPE_FP64", [5])]
    declared = [(t.name, model_config_pb2.DataType.Name(t.data_type), list(t.dims)) for t in config.output]
    assert declared == [("RESCALED", "TYPE_UINT8", [1]), ("SUMMARY", "TYPE_FP16", [2, 2, 2])]
    assert config.max_batch_size == 8
    logic = files[package_layout.source_dir / "rescale.py"]
    assert '"SCORES": np.dtype(np.int16),  # TYPE_INT16 [3, -1]' in logic
    assert '"SUMMARY": (np.dtype(np.float16), (2, 2, 2)),  # TYPE_FP16 [2, 2, 2]' in logic
    cpu = model_config_pb2.ModelInstanceGroup.KIND_CPU
    assert [(group.count, group.kind) for group in config.instance_group] == [(2, cpu)]


@pytest.mark.parametrize("spelled", ["TEXT:BYTES:1", "TEXT:bytes:1", "TEXT:STRING:1", "TEXT:TYPE_STRING:1"])
def test_a_text_tensor_is_bytes_and_its_config_says_type_string(package_layout, spelled):
    text = Tensor.parse(spelled)
    assert text == Tensor("TEXT", "BYTES", (1,)) and text.config_type == "TYPE_STRING"
    files = plan_files(TEXT_STEP, package_layout)
    config = text_format.Parse(
        files[package_layout.repository / TEXT_STEP.name / "config.pbtxt"], model_config_pb2.ModelConfig()
    )
    declared = [(t.name, model_config_pb2.DataType.Name(t.data_type)) for t in (*config.input, *config.output)]
    assert declared == [("TEXT", "TYPE_STRING"), ("SUMMARY", "TYPE_STRING"), ("LENGTH", "TYPE_FP32")]
    logic = files[package_layout.source_dir / f"{TEXT_STEP.name}.py"]
    assert '"TEXT": BYTES,  # TYPE_STRING [1]' in logic and '"SUMMARY": (BYTES, (1,)),  # TYPE_STRING [1]' in logic
    assert 'decode each with ``.decode("utf-8")``' in logic  # how text arrives and leaves, said where it is used


@pytest.mark.parametrize(
    "spec, message",
    [
        (StepSpec("2fast"), "not a valid Python identifier"),
        (StepSpec("class"), "not a valid Python identifier"),
        (StepSpec("top-labels"), "not a valid Python identifier"),
        (StepSpec("ok", inputs=(Tensor("X", "BOOL"),)), "input X: data type 'BOOL': the example computation"),
        (StepSpec("ok", outputs=(Tensor("Y", dims=(0,)),)), "output Y: dims [0]: each dim is a positive size or -1"),
        (StepSpec("ok", outputs=(Tensor("INPUT"),)), "tensor name(s) 'INPUT' used more than once"),
        (StepSpec("ok", inputs=(Tensor("A"), Tensor("A"))), "tensor name(s) 'A' used more than once"),
        (StepSpec("ok", inputs=()), "at least one input and one output"),
        (StepSpec("ok", inputs=(Tensor("not-a-name"),)), "input tensor name 'not-a-name' is not an identifier"),
        (StepSpec("ok", inputs=(Tensor("X" * 200),)), "longer than 120 characters: shorten the names"),
    ],
)
def test_bad_requests_are_refused_and_nothing_is_written(package_layout, spec, message):
    with pytest.raises(ScaffoldError, match=re.escape(message)):
        create_step(spec, package_layout)
    assert list(package_layout.repository.iterdir()) == [] and not package_layout.tests_dir.exists()


def test_a_step_that_exists_is_refused_and_left_untouched(package_layout, capsys):
    existing = package_layout.repository / "preprocess" / "config.pbtxt"
    existing.parent.mkdir()
    existing.write_text("# mine\n")
    with pytest.raises(SystemExit) as exited:
        main(
            [
                "preprocess",
                "--repository",
                str(package_layout.repository),
                "--tests-dir",
                str(package_layout.tests_dir),
                "--source-dir",
                str(package_layout.source_dir),
                "--package",
                package_layout.package,
            ]
        )
    assert exited.value.code == 2
    assert "model 'preprocess' exists already" in capsys.readouterr().err
    assert existing.read_text() == "# mine\n" and not (package_layout.source_dir / "preprocess.py").exists()


@pytest.mark.parametrize("self_contained", [False, True])
def test_the_command_prints_what_it_created_and_the_next_steps(package_layout, capsys, self_contained):
    name, repository = unique("printed"), package_layout.repository
    where = (
        ["--self-contained"]
        if self_contained
        else ["--source-dir", str(package_layout.source_dir), "--package", package_layout.package]
    )
    main([name, "--repository", str(repository), "--tests-dir", str(package_layout.tests_dir), *where])
    out = capsys.readouterr().out
    logic = repository / name / f"{name}_step.py" if self_contained else package_layout.source_dir / f"{name}.py"
    for path in (
        repository / name / "config.pbtxt",
        repository / name / "1/model.py",
        logic,
        package_layout.tests_dir / f"test_step_{name}.py",
    ):
        assert path.is_file() and str(path) in out
    assert "Wire it into an ensemble" in out and "food11-validate" in out and "pytest" in out
    assert f"food11-perf-analyzer -m {name}" in out and "scripts/perf_input.py" in out


ACCEPTED_TYPES = (  # what every refusal of a type lists
    *("FP16", "FP32", "FP64", "INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64"),
    "BYTES",
)


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--input", "FLAGS:BOOL:1"], "input FLAGS: data type 'BOOL': the example computation needs one of FP16, "),
        (["--output", "X:STR:1"], "output X: data type 'STR': the example computation needs one of FP16, "),
        (["--data-type", "BOOL"], "argument --data-type: invalid choice: 'BOOL'"),
    ],
)
def test_the_command_refuses_an_unknown_type_listing_the_accepted_ones_bytes_among_them(
    package_layout, capsys, arguments, message
):
    with pytest.raises(SystemExit) as exited:
        main(["typed", "--repository", str(package_layout.repository), "--self-contained", *arguments])
    assert exited.value.code == 2
    refusal = capsys.readouterr().err.splitlines()[-1]
    assert message in refusal and all(name in refusal for name in ACCEPTED_TYPES), refusal
    assert list(package_layout.repository.iterdir()) == []


def test_the_command_takes_several_tensors_of_any_shapes(package_layout, capsys):
    where = ["--source-dir", str(package_layout.source_dir), "--package", package_layout.package]
    main(
        [
            "image_quality",
            "--repository",
            str(package_layout.repository),
            "--tests-dir",
            str(package_layout.tests_dir),
            *where,
            "--input",
            "PIXELS:FP32:3,384,384",
            "--input",
            "MASK",  # --data-type and --dims
            "--output",
            "BRIGHTNESS:FP32:1",
            "--output",
            "SHARPNESS:fp64:1",
            "--data-type",
            "UINT8",
            "--dims",
            "2,-1",
        ]
    )
    out = capsys.readouterr().out
    assert out.startswith(
        "Created the step 'image_quality' (PIXELS TYPE_FP32 [3, 384, 384], MASK TYPE_UINT8 [2, -1] -> "
        "BRIGHTNESS TYPE_FP32 [1], SHARPNESS TYPE_FP64 [1]):"
    )
    assert 'input_map { key: "PIXELS", value: "<an ensemble tensor of TYPE_FP32 [3, 384, 384]>" }' in out
    assert 'output_map { key: "SHARPNESS", value: "SHARPNESS" }' in out


def test_the_next_steps_name_the_ensemble_tensors_an_input_can_be_wired_to(tmp_path):
    spec = StepSpec("image_quality", (Tensor("PIXELS", "UINT8", (3, 384, 384)),), (Tensor("BRIGHTNESS", dims=(1,)),))
    text = next_steps(spec, Layout(PROJECT_ROOT / "model_repository", tmp_path), [])
    assert "captioner_pixels (food11_pipeline: preprocess's CAPTIONER_PIXELS)" in text
    assert "captioner_pixels (food11_pipeline_topk: preprocess's CAPTIONER_PIXELS)" in text


# --- it is valid, and its own unit test passes ------------------------------------------------------------


TWO_BY_TWO = StepSpec(  # two inputs and two outputs, of other types and shapes, some variable
    "two_by_two",
    inputs=(Tensor("IMAGE_ROWS", "UINT16", (3, -1)), Tensor("WEIGHTS", "FP64", (5,))),
    outputs=(Tensor("SCORE", "FP32", (1,)), Tensor("GRID", "INT8", (2, -1))),
)
TEXT_STEP = StepSpec(  # text in, text and a number out: one text a row each way
    "text_stats",
    inputs=(Tensor("TEXT", "BYTES", (1,)),),
    outputs=(Tensor("SUMMARY", "BYTES", (1,)), Tensor("LENGTH", "FP32", (1,))),
)


def test_a_scaffolded_step_passes_the_repository_validator(package_layout, monkeypatch, forget_new_modules):
    in_package, self_contained = unique("in_package"), unique("self_contained")
    create_step(StepSpec(in_package, TWO_BY_TWO.inputs, TWO_BY_TWO.outputs), package_layout)
    create_step(
        StepSpec(self_contained, (Tensor("INPUT", "UINT8", (2, -1)),)),
        Layout(package_layout.repository, package_layout.tests_dir),
    )
    # The package scaffolded into tmp is importable as an installed one would be; the self-contained
    # step's folder the validator adds itself, as the stub does.
    monkeypatch.syspath_prepend(str(package_layout.source_dir.parent))
    report = validate_repository(package_layout.repository)
    assert report.problems == [], report.text()
    assert sorted(report.models) == sorted([in_package, self_contained])


def test_the_validator_compares_the_tensor_names_the_logic_declares_with_the_config(
    package_layout, monkeypatch, forget_new_modules
):
    name = unique("renamed")
    create_step(StepSpec(name, TWO_BY_TWO.inputs, TWO_BY_TWO.outputs), package_layout)
    config = package_layout.repository / name / "config.pbtxt"
    config.write_text(config.read_text().replace('name: "GRID"', 'name: "MESH"'))
    monkeypatch.syspath_prepend(str(package_layout.source_dir.parent))
    errors = [str(problem) for problem in validate_repository(package_layout.repository).errors]
    assert errors == [
        f"ERROR {name}: {package_layout.package}.{name}.OUTPUTS declares 'GRID', which the config does not and lacks "
        "the config's 'MESH': the step's outputs in its code and in config.pbtxt must be the same names (the "
        "config's: 'SCORE', 'MESH')"
    ]


def test_the_generated_unit_tests_pass(package_layout):
    create_step(StepSpec("default_step"), package_layout)
    create_step(TWO_BY_TWO, package_layout)
    create_step(
        StepSpec("int_step", (Tensor("INPUT", "INT32", (-1,)),), (Tensor("A", "UINT64", (3,)), Tensor("B", "FP16"))),
        Layout(package_layout.repository, package_layout.tests_dir),
    )
    result = run_generated_tests(package_layout.tests_dir, package_layout.source_dir.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "21 passed" in result.stdout  # 7 tests in each of the 3 generated files


def test_a_text_steps_generated_unit_test_passes_and_its_files_pass_lint(package_layout):
    """BYTES in and out: the generated test fills text inputs with UTF-8 bytes and holds text outputs to bytes."""
    files = create_step(TEXT_STEP, package_layout)
    assert ruff_problems({path: path.read_text() for path in files}) == []
    result = run_generated_tests(package_layout.tests_dir, package_layout.source_dir.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "8 passed" in result.stdout  # the 7 tests of every step, and its text's UTF-8 check


def test_a_generated_test_catches_logic_and_config_that_disagree(package_layout):
    create_step(TWO_BY_TWO, package_layout)
    config = package_layout.repository / TWO_BY_TWO.name / "config.pbtxt"
    config.write_text(config.read_text().replace('name: "GRID"', 'name: "MESH"'))
    result = run_generated_tests(package_layout.tests_dir, package_layout.source_dir.parent)
    assert result.returncode == 1 and "OUTPUTS differ from config.pbtxt's outputs" in result.stdout, result.stdout


# --- it passes `make lint` as written -------------------------------------------------------------------------

VENV_BIN = Path(sys.executable).parent
PYPROJECT = PROJECT_ROOT / "pyproject.toml"


def ruff_problems(files: dict[Path, str]) -> list[str]:
    """ruff check and ruff format --check, as `make lint` runs them, on each Python file (its text given on
    stdin under its own path, so a file planned for the source tree is judged where it would be)."""
    problems = []
    for path, text in files.items():
        if path.suffix != ".py":
            continue
        for command in (["check"], ["format", "--check"]):
            result = subprocess.run(
                [str(VENV_BIN / "ruff"), *command, "--config", str(PYPROJECT), "--stdin-filename", str(path), "-"],
                input=text,
                capture_output=True,
                text=True,
                cwd=PROJECT_ROOT,
            )
            if result.returncode != 0:
                problems.append(f"ruff {' '.join(command)} {path}:\n{result.stdout}{result.stderr}")
    return problems


def score_graph(path: Path) -> Path:
    """A real ONNX graph for ``--onnx``: PIXELS FP32 [N, 3, 8, 8] -> SCORE FP32 [N, 1], each photo's mean."""
    import onnx  # the build extra, which the --onnx scaffold needs
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [
            helper.make_node("ReduceMean", ["PIXELS"], ["mean"], axes=[1, 2, 3], keepdims=1),
            helper.make_node("Flatten", ["mean"], ["SCORE"], axis=1),
        ],
        "score",
        [helper.make_tensor_value_info("PIXELS", TensorProto.FLOAT, ["N", 3, 8, 8])],
        [helper.make_tensor_value_info("SCORE", TensorProto.FLOAT, ["N", 1])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_the_scaffolds_files_pass_make_lint_as_written(package_layout, tmp_path):
    """Lint and format as `make lint` checks them, and mypy on the logic modules (what `make lint` type-checks
    of a step: pipeline_src/steps/NAME.py), for the default place in the source tree (planned, not written),
    for a package of one's own and for a self-contained step, with one tensor each way and with several; and a
    step that is a model file (``--onnx``: its model.py and test, no logic module), in the tree and outside."""
    source = Layout(PROJECT_ROOT / "model_repository", DEFAULT_TESTS_DIR, PROJECT_ROOT / "pipeline_src" / "steps")
    image_quality = StepSpec(
        "image_quality",
        (Tensor("PIXELS", "FP32", (3, 384, 384)),),
        (Tensor("BRIGHTNESS", "FP32", (1,)), Tensor("SHARPNESS", "FP32", (1,))),
    )
    planned = {}
    for spec, layout in [
        (image_quality, source),
        (StepSpec("zoom_levels"), source),  # a module sorting after triton_step
        (TWO_BY_TWO, package_layout),
        (TEXT_STEP, package_layout),
        (
            StepSpec("self_contained", TWO_BY_TWO.inputs, TWO_BY_TWO.outputs),
            Layout(package_layout.repository, tmp_path),
        ),
    ]:
        planned.update(plan_files(spec, layout))
    onnx_spec = read_spec("score_file", score_graph(tmp_path / "score.onnx"))
    for layout in (source, package_layout):
        files = plan_onnx_files(onnx_spec, layout)
        planned.update({path: text for path, text in files.items() if isinstance(text, str)})
    assert sum(path.suffix == ".py" for path in planned) == 19  # 3 for each Python step, 2 for each model-file one
    assert ruff_problems(planned) == []
    logic_dir = tmp_path / "logic"
    logic_dir.mkdir()
    for index, (path, text) in enumerate(planned.items()):
        if path.suffix == ".py" and path.parent.name not in ("1", "unit") and not path.name.startswith("test_"):
            (logic_dir / f"logic_{index}_{path.name}").write_text(text)
    result = subprocess.run(
        [str(VENV_BIN / "mypy"), "--config-file", str(PYPROJECT), "--cache-dir", str(tmp_path / "cache"), "."],
        capture_output=True,
        text=True,
        cwd=logic_dir,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues found in 5 source files" in result.stdout


# --- it loads in the real server and answers --------------------------------------------------------------


def infer(triton_grpc, model: str, rows: np.ndarray):
    tensor = grpcclient.InferInput("INPUT", list(rows.shape), "FP32")
    tensor.set_data_from_numpy(rows)
    return triton_grpc.infer(model, [tensor])


@contextlib.contextmanager
def served(spec: StepSpec, model_repository: Path, triton_grpc, tmp_path: Path):
    """The step scaffolded self-contained into the session server's repository and loaded; afterwards
    unloaded and its folder removed (the repository is a session copy, never the source tree)."""
    created = create_step(spec, Layout(model_repository, tmp_path / "tests"))
    assert all(path.is_relative_to(model_repository) or path.is_relative_to(tmp_path) for path in created)
    try:
        triton_grpc.load_model(spec.name)
        yield spec.name
    finally:
        try:
            triton_grpc.unload_model(spec.name)
        finally:
            shutil.rmtree(model_repository / spec.name)


@pytest.fixture(scope="module")  # loaded once: the tests that use it only call it
def scaffolded_in_server(model_repository, triton_grpc, tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("scaffolded")
    with served(StepSpec(unique("scaffolded")), model_repository, triton_grpc, tmp_path) as name:
        yield name


def test_a_scaffolded_step_loads_in_the_real_server_and_answers(triton_grpc, scaffolded_in_server):
    assert triton_grpc.is_model_ready(scaffolded_in_server)
    rows = np.array([[1.0, -2.0, 0.5, 3.0], [0.0, 4.0, -1.5, 8.0]], dtype=np.float32)
    answer = infer(triton_grpc, scaffolded_in_server, rows).as_numpy("OUTPUT")
    assert answer.dtype == np.float32
    # each value: the row's mean times the config's scale
    np.testing.assert_array_equal(answer, np.repeat(rows.mean(axis=1, keepdims=True) * 2.0, 4, axis=1))


def test_a_scaffolded_step_with_several_tensors_answers_each_output_in_its_type(
    model_repository, triton_grpc, tmp_path
):
    spec = StepSpec(unique("two_by_two"), TWO_BY_TWO.inputs, TWO_BY_TWO.outputs)
    with served(spec, model_repository, triton_grpc, tmp_path) as name:
        image_rows = grpcclient.InferInput("IMAGE_ROWS", [2, 3, 4], "UINT16")
        image_rows.set_data_from_numpy(np.stack([np.full((3, 4), 1), np.full((3, 4), 5)]).astype(np.uint16))
        weights = grpcclient.InferInput("WEIGHTS", [2, 5], "FP64")
        weights.set_data_from_numpy(np.stack([np.full(5, 3.0), np.full(5, 7.0)]))
        result = triton_grpc.infer(name, [image_rows, weights])
        score, grid = result.as_numpy("SCORE"), result.as_numpy("GRID")
        # each row: the mean over the inputs of the row's mean, times scale 2: (1 + 3) and (5 + 7)
        np.testing.assert_array_equal(score, np.array([[4.0], [12.0]], dtype=np.float32))
        np.testing.assert_array_equal(grid, np.array([[[4]] * 2, [[12]] * 2], dtype=np.int8))


def infer_text(triton_grpc, model: str, texts: list[bytes]):
    tensor = grpcclient.InferInput("TEXT", [len(texts), 1], "BYTES")
    tensor.set_data_from_numpy(np.array(texts, dtype=np.object_).reshape(-1, 1))
    return triton_grpc.infer(model, [tensor])


def test_a_scaffolded_text_step_answers_bytes_in_with_bytes_out(model_repository, triton_grpc, tmp_path):
    spec = StepSpec(unique("text_stats"), TEXT_STEP.inputs, TEXT_STEP.outputs)
    with served(spec, model_repository, triton_grpc, tmp_path) as name:
        texts = ["crème brûlée".encode(), b"pho", b""]  # 12 characters in 14 bytes, 3, none
        result = infer_text(triton_grpc, name, texts)
        types = {output.name: output.datatype for output in result.get_response().outputs}
        assert types == {"SUMMARY": "BYTES", "LENGTH": "FP32"}
        # each row: its text's length in characters times scale 2; as text in SUMMARY
        np.testing.assert_array_equal(result.as_numpy("LENGTH"), np.array([[24.0], [6.0], [0.0]], dtype=np.float32))
        summary = result.as_numpy("SUMMARY")
        assert summary.dtype == np.object_ and summary.tolist() == [[b"24"], [b"6"], [b"0"]]
        with pytest.raises(InferenceServerException, match=f"{name}: TEXT: row 2 of 2 is not UTF-8 text") as caught:
            infer_text(triton_grpc, name, [b"pho", b"cr\xe8me"])  # Latin-1
        assert caught.value.status() == "StatusCode.INVALID_ARGUMENT"


def test_a_bad_request_to_a_scaffolded_step_fails_alone_naming_the_step(triton_grpc, scaffolded_in_server):
    rows = np.array([[1.0, 2.0, 3.0, 4.0], [0.0, np.inf, 0.0, 0.0]], dtype=np.float32)
    with pytest.raises(InferenceServerException, match=f"{scaffolded_in_server}: INPUT: row 2 of 2: ") as caught:
        infer(triton_grpc, scaffolded_in_server, rows)
    assert caught.value.status() == "StatusCode.INVALID_ARGUMENT"
    np.testing.assert_array_equal(
        infer(triton_grpc, scaffolded_in_server, rows[:1]).as_numpy("OUTPUT"), np.full((1, 4), 5.0)
    )


def test_requests_in_flight_together_each_get_their_own_answer(triton, scaffolded_in_server):
    """Whether or not the dynamic batcher puts them in one execute, each answer is its own request's."""

    async def one(client, value: float):
        rows = np.full((2, 4), value, dtype=np.float32)
        tensor = aioclient.InferInput("INPUT", list(rows.shape), "FP32")
        tensor.set_data_from_numpy(rows)
        try:
            return (await client.infer(scaffolded_in_server, [tensor])).as_numpy("OUTPUT")
        except InferenceServerException as exc:
            return exc.message()

    async def many():
        async with aioclient.InferenceServerClient(triton.grpc_url) as client:
            return await asyncio.gather(*(one(client, value) for value in (1.0, 2.0, np.nan, 4.0)))

    first, second, bad, fourth = asyncio.run(many())
    for answer, value in ((first, 1.0), (second, 2.0), (fourth, 4.0)):
        np.testing.assert_array_equal(answer, np.full((2, 4), value * 2, dtype=np.float32))
    assert f"{scaffolded_in_server}: INPUT: row 1 of 2" in bad
