"""The batching core every step shares: requests stacked, computed once, split back in order, and a
compute that breaks the output contract refused rather than answered with another request's rows."""

import re

import numpy as np
import pytest

from pipeline_src.steps.batching import BatchContractError, compute_stacked


def rows(*values):
    return np.array(values, dtype=np.float32).reshape(-1, 1)


def test_each_request_gets_its_own_rows_back_in_order():
    requests = [{"X": rows(1, 2)}, {"X": rows(3)}, {"X": rows(4, 5, 6)}]
    calls = []

    def double(batch):
        calls.append(len(batch["X"]))
        return {"Y": batch["X"] * 2, "Z": batch["X"].astype(str).astype(np.object_)}

    answers = compute_stacked(requests, double, ["Y", "Z"])
    assert calls == [6]  # computed once, over every request's rows
    assert [answer["Y"].ravel().tolist() for answer in answers] == [[2, 4], [6], [8, 10, 12]]
    assert [answer["Z"].ravel().tolist() for answer in answers] == [["1.0", "2.0"], ["3.0"], ["4.0", "5.0", "6.0"]]


def test_several_inputs_are_stacked_input_by_input():
    requests = [{"A": rows(1), "B": rows(10)}, {"A": rows(2, 3), "B": rows(20, 30)}]
    answers = compute_stacked(requests, lambda batch: {"SUM": batch["A"] + batch["B"]}, ["SUM"])
    assert [answer["SUM"].ravel().tolist() for answer in answers] == [[11], [22, 33]]


@pytest.mark.parametrize("returned_rows", [5, 7])
def test_a_compute_returning_another_row_count_is_refused(returned_rows):
    # Without the check, np.split hands the last request the missing or extra rows, silently.
    requests = [{"X": rows(1, 2, 3)}, {"X": rows(4, 5, 6)}]
    with pytest.raises(BatchContractError, match=rf"output Y has {returned_rows} rows for 6 input rows"):
        compute_stacked(requests, lambda batch: {"Y": np.zeros((returned_rows, 1))}, ["Y"])


def test_an_undeclared_output_name_is_named():
    with pytest.raises(BatchContractError) as error:
        compute_stacked([{"X": rows(1)}], lambda batch: {"BRIGHTNES": batch["X"]}, ["BRIGHTNESS"])
    assert "returned but not declared: BRIGHTNES" in str(error.value)
    assert "declared but not returned: BRIGHTNESS" in str(error.value)


def test_a_scalar_output_is_refused():
    with pytest.raises(BatchContractError, match="output Y has a scalar"):
        compute_stacked([{"X": rows(1)}], lambda batch: {"Y": np.float32(1)}, ["Y"])


@pytest.mark.parametrize(
    ("returned", "declared", "message"),
    [
        (np.zeros((1, 1), dtype=np.int64), "TYPE_INT32", "output Y is int64, its config declares TYPE_INT32 (int32)"),
        (np.zeros((1, 1)), "TYPE_FP32", "output Y is float64, its config declares TYPE_FP32 (float32)"),
        (np.zeros((1, 1), dtype=np.float32), "TYPE_STRING", "output Y is float32, its config declares TYPE_STRING"),
    ],
)
def test_an_output_in_another_type_than_the_configs_is_named_with_both_types(returned, declared, message):
    # Without the check Triton's Python backend sends the array's own type: an INT64 where clients expect INT32.
    with pytest.raises(BatchContractError, match="^" + re.escape(message)):
        compute_stacked([{"X": rows(1)}], lambda batch: {"Y": returned}, {"Y": declared})


def test_outputs_in_the_configs_types_pass_bytes_as_objects_or_fixed_size():
    declared = {"F": "TYPE_FP32", "I": "TYPE_INT32", "O": "TYPE_STRING", "S": "TYPE_STRING", "B": "TYPE_BF16"}
    outputs = {
        "F": rows(1),
        "I": np.ones((1, 1), dtype=np.int32),
        "O": np.array([[b"x"]], dtype=np.object_),
        "S": np.array([[b"x"]]),
        "B": np.ones((1, 1), dtype=np.float32),  # a type numpy does not hold: left to Triton
    }
    (answer,) = compute_stacked([{"X": rows(1)}], lambda batch: outputs, declared)
    assert set(answer) == set(declared)
