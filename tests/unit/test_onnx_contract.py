"""An ONNX step's graph against its config when it loads (pipeline_src/steps/onnx_contract.py), on real graphs and
ONNX Runtime sessions: the mistakes a user made with a model file of their own are refused with the difference."""

from __future__ import annotations

import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from pipeline_src.steps.onnx_contract import GraphConfigMismatch, check_graph_against_config, graph_mismatches


def colourfulness_session(output_type: int = TensorProto.FLOAT, output_shape=("N", 1)) -> ort.InferenceSession:
    """A tiny graph as a user's step would have: FP32 pixels in, one score per photo out (a mean over axes 1-3)."""
    pixels = helper.make_tensor_value_info("PIXELS", TensorProto.FLOAT, ["N", 3, 8, 8])
    score = helper.make_tensor_value_info("SCORE", output_type, list(output_shape))
    axes = helper.make_tensor("axes", TensorProto.INT64, [3], [1, 2, 3])
    keep = len(output_shape) > 1
    nodes = [helper.make_node("ReduceMean", ["PIXELS", "axes"], ["mean"], keepdims=0)]
    if keep:
        nodes.append(helper.make_node("Unsqueeze", ["mean", "one"], ["kept"]))
    nodes.append(helper.make_node("Cast", ["kept" if keep else "mean"], ["SCORE"], to=output_type))
    initializers = [axes, *([helper.make_tensor("one", TensorProto.INT64, [1], [1])] if keep else [])]
    graph = helper.make_graph(nodes, "colourfulness", [pixels], [score], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


CONFIG = {
    "name": "colourfulness",
    "max_batch_size": 8,
    "input": [{"name": "PIXELS", "data_type": "TYPE_FP32", "dims": [3, 8, 8]}],
    "output": [{"name": "SCORE", "data_type": "TYPE_FP32", "dims": [1]}],
}


def with_output(data_type: str) -> dict:
    return {**CONFIG, "output": [{**CONFIG["output"][0], "data_type": data_type}]}


def mismatches(session: ort.InferenceSession, config: dict) -> list[str]:
    return graph_mismatches(session.get_inputs(), session.get_outputs(), config)


def test_a_graph_that_is_its_config_loads():
    check_graph_against_config(colourfulness_session(), CONFIG)


def test_an_fp32_output_under_type_fp16_is_refused_naming_both_types():
    (problem,) = mismatches(colourfulness_session(), with_output("TYPE_FP16"))
    assert problem == "output 'SCORE': the graph has element type TYPE_FP32, the config says TYPE_FP16"


def test_a_float64_output_under_type_fp32_is_refused():
    (problem,) = mismatches(colourfulness_session(TensorProto.DOUBLE), CONFIG)
    assert "element type TYPE_FP64, the config says TYPE_FP32" in problem


def test_an_output_of_one_value_per_batch_is_refused_where_the_config_says_one_row_per_photo():
    (problem,) = mismatches(colourfulness_session(output_shape=("N",)), CONFIG)
    assert problem == "output 'SCORE': the graph has shape ['N'], the config [1] after the batch dimension"


def test_wrong_names_and_undeclared_inputs_are_each_named():
    config = {**CONFIG, "input": [{"name": "IMAGE", "data_type": "TYPE_FP32", "dims": [3, 8, 8]}]}
    problems = mismatches(colourfulness_session(), config)
    assert "config input 'IMAGE' is not an input of the ONNX graph (its inputs: 'PIXELS')" in problems
    assert any("has input(s) 'PIXELS' the config does not declare" in problem for problem in problems)


def test_the_refusal_names_the_step_the_file_and_every_difference():
    with pytest.raises(GraphConfigMismatch) as refused:
        check_graph_against_config(colourfulness_session(TensorProto.DOUBLE), with_output("TYPE_FP16"), "1/model.onnx")
    assert str(refused.value).startswith("colourfulness: 1/model.onnx does not match config.pbtxt: output 'SCORE'")
