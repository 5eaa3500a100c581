"""food11-new-step: a scaffolded step is valid, its own unit test passes, and it loads and answers in the real
server. Everything is scaffolded into temporary folders (or the session's repository copy), never the source tree.

A self-contained step keeps its logic module in its model folder: the Python backend's stub appends the model's
folder to sys.path before importing 1/model.py (python_backend r24.10, src/pb_stub.cc), and ignores PYTHONPATH.
"""

from __future__ import annotations

import asyncio
import os
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
    create_step,
    main,
    plan_files,
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
    assert "from pipeline_src.steps.crop_scores import CropScoresSettings, compute, find_problem" in model_py
    assert "from pipeline_src.steps.triton_step import StepContext" in model_py


def test_tensor_names_types_and_dims_are_declared_as_asked(package_layout):
    spec = StepSpec(
        "rescale",
        input_name="SCORES",
        output_name="RESCALED",
        data_type="INT16",
        dims=(3, -1),
        max_batch_size=8,
        instances=2,
    )
    config_text = plan_files(spec, package_layout)[package_layout.repository / "rescale" / "config.pbtxt"]
    config = text_format.Parse(config_text, model_config_pb2.ModelConfig())
    (tensor_in,), (tensor_out,) = config.input, config.output
    assert (tensor_in.name, tensor_out.name) == ("SCORES", "RESCALED")
    assert tensor_in.data_type == tensor_out.data_type == model_config_pb2.TYPE_INT16
    assert list(tensor_in.dims) == list(tensor_out.dims) == [3, -1]
    assert config.max_batch_size == 8
    cpu = model_config_pb2.ModelInstanceGroup.KIND_CPU
    assert [(group.count, group.kind) for group in config.instance_group] == [(2, cpu)]


@pytest.mark.parametrize(
    "spec, message",
    [
        (StepSpec("2fast"), "not a valid Python identifier"),
        (StepSpec("class"), "not a valid Python identifier"),
        (StepSpec("top-labels"), "not a valid Python identifier"),
        (StepSpec("ok", data_type="STRING"), "the example computation needs one of"),
        (StepSpec("ok", dims=(0,)), "each dim is a positive size or -1"),
        (StepSpec("ok", input_name="X", output_name="X"), "input and output are both named 'X'"),
    ],
)
def test_bad_requests_are_refused_and_nothing_is_written(package_layout, spec, message):
    with pytest.raises(ScaffoldError, match=message):
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


# --- it is valid, and its own unit test passes ------------------------------------------------------------


def test_a_scaffolded_step_passes_the_repository_validator(package_layout, monkeypatch, forget_new_modules):
    in_package, self_contained = unique("in_package"), unique("self_contained")
    create_step(StepSpec(in_package), package_layout)
    create_step(
        StepSpec(self_contained, data_type="UINT8", dims=(2, -1)),
        Layout(package_layout.repository, package_layout.tests_dir),
    )
    # The package scaffolded into tmp is importable as an installed one would be; the self-contained
    # step's folder the validator adds itself, as the stub does.
    monkeypatch.syspath_prepend(str(package_layout.source_dir.parent))
    report = validate_repository(package_layout.repository)
    assert report.problems == [], report.text()
    assert sorted(report.models) == sorted([in_package, self_contained])


def test_the_generated_unit_tests_pass(package_layout):
    create_step(StepSpec("default_step"), package_layout)
    create_step(StepSpec("wide_step", data_type="FP64", dims=(2, 3)), package_layout)
    create_step(
        StepSpec("int_step", data_type="INT32", dims=(-1,)), Layout(package_layout.repository, package_layout.tests_dir)
    )
    result = run_generated_tests(package_layout.tests_dir, package_layout.source_dir.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "15 passed" in result.stdout  # 5 tests in each of the 3 generated files


# --- it loads in the real server and answers --------------------------------------------------------------


def infer(triton_grpc, model: str, rows: np.ndarray):
    tensor = grpcclient.InferInput("INPUT", list(rows.shape), "FP32")
    tensor.set_data_from_numpy(rows)
    return triton_grpc.infer(model, [tensor])


@pytest.fixture
def scaffolded_in_server(model_repository, triton_grpc, tmp_path):
    """A self-contained step scaffolded into the session server's repository and loaded; afterwards
    unloaded and its folder removed (the repository is a session copy, never the source tree)."""
    name = unique("scaffolded")
    created = create_step(StepSpec(name), Layout(model_repository, tmp_path / "tests"))
    assert all(path.is_relative_to(model_repository) or path.is_relative_to(tmp_path) for path in created)
    try:
        triton_grpc.load_model(name)
        yield name
    finally:
        try:
            triton_grpc.unload_model(name)
        finally:
            shutil.rmtree(model_repository / name)


@pytest.mark.integration
def test_a_scaffolded_step_loads_in_the_real_server_and_answers(triton_grpc, scaffolded_in_server):
    assert triton_grpc.is_model_ready(scaffolded_in_server)
    rows = np.array([[1.0, -2.0, 0.5, 3.0], [0.0, 4.0, -1.5, 8.0]], dtype=np.float32)
    answer = infer(triton_grpc, scaffolded_in_server, rows).as_numpy("OUTPUT")
    assert answer.dtype == np.float32
    np.testing.assert_array_equal(answer, rows * 2.0)  # the config's scale


@pytest.mark.integration
def test_a_bad_request_to_a_scaffolded_step_fails_alone_naming_the_step(triton_grpc, scaffolded_in_server):
    rows = np.array([[1.0, 2.0, 3.0, 4.0], [0.0, np.inf, 0.0, 0.0]], dtype=np.float32)
    with pytest.raises(InferenceServerException, match=f"{scaffolded_in_server}: INPUT: row 2 of 2: ") as caught:
        infer(triton_grpc, scaffolded_in_server, rows)
    assert caught.value.status() == "StatusCode.INVALID_ARGUMENT"
    np.testing.assert_array_equal(infer(triton_grpc, scaffolded_in_server, rows[:1]).as_numpy("OUTPUT"), rows[:1] * 2)


@pytest.mark.integration
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
