"""make serve's reload watcher against the real tritonserver: scripts/serve.py, as `make serve` runs it (reload
on by default), on a copy of the test repository with a small Python step of this module's own and an ensemble
around it. The step imports its logic from a package outside its model folder, as the project's steps import
pipeline_src; Triton alone would keep the old code on a load. Each edit is served by the next answer, without a
restart, and logged; a failed reload is logged and the loaded version keeps serving (and tritonserver then takes
its whole exit timeout to stop, which serve.py says). A wiring mistake (a tensor that does not exist, a step's type
unlike its ensemble's) is refused before Triton sees it, with the validator's reason, and /caption answers
throughout; the fix is loaded at its save."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import psutil
import pytest
import tritonclient.grpc as grpcclient
from helpers import APPLE, post_photo, serve_command

from pipeline_src.serving.ports import Ports, free_ports

STEP = "reload_probe"
ENSEMBLE = "reload_probe_pipeline"
PACKAGE = "reload_probe_logic"
TENSORS = """max_batch_size: 8
input [ { name: "X", data_type: TYPE_FP32, dims: [ 1 ] } ]
output [ { name: "Y", data_type: TYPE_FP32, dims: [ 1 ] } ]
"""
MODEL_PY = """import sys

sys.path.insert(0, {source!r})  # stands in for the package's editable install: the stub ignores PYTHONPATH

import numpy as np
import triton_python_backend_utils as pb_utils

from {package}.answer import VALUE

SCALE = 1.0


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            rows = len(pb_utils.get_input_tensor_by_name(request, "X").as_numpy())
            answer = np.full((rows, 1), VALUE * SCALE, dtype=np.float32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", answer)]))
        return responses
"""
ENSEMBLE_STEP = (
    f'model_name: "{STEP}" model_version: -1 input_map {{ key: "X", value: "X" }} output_map {{ key: "Y", value: "Y" }}'
)


def add_probe(repository: Path, source: Path) -> Path:
    """The step, its ensemble and its logic package; the package's folder."""
    (repository / STEP / "1").mkdir(parents=True)
    (repository / STEP / "config.pbtxt").write_text(f'name: "{STEP}"\nbackend: "python"\n{TENSORS}')
    (repository / STEP / "1" / "model.py").write_text(MODEL_PY.format(source=str(source), package=PACKAGE))
    (repository / ENSEMBLE / "1").mkdir(parents=True)
    (repository / ENSEMBLE / "config.pbtxt").write_text(
        f'name: "{ENSEMBLE}"\nplatform: "ensemble"\n{TENSORS}ensemble_scheduling {{ step [ {{ {ENSEMBLE_STEP} }} ] }}\n'
    )
    package = source / PACKAGE
    package.mkdir(parents=True)
    (package / "__init__.py").touch()
    (package / "answer.py").write_text("VALUE = 1.0\n")
    os.utime(package / "answer.py", (1_700_000_000, 1_700_000_000))  # on a whole second: the first test edits within it
    return package


class Output:
    """serve.py's output, line by line, read in a thread; waited on with a deadline."""

    def __init__(self, process: subprocess.Popen):
        self.lines: list[str] = []
        self.reader = threading.Thread(target=lambda: self.lines.extend(process.stdout), daemon=True)
        self.reader.start()

    def wait_for(self, text: str, since: int = 0, timeout_s: float = 60.0) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if found := [line for line in self.lines[since:] if text in line]:
                return found[0].strip()
            if not self.reader.is_alive():
                break
            time.sleep(0.1)
        pytest.fail(f"serve.py did not print {text!r} within {timeout_s:.0f} s:\n{''.join(self.lines[-20:])}")


@dataclass
class Served:
    ports: Ports
    process: subprocess.Popen
    output: Output
    repository: Path
    package: Path
    api_url: str

    def caption_status(self) -> int:
        return post_photo(self.api_url, APPLE).status_code

    def answer(self, model: str) -> float:
        with grpcclient.InferenceServerClient(f"127.0.0.1:{self.ports.grpc}") as client:
            tensor = grpcclient.InferInput("X", [1, 1], "FP32")
            tensor.set_data_from_numpy(np.zeros((1, 1), dtype=np.float32))
            return float(client.infer(model, [tensor], client_timeout=30).as_numpy("Y")[0, 0])

    def tritonserver_pid(self) -> int:
        (server,) = [child for child in psutil.Process(self.process.pid).children() if child.name() == "tritonserver"]
        return server.pid


@pytest.fixture(scope="module")
def served(model_repository, tmp_path_factory):
    work = tmp_path_factory.mktemp("reload")
    repository = shutil.copytree(model_repository, work / "model_repository")
    package = add_probe(repository, work / "src")
    ports, api_port = free_ports(), free_ports().http
    # Triton 2.51 waits its whole exit timeout after a failed reload (serve.py's note): 8 s, not 30, keeps this short
    # and leaves a stop without a failed reload (about 3 s on the tests' repository) time to finish cleanly.
    extra = ("--api-port", str(api_port), "--reload-package", str(package), "--", "--exit-timeout-secs=8")
    command = serve_command(repository, work, ports, *extra)
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        output = Output(process)
        output.wait_for("Ctrl-C stops everything", timeout_s=180)
        yield Served(ports, process, output, repository, package, f"http://127.0.0.1:{api_port}")
        process.send_signal(signal.SIGTERM)
        failed = any(": failed in " in line for line in output.lines)
        code = process.wait(timeout=120)
        output.reader.join(timeout=30)  # its last lines
        assert code == (1 if failed else 0), "".join(output.lines[-30:])
        assert failed == any(line.startswith("note: a reload failed while serving") for line in output.lines)
    finally:
        if process.poll() is None:
            process.kill()


def reloaded(served: Served, text: str, since: int) -> str:
    """serve.py's line on the step's reload after ``since``; no other model was reloaded meanwhile."""
    line = served.output.wait_for(f"reload: {STEP} ({text} changed): ", since)
    others = [line for line in served.output.lines[since:] if line.startswith("reload: ") and STEP not in line]
    assert not others, others
    return line


def test_an_edit_of_code_the_step_imports_is_served_by_the_next_answer_without_a_restart(served):
    assert served.answer(STEP) == 1.0 and served.answer(ENSEMBLE) == 1.0
    tritonserver = served.tritonserver_pid()
    since = len(served.output.lines)
    logic = served.package / "answer.py"
    # Same size, same whole second as the compiled version: Python would trust its cached bytecode.
    logic.write_text("VALUE = 2.0\n")
    os.utime(logic, (1_700_000_000.5, 1_700_000_000.5))
    line = reloaded(served, f"{PACKAGE}/answer.py", since)
    assert line.startswith(f"reload: {STEP} ({PACKAGE}/answer.py changed): ok in "), line
    assert served.answer(STEP) == 2.0
    assert served.answer(ENSEMBLE) == 2.0  # Triton reloads the ensembles that use the step by itself
    assert served.tritonserver_pid() == tritonserver  # no restart


def test_an_edit_of_the_steps_model_py_is_served_by_the_next_answer(served):
    model_py = served.repository / STEP / "1" / "model.py"
    since = len(served.output.lines)
    model_py.write_text(model_py.read_text().replace("SCALE = 1.0", "SCALE = 10.0"))
    line = reloaded(served, f"{STEP}/1/model.py", since)
    assert ": ok in " in line, line
    value = float((served.package / "answer.py").read_text().split("=")[1])
    assert served.answer(STEP) == served.answer(ENSEMBLE) == 10 * value


def test_a_failed_reload_is_logged_with_tritons_reason_and_the_loaded_version_keeps_serving(served):
    logic = served.package / "answer.py"
    since = len(served.output.lines)
    logic.write_text("VALUE = 3.0\n")
    assert ": ok in " in reloaded(served, f"{PACKAGE}/answer.py", since)
    serving = served.answer(STEP)

    since = len(served.output.lines)
    logic.write_text("raise RuntimeError('broken on purpose')\n")
    line = reloaded(served, f"{PACKAGE}/answer.py", since)
    assert ": failed in " in line and "the loaded version keeps serving" in line, line
    assert "RuntimeError: broken on purpose (at " in line and f"{PACKAGE}/answer.py(1): <module>)" in line, line
    assert served.answer(STEP) == serving and served.answer(ENSEMBLE) == serving

    since = len(served.output.lines)
    logic.write_text("VALUE = 4.0\n")  # fixed: the next save loads it
    assert ": ok in " in reloaded(served, f"{PACKAGE}/answer.py", since)
    assert served.answer(STEP) == serving / 3.0 * 4.0


def refused(served: Served, model: str, since: int) -> str:
    line = served.output.wait_for(f"reload: {model} (", since)
    assert ": refused, the loaded version keeps serving: " in line, line
    return line


def test_an_ensemble_wired_to_a_tensor_that_does_not_exist_is_refused_and_caption_answers_throughout(served):
    config = served.repository / "food11_pipeline" / "config.pbtxt"
    good = config.read_text()
    wrong = good.replace('key: "CAPTION"', 'key: "CAPTIONS"', 1)
    assert wrong != good
    since = len(served.output.lines)
    config.write_text(wrong)
    line = refused(served, "food11_pipeline", since)
    assert "food11_pipeline: " in line and "'CAPTIONS'" in line, line  # the validator's reason, naming the tensor
    assert served.caption_status() == 200
    since = len(served.output.lines)
    config.write_text(good)  # the fix: loaded at its save
    assert ": ok in " in served.output.wait_for("reload: food11_pipeline (", since)
    assert served.caption_status() == 200


def test_a_step_whose_type_no_longer_matches_its_ensemble_is_refused_and_both_keep_serving(served):
    config = served.repository / STEP / "config.pbtxt"
    good = config.read_text()
    serving = served.answer(ENSEMBLE)
    since = len(served.output.lines)
    config.write_text(good.replace('name: "Y", data_type: TYPE_FP32', 'name: "Y", data_type: TYPE_FP16'))
    line = refused(served, STEP, since)
    assert "TYPE_FP16" in line or "FP16" in line, line
    assert served.answer(STEP) == served.answer(ENSEMBLE) == serving
    assert served.caption_status() == 200
    since = len(served.output.lines)
    config.write_text(good)
    assert ": ok in " in served.output.wait_for(f"reload: {STEP} (", since)
    assert served.answer(ENSEMBLE) == serving


def graph_answering_float64(path: Path) -> None:
    """A classifier graph with the right names and shapes whose logits are float64, where the config says TYPE_FP32."""
    import onnx
    from onnx import TensorProto, helper

    pixels = helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, 224, 224])
    logits = helper.make_tensor_value_info("output", TensorProto.DOUBLE, ["N", 11])
    nodes = [
        helper.make_node("GlobalAveragePool", ["input"], ["pooled"]),
        helper.make_node("Flatten", ["pooled"], ["flat"]),
        helper.make_node("MatMul", ["flat", "weights"], ["scores"]),
        helper.make_node("Cast", ["scores"], ["output"], to=TensorProto.DOUBLE),
    ]
    weights = helper.make_tensor("weights", TensorProto.FLOAT, [3, 11], [0.1] * 33)
    graph = helper.make_graph(nodes, "float64_classifier", [pixels], [logits], [weights])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))


def test_an_onnx_graph_unlike_its_config_is_refused_and_caption_answers_throughout(served):
    graph = served.repository / "classifier" / "1" / "model.onnx"
    good = graph.read_bytes()
    since = len(served.output.lines)
    graph_answering_float64(graph)
    line = refused(served, "classifier", since)
    assert "classifier: " in line, line
    assert served.caption_status() == 200
    since = len(served.output.lines)
    graph.write_bytes(good)
    assert ": ok in " in served.output.wait_for("reload: classifier (", since)
    assert served.caption_status() == 200
