"""``food11-new-step NAME --onnx FILE``: a step that is a model file. On a real graph made with onnx.helper it writes
the config (read from the graph), the Python adapter, the native variant for NVIDIA's image, the copied file, its
manifest and its source record; the repository stays valid, the generated unit test passes (and fails for a graph
unlike the config), ``make models``'s build copies the file again on a fresh clone, and the step loads in the real
server and answers, a bad request failing alone naming the step, the file named in every answer's MODELS.
Everything is scaffolded into temporary folders or the session's repository copy, never the source tree."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import onnx
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
from helpers import encode, gradient
from onnx import TensorProto, helper
from tritonclient.grpc import model_config_pb2
from tritonclient.utils import InferenceServerException

from pipeline_src import PROJECT_ROOT
from pipeline_src.contract import CLASSIFY_ENSEMBLE, IMAGE, MODELS
from pipeline_src.model_build.cli import build, parse_args
from pipeline_src.provenance.manifest import read_manifest, verify
from pipeline_src.repository.loading import parse_config
from pipeline_src.repository.scaffold import Layout, create_onnx_step, main, read_spec
from pipeline_src.repository.validate import validate_repository

SCORE_GRAPH_FILES = [  # what the command writes for a step NAME, besides docs/configuration.md's rows
    "NAME/1/manifest.json",
    "NAME/1/model.onnx",
    "NAME/1/model.py",
    "NAME/config.pbtxt",
    "NAME/configs/onnxruntime.pbtxt",
    "NAME/model_source.json",
]


def score_graph(path: Path, batch: int | str = "N", elem_type: int = TensorProto.FLOAT, side: int = 8) -> Path:
    """A tiny image score: PIXELS [N, 3, side, side] -> SCORE [N, 1], each photo's mean pixel value."""
    graph = helper.make_graph(
        [
            helper.make_node("ReduceMean", ["PIXELS"], ["mean"], axes=[1, 2, 3], keepdims=1),
            helper.make_node("Flatten", ["mean"], ["SCORE"], axis=1),
        ],
        "score",
        [helper.make_tensor_value_info("PIXELS", elem_type, [batch, 3, side, side])],
        [helper.make_tensor_value_info("SCORE", elem_type, [batch, 1])],
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def tensors(tensor_list) -> list[tuple[str, str, list[int]]]:
    return [(t.name, model_config_pb2.DataType.Name(t.data_type), list(t.dims)) for t in tensor_list]


@pytest.fixture
def project(tmp_path) -> Path:
    """An empty project of its own: a model repository, and a model file under models/."""
    (tmp_path / "model_repository").mkdir()
    score_graph(tmp_path / "models" / "score.onnx")
    return tmp_path


def new_step(project: Path, *arguments: str) -> None:
    repository, tests_dir = project / "model_repository", project / "tests"
    main(["--repository", str(repository), "--tests-dir", str(tests_dir), *arguments])


# --- what it writes ------------------------------------------------------------------------------------------


def test_the_command_writes_the_config_from_the_graph_the_adapter_the_native_variant_and_the_named_copy(
    project, capsys
):
    new_step(project, "score", "--onnx", str(project / "models" / "score.onnx"))
    out = capsys.readouterr().out
    step_dir = project / "model_repository" / "score"
    written = sorted(path.relative_to(step_dir.parent).as_posix() for path in step_dir.rglob("*") if path.is_file())
    assert written == [name.replace("NAME", "score") for name in SCORE_GRAPH_FILES]
    assert (project / "tests" / "test_step_score.py").is_file()

    config = parse_config(step_dir / "config.pbtxt")
    assert (config.backend, config.max_batch_size) == ("python", 32)  # every tensor's first dim is dynamic
    assert tensors(config.input) == [("PIXELS", "TYPE_FP32", [3, 8, 8])]
    assert tensors(config.output) == [("SCORE", "TYPE_FP32", [1])]
    assert [(group.count, group.kind) for group in config.instance_group] == [(1, 0)]  # no kind: GPU where one is
    assert config.HasField("dynamic_batching")
    assert config.parameters["settings"].string_value == "pipeline_src.steps.settings:OnnxFileSettings"
    native = parse_config(step_dir / "configs" / "onnxruntime.pbtxt")
    assert (native.platform, native.backend, native.default_model_filename) == (
        "onnxruntime_onnx",
        "onnxruntime",
        "model.onnx",
    )
    assert (native.max_batch_size, tensors(native.input), tensors(native.output)) == (
        32,
        tensors(config.input),
        tensors(config.output),
    )
    assert [group.kind for group in native.instance_group] == [model_config_pb2.ModelInstanceGroup.KIND_GPU]
    assert "class TritonPythonModel(OnnxFileStep):" in (step_dir / "1" / "model.py").read_text()

    assert (step_dir / "1" / "model.onnx").read_bytes() == (project / "models" / "score.onnx").read_bytes()
    manifest = read_manifest(step_dir / "1")
    assert manifest is not None and (manifest.kind, manifest.source) == ("user", "models/score.onnx")
    assert verify(step_dir / "1") == []
    assert json.loads((step_dir / "model_source.json").read_text())["source"] == "models/score.onnx"
    # What to do next says how the git-ignored copy comes back, and offers the classifier's pixels to wire it to.
    assert "model_repository/*/1/model.onnx" in out and "`make models` copies it again" in out
    assert "input_map" in out and "TYPE_FP32 [3, 8, 8]" in out


def test_the_projects_gitignore_ignores_the_copy_and_its_manifest():
    ignored = subprocess.run(
        ["git", "check-ignore", "model_repository/score/1/model.onnx", "model_repository/score/1/manifest.json"],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
    )
    assert ignored.stdout.split() == ["model_repository/score/1/model.onnx", "model_repository/score/1/manifest.json"]
    kept = subprocess.run(["git", "check-ignore", "model_repository/score/model_source.json"], cwd=PROJECT_ROOT)
    assert kept.returncode == 1  # the record is committed


def test_a_graph_whose_tensors_do_not_all_batch_gets_max_batch_size_0_and_no_batcher(project):
    fixed = score_graph(project / "models" / "one.onnx", batch=1)
    spec = read_spec("one_photo", fixed)
    assert spec.max_batch_size == 0 and spec.inputs[0].dims == (1, 3, 8, 8)
    create_onnx_step(spec, Layout(project / "model_repository", project / "tests"))
    config = parse_config(project / "model_repository" / "one_photo" / "config.pbtxt")
    assert config.max_batch_size == 0 and not config.HasField("dynamic_batching")
    with pytest.raises(SystemExit) as exited:
        new_step(project, "batched_one", "--onnx", str(fixed), "--max-batch-size", "8")
    assert exited.value.code == 2


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda path: path.write_text("not a graph"), "is not a readable ONNX file"),
        (lambda path: score_graph(path, elem_type=TensorProto.STRING), "PIXELS is STRING: the adapter serves FP16"),
    ],
)
def test_a_file_it_cannot_serve_is_refused_with_the_reason_and_nothing_is_written(project, capsys, make, message):
    make(project / "models" / "bad.onnx")
    with pytest.raises(SystemExit) as exited:
        new_step(project, "bad", "--onnx", str(project / "models" / "bad.onnx"))
    assert exited.value.code == 2 and message in capsys.readouterr().err
    assert list((project / "model_repository").iterdir()) == []


def test_tensors_of_the_command_line_are_refused_with_onnx(project, capsys):
    with pytest.raises(SystemExit):
        new_step(project, "score", "--onnx", str(project / "models" / "score.onnx"), "--input", "X:FP32:1")
    assert "--onnx reads the tensors from the file" in capsys.readouterr().err


# --- it is valid, its generated test passes, and the build copies it again ------------------------------------


def scaffolded_copy(model_repository: Path, work: Path, name: str) -> Path:
    """A copy of the session's built repository with the step ``name`` scaffolded from ``work/models/``."""
    repository = shutil.copytree(model_repository, work / "model_repository")
    source = score_graph(work / "models" / f"{name}.onnx")
    create_onnx_step(read_spec(name, source), Layout(repository, work / "tests"))
    return repository


def test_food11_validate_passes_the_repository_with_the_step_and_its_native_variant(model_repository, tmp_path):
    repository = scaffolded_copy(model_repository, tmp_path, "score")
    report = validate_repository(repository)
    assert report.problems == [], report.text()
    assert validate_repository(repository, "onnxruntime").problems == []  # as NVIDIA's image selects the variant


def run_generated_tests(tests_dir: Path) -> subprocess.CompletedProcess:
    """pytest on the generated test, in a fresh process outside this project (no conftest, no cache)."""
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tests_dir)],
        cwd=tests_dir.parent,
        env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_generated_unit_test_passes_and_catches_a_graph_unlike_the_config(project):
    new_step(project, "score", "--onnx", str(project / "models" / "score.onnx"))
    result = run_generated_tests(project / "tests")
    assert result.returncode == 0 and "2 passed" in result.stdout, result.stdout + result.stderr
    score_graph(project / "model_repository" / "score" / "1" / "model.onnx", side=16)  # another image size
    result = run_generated_tests(project / "tests")
    assert result.returncode == 1 and "the graph has shape ['N', 3, 16, 16], the config [3, 8, 8]" in result.stdout


def test_make_models_copies_the_file_again_on_a_fresh_clone(model_repository, tmp_path, capsys):
    """The copy and its manifest are git-ignored: the build (scripts/build_models.py, what `make models` runs)
    copies the file from its recorded source and writes the manifest again, beside the built models it keeps."""
    repository = scaffolded_copy(model_repository, tmp_path, "score")
    version_dir = repository / "score" / "1"
    (version_dir / "model.onnx").unlink()
    (version_dir / "manifest.json").unlink()
    build(parse_args(["--repository", str(repository)]))
    assert "score: " in capsys.readouterr().out
    assert (version_dir / "model.onnx").read_bytes() == (tmp_path / "models" / "score.onnx").read_bytes()
    assert verify(version_dir) == [] and read_manifest(version_dir).kind == "user"


# --- it loads in the real server and answers ------------------------------------------------------------------


@contextlib.contextmanager
def served_step(model_repository: Path, triton_grpc, tmp_path: Path, batch: int | str = "N"):
    """The step scaffolded into the session server's repository (from a graph of ``batch`` rows) and loaded,
    with the label step loaded again so that it reads the step's manifest; afterwards the step unloaded, its
    folder removed and the label loaded again as it was, without it. Triton reloads a model, rather than keep
    its instances, only for a config change beyond its instance groups: the label's batching delay, a
    microsecond longer while the step serves."""
    name = unique("score")
    graph = score_graph(tmp_path / "score.onnx", batch=batch)
    create_onnx_step(read_spec(name, graph), Layout(model_repository, tmp_path))
    label = triton_grpc.get_model_config("label", as_json=True)["config"]
    longer = json.loads(json.dumps(label))
    delay = int(label["dynamic_batching"].get("max_queue_delay_microseconds", 0))
    longer["dynamic_batching"]["max_queue_delay_microseconds"] = str(delay + 1)
    try:
        triton_grpc.load_model(name)
        triton_grpc.load_model("label", config=json.dumps(longer))
        yield name
    finally:
        try:
            triton_grpc.unload_model(name)
        finally:
            shutil.rmtree(model_repository / name)
            triton_grpc.load_model("label", config=json.dumps(label))


@pytest.fixture(scope="module")  # loaded once: the tests that use it only call it
def onnx_step_in_server(model_repository, triton_grpc, tmp_path_factory):
    with served_step(model_repository, triton_grpc, tmp_path_factory.mktemp("onnx_step")) as name:
        yield name


def pixels(*values: float) -> np.ndarray:
    return np.stack([np.full((3, 8, 8), value, np.float32) for value in values])


def infer(triton_grpc, model: str, rows: np.ndarray):
    tensor = grpcclient.InferInput("PIXELS", list(rows.shape), "FP32")
    tensor.set_data_from_numpy(rows)
    return triton_grpc.infer(model, [tensor])


def test_the_step_loads_in_the_real_server_and_answers_each_photos_score(triton_grpc, onnx_step_in_server):
    assert triton_grpc.is_model_ready(onnx_step_in_server)
    rows = pixels(0.25, -1.0, 3.0)
    rows[2, 0] = 6.0  # one channel brighter: the mean is (6 + 3 + 3) / 3
    score = infer(triton_grpc, onnx_step_in_server, rows).as_numpy("SCORE")
    assert score.dtype == np.float32
    np.testing.assert_allclose(score, np.array([[0.25], [-1.0], [4.0]], np.float32), rtol=1e-6)


def test_a_bad_request_fails_alone_naming_the_step(triton, onnx_step_in_server):
    """Whether or not the dynamic batcher puts them in one execute, the request with a NaN fails alone, with an
    error naming the step, the input and the row; the others get their own scores."""

    async def one(client, rows: np.ndarray):
        tensor = aioclient.InferInput("PIXELS", list(rows.shape), "FP32")
        tensor.set_data_from_numpy(rows)
        try:
            return (await client.infer(onnx_step_in_server, [tensor])).as_numpy("SCORE")
        except InferenceServerException as exc:
            return exc

    async def many():
        async with aioclient.InferenceServerClient(triton.grpc_url) as client:
            return await asyncio.gather(*(one(client, rows) for rows in (pixels(1), pixels(2, np.nan), pixels(4, 5))))

    first, bad, third = asyncio.run(many())
    np.testing.assert_array_equal(first, [[1.0]])
    np.testing.assert_array_equal(third, [[4.0], [5.0]])
    assert isinstance(bad, InferenceServerException) and bad.status() == "StatusCode.INVALID_ARGUMENT"
    assert f"{onnx_step_in_server}: PIXELS: row 2 of 2 holds NaN or infinity" in bad.message()


def test_every_answer_names_the_model_file(triton_grpc, onnx_step_in_server):
    """Through its manifest: the label step, loaded again, reads it with the others' into every answer's MODELS."""
    image = grpcclient.InferInput(IMAGE, [1, 1], "BYTES")
    photo = encode(gradient(64 + int(uuid.uuid4().int % 64), 48), "PNG")  # a photo of its own: no cached answer
    image.set_data_from_numpy(np.array([[photo]], dtype=np.object_))
    answer = triton_grpc.infer(CLASSIFY_ENSEMBLE, [image], outputs=[grpcclient.InferRequestedOutput(MODELS)])
    models = {entry["model"]: entry for entry in json.loads(answer.as_numpy(MODELS)[0, 0])}
    assert models[onnx_step_in_server]["kind"] == "user"
    assert models[onnx_step_in_server]["source"].endswith("score.onnx")
    assert "classifier" in models  # beside the built models, not instead of them


def test_a_step_whose_graph_does_not_batch_takes_each_request_as_one_run(model_repository, triton_grpc, tmp_path):
    with served_step(model_repository, triton_grpc, tmp_path, batch=1) as name:
        assert parse_config(model_repository / name / "config.pbtxt").max_batch_size == 0
        np.testing.assert_allclose(infer(triton_grpc, name, pixels(0.5)).as_numpy("SCORE"), [[0.5]])
        with pytest.raises(InferenceServerException, match=f"{name}: PIXELS: row 1 of 1 holds NaN") as caught:
            infer(triton_grpc, name, pixels(np.nan))
        assert caught.value.status() == "StatusCode.INVALID_ARGUMENT"
