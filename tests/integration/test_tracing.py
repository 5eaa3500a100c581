"""Triton's own request tracing (trace extension, `TIMESTAMPS` level) through the whole DAG.

The session's tritonserver is started with a trace file (`--trace-config triton,file=...`) and tracing
OFF. The test turns tracing on for the ensemble alone, for exactly one request (`trace_count` 1), and
off again in a `finally`, so the other tests sharing the server are never traced.
"""

import json
import time
import uuid
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient

from pipeline_src.profiling.trace_summary import read_traces, summary_lines
from pipeline_src.repository.loading import parse_config

ENSEMBLE = "food11_pipeline"
# One traced request, written to its own indexed file (`<trace_file>.<n>`) as soon as it completes.
TRACE_ONE_REQUEST = {"trace_level": ["TIMESTAMPS"], "trace_rate": "1", "trace_count": "1", "log_frequency": "1"}
# None clears a model setting; with all cleared the ensemble falls back to the global one (OFF).
BACK_TO_GLOBAL = dict.fromkeys(TRACE_ONE_REQUEST)


def _settings(triton_grpc, model_name="") -> dict[str, list[str]]:
    response = triton_grpc.get_trace_settings(model_name=model_name, as_json=True)
    return {name: setting.get("value", []) for name, setting in response["settings"].items()}


def _wait_for_new_trace(trace_file: Path, known: set[Path], timeout_s: float = 60.0) -> Path:
    """The trace file Triton writes once the traced request is released (which can be just after the
    client has its response); a file still being written is read again."""
    deadline = time.monotonic() + timeout_s
    while True:
        for path in sorted(set(trace_file.parent.glob(f"{trace_file.name}.*")) - known):
            try:
                json.loads(path.read_text())
                return path
            except json.JSONDecodeError:
                pass
        if time.monotonic() > deadline:
            raise AssertionError(f"no new trace file next to {trace_file} after {timeout_s:.0f} s")
        time.sleep(0.1)


def test_one_traced_request_shows_every_step_with_the_captioner_under_the_bls_step(
    triton_grpc, photos, model_repository
):
    # The ensemble's own steps, as its config lists them (a step added to it is traced too).
    steps_declared = [
        step.model_name for step in parse_config(model_repository / ENSEMBLE / "config.pbtxt").ensemble_scheduling.step
    ]
    trace_file = Path("".join(_settings(triton_grpc)["trace_file"]))
    assert trace_file.name, "tritonserver needs --trace-config triton,file=<path> (tests/servers.py)"
    assert _settings(triton_grpc, ENSEMBLE)["trace_level"] == ["OFF"]
    known = set(trace_file.parent.glob(f"{trace_file.name}.*"))
    request_id = f"trace-test-{uuid.uuid4().hex}"
    image = grpcclient.InferInput("IMAGE", [1, 1], "BYTES")
    image.set_data_from_numpy(np.array([[photos["apple.jpg"]]], dtype=np.object_))

    try:
        triton_grpc.update_trace_settings(model_name=ENSEMBLE, settings=TRACE_ONE_REQUEST)
        response = triton_grpc.infer(ENSEMBLE, [image], request_id=request_id)
    finally:
        triton_grpc.update_trace_settings(model_name=ENSEMBLE, settings=BACK_TO_GLOBAL)
    assert _settings(triton_grpc, ENSEMBLE)["trace_level"] == ["OFF"]
    assert response.as_numpy("CAPTION_STATUS")[0, 0] == b"ok"

    trace_path = _wait_for_new_trace(trace_file, known)
    traces = read_traces(trace_path)
    (root_id,) = [i for i, t in traces.items() if (t.get("model_name"), t.get("request_id")) == (ENSEMBLE, request_id)]
    assert traces[root_id]["parent_id"] == 0
    steps = {t["model_name"]: i for i, t in traces.items() if t.get("parent_id") == root_id}
    assert sorted(steps) == sorted(steps_declared), f"children of the ensemble's trace: {sorted(steps)}"
    assert all(traces[steps[step]]["request_id"] == request_id for step in steps_declared)
    # The BLS call: a child of caption_with_label's trace, not an orphan (no trace) nor a root.
    captioners = [i for i, t in traces.items() if t.get("model_name") == "captioner"]
    assert captioners, f"no captioner in the trace: {sorted(t.get('model_name') for t in traces.values())}"
    (captioner_id,) = captioners
    assert traces[captioner_id]["parent_id"] == steps["caption_with_label"]
    # One request: the ensemble's trace, one per step, and the captioner's.
    assert len(traces) == len(steps_declared) + 2, [t.get("model_name") for t in traces.values()]

    for step_id in [*steps.values(), captioner_id]:
        assert {"REQUEST_START", "QUEUE_START", "COMPUTE_START", "COMPUTE_END", "REQUEST_END"} <= set(
            traces[step_id]["ns"]
        ), traces[step_id]
    # Causal order only (no durations): every step starts inside the ensemble's request, and the
    # captioner is asked and runs while caption_with_label computes, since that step waits for it.
    ensemble = traces[root_id]["ns"]
    bls = traces[steps["caption_with_label"]]["ns"]
    captioner = traces[captioner_id]["ns"]
    for step_id in steps.values():
        assert ensemble["REQUEST_START"] <= traces[step_id]["ns"]["REQUEST_START"] <= ensemble["REQUEST_END"]
    assert bls["COMPUTE_START"] <= captioner["REQUEST_START"] <= captioner["COMPUTE_START"] <= bls["COMPUTE_END"]

    # scripts/trace_summary.py shows the same tree: the captioner one level under caption_with_label.
    lines = summary_lines(traces)
    names = [line.split()[0] for line in lines[1:]]
    # Steps that run side by side may start in either order: the tree, not the order, is fixed.
    assert names[0] == ENSEMBLE and sorted(names[1:]) == sorted([*steps_declared, "captioner"]), lines
    bls_line = next(index for index, line in enumerate(lines) if line.startswith("  caption_with_label"))
    assert lines[bls_line + 1].startswith("    captioner"), lines
