"""A step that is a model file (``food11-new-step NAME --onnx FILE``), without Triton: the shared logic its adapter
runs (pipeline_src.steps.batching: any number of inputs and outputs, padded GPU batch sizes, requests grouped by
row shape, non-finite inputs refused), and ``make models``'s hook that copies the git-ignored file again from its
recorded source and writes the manifest through which every answer names it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from pipeline_src.model_build.cli import copy_user_models
from pipeline_src.provenance.manifest import read_manifest, verify
from pipeline_src.provenance.model_source import ModelSource, recorded_source
from pipeline_src.provenance.served import served_identity
from pipeline_src.repository.scaffold import Layout, create_onnx_step, read_spec
from pipeline_src.steps.batching import non_finite_problem, shape_groups
from pipeline_src.steps.onnx_runtime import OnnxFileModel, numpy_type


def two_by_two_graph(path: Path) -> Path:
    """A [n, 4] FP32 and B [n, 1] INT64 -> SUM = A + B (FP32 [n, 4]) and BEST = argmax of A (INT64 [n, 1])."""
    graph = helper.make_graph(
        [
            helper.make_node("Cast", ["B"], ["b"], to=TensorProto.FLOAT),
            helper.make_node("Add", ["A", "b"], ["SUM"]),
            helper.make_node("ArgMax", ["A"], ["BEST"], axis=1, keepdims=1),
        ],
        "two_by_two",
        [
            helper.make_tensor_value_info("A", TensorProto.FLOAT, ["n", 4]),
            helper.make_tensor_value_info("B", TensorProto.INT64, ["n", 1]),
        ],
        [
            helper.make_tensor_value_info("SUM", TensorProto.FLOAT, ["n", 4]),
            helper.make_tensor_value_info("BEST", TensorProto.INT64, ["n", 1]),
        ],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def batch(rows: int) -> dict[str, np.ndarray]:
    a = np.arange(rows * 4, dtype=np.float32).reshape(rows, 4)[:, ::-1].copy()  # row i's largest value first
    return {"A": a, "B": np.arange(rows, dtype=np.int64).reshape(rows, 1)}


def test_every_input_is_fed_and_every_output_answered_in_its_type(tmp_path):
    model = OnnxFileModel(two_by_two_graph(tmp_path / "graph.onnx"))
    assert (model.inputs, model.outputs) == (["A", "B"], ["SUM", "BEST"])
    outputs = model(batch(3))
    np.testing.assert_array_equal(outputs["SUM"], batch(3)["A"] + np.arange(3, dtype=np.float32)[:, None])
    np.testing.assert_array_equal(outputs["BEST"], np.zeros((3, 1), np.int64))
    assert outputs["SUM"].dtype == np.float32 and outputs["BEST"].dtype == np.int64


def test_only_the_outputs_asked_for_are_computed(tmp_path):
    """The config may leave a graph output out: the adapter answers exactly the config's."""
    model = OnnxFileModel(two_by_two_graph(tmp_path / "graph.onnx"), outputs=["BEST"])
    assert list(model(batch(2))) == ["BEST"]


def test_padded_batch_sizes_give_the_unpadded_answers(tmp_path):
    """A GPU instance's gpu_batch_sizes: padded up (3 -> 4) or in chunks of the largest (9 -> 4 + 4 + 1), every
    row's answer unchanged; each size's session warmed at load."""
    path = two_by_two_graph(tmp_path / "graph.onnx")
    plain, padded = OnnxFileModel(path), OnnxFileModel(path, batch_sizes=(1, 4))
    padded.warm_up()
    assert sorted(padded.sessions) == [1, 4]
    for rows in (1, 3, 9):
        expected, got = plain(batch(rows)), padded(batch(rows))
        for name in ("SUM", "BEST"):
            np.testing.assert_array_equal(got[name], expected[name], err_msg=f"{name}, {rows} rows")


def test_a_row_with_nan_or_infinity_is_named_and_other_inputs_pass():
    rows = np.zeros((3, 2, 2), np.float32)
    assert non_finite_problem(rows) is None
    rows[1, 0, 1] = np.inf
    assert non_finite_problem(rows) == "row 2 of 3 holds NaN or infinity (the step's refuse_non_finite)"
    rows[0, 1, 1] = np.nan
    assert non_finite_problem(rows).startswith("row 1 of 3 ")
    assert non_finite_problem(np.full((2, 2), 7, np.int64)) is None  # integers are never NaN


def test_requests_are_grouped_by_their_row_shapes_in_order():
    """Only requests of one row shape stack; a dim of -1 lets each bring its own."""
    requests = [
        {"A": np.zeros((1, 3)), "B": np.zeros((1, 1))},
        {"A": np.zeros((2, 3)), "B": np.zeros((2, 1))},
        {"A": np.zeros((1, 5)), "B": np.zeros((1, 1))},
        {"A": np.zeros((4, 3)), "B": np.zeros((4, 1))},
    ]
    assert shape_groups(requests) == [[0, 1, 3], [2]]


def test_onnx_runtime_types_have_their_numpy_types():
    assert numpy_type("tensor(float)") == np.float32 and numpy_type("tensor(bool)") == np.bool_
    assert numpy_type("tensor(string)") is None  # numpy holds no such fixed type


# --- make models: the hook that copies a model file of yours again -------------------------------------------


@pytest.fixture
def scaffolded(tmp_path) -> tuple[Path, Path]:
    """A project of its own: a repository with a model-file step scaffolded from ``models/scores.onnx``."""
    (tmp_path / "model_repository").mkdir()
    source = two_by_two_graph(tmp_path / "graph.onnx")
    (tmp_path / "models").mkdir()
    source = source.rename(tmp_path / "models" / "scores.onnx")
    spec = read_spec("scores", source)
    create_onnx_step(spec, Layout(tmp_path / "model_repository", tmp_path / "tests"))
    return tmp_path / "model_repository", source


def test_the_source_is_recorded_relative_to_the_project_and_named_in_every_answer(scaffolded):
    repository, _ = scaffolded
    recorded = ModelSource.read(repository / "scores" / "model_source.json")
    assert recorded == ModelSource("model.onnx", "models/scores.onnx")
    assert recorded_source(Path("/elsewhere/x.onnx"), repository) == "/elsewhere/x.onnx"
    assert verify(repository / "scores" / "1") == []
    [entry] = served_identity(repository)  # what the label step puts in every answer's MODELS
    assert (entry["model"], entry["kind"], entry["source"]) == ("scores", "user", "models/scores.onnx")


def test_make_models_copies_the_file_again_on_a_fresh_clone(scaffolded):
    repository, source = scaffolded
    version_dir = repository / "scores" / "1"
    (version_dir / "model.onnx").unlink()  # git-ignored: a fresh clone has neither
    (version_dir / "manifest.json").unlink()
    [line] = copy_user_models(repository)
    assert line.startswith(f"scores: {version_dir / 'model.onnx'} from models/scores.onnx, manifest user ")
    assert (version_dir / "model.onnx").read_bytes() == source.read_bytes()
    manifest = read_manifest(version_dir)
    assert manifest is not None and (manifest.kind, manifest.source) == ("user", "models/scores.onnx")
    assert verify(version_dir) == []


def test_a_changed_source_is_copied_again_and_a_missing_one_keeps_the_copy(scaffolded):
    repository, source = scaffolded
    version_dir = repository / "scores" / "1"
    before = read_manifest(version_dir)
    model = onnx.load(str(source))
    model.doc_string = "retrained"
    onnx.save(model, source)
    copy_user_models(repository)
    after = read_manifest(version_dir)
    assert before is not None and after is not None and after.sha256 != before.sha256
    assert (version_dir / "model.onnx").read_bytes() == source.read_bytes() and verify(version_dir) == []

    source.unlink()
    kept = f"scores: kept {version_dir / 'model.onnx'}, its source {source} is missing"
    assert copy_user_models(repository) == [kept]
    (version_dir / "model.onnx").unlink()
    [line] = copy_user_models(repository)
    assert line.startswith(f"scores: MISSING {version_dir / 'model.onnx'}: its source {source} is missing")


def test_the_record_is_plain_json(scaffolded):
    repository, _ = scaffolded
    record = json.loads((repository / "scores" / "model_source.json").read_text())
    assert record == {"file": "model.onnx", "source": "models/scores.onnx", "version": "1"}
