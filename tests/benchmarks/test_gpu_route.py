"""The GPU route's runner (benchmarks/gpu_serve.py) against the real tritonserver, on the CPU: the Hugging
Face reference runs in a process of its own on REFERENCE_PYTHON and agrees with the served captions, and a
run stopped in the middle (SIGTERM, as a command's time limit sends it) still leaves its results so far and
Triton's log (docs/gpu.md)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks import gpu_serve
from pipeline_src import PROJECT_ROOT
from pipeline_src.profiling import perf_analyzer

GUARD_S = 600  # a bound on waiting for the runner, so that a broken run fails the test instead of hanging it


def wrapper(tmp_path: Path, body: str) -> Path:
    """An executable standing in for REFERENCE_PYTHON: records its pid in ``started``, then ``body``."""
    script = tmp_path / "reference_python"
    script.write_text(f'#!/bin/sh\necho $$ > "{tmp_path / "started"}"\n{body}\n')
    script.chmod(0o755)
    return script


def test_the_reference_runs_on_reference_python_in_its_own_process_and_matches_the_served_captions(
    model_repository, client, photos, tmp_path, monkeypatch
):
    chosen = [photos[name] for name in ("apple.jpg", "coffee.png", "chelsea.jpg")]
    served = {"in one request": client.caption(chosen), "each alone": [client.caption([p])[0] for p in chosen]}
    monkeypatch.setattr(gpu_serve, "SCRATCH", tmp_path / "scratch")
    monkeypatch.setenv(gpu_serve.REFERENCE_PYTHON, str(wrapper(tmp_path, f'exec "{sys.executable}" "$@"')))
    comparisons, where = gpu_serve.compare_with_hugging_face(model_repository, chosen, served)
    assert int((tmp_path / "started").read_text()) != os.getpid()
    assert where["python"] == sys.executable
    for how, check in comparisons.items():
        assert (check["identical"], check["total"]) == (3, 3), (how, check["differing"])
        assert check["label_differs"] == []


def run_until(
    tmp_path: Path, model_repository: Path, env: dict, stage: str, then_exists: Path | None = None
) -> tuple[dict, str, Path]:
    """benchmarks/gpu_serve.py on the CPU, sent SIGTERM once it has printed that it starts ``stage`` (and
    ``then_exists`` exists); its results, its output and its OUT."""
    out = tmp_path / "out"
    command = [sys.executable, "-m", "benchmarks.gpu_serve", "--allow-cpu", "--allow-dirty"]
    command += ["--repository", str(model_repository), "--photos", "2", "--name", "stopped"]
    environment = dict(os.environ, OUT=str(out), PYTHONUNBUFFERED="1", **env)
    runner = subprocess.Popen(
        command, cwd=PROJECT_ROOT, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert runner.stdout is not None
    lines: list[str] = []
    try:
        deadline = time.monotonic() + GUARD_S
        while f"gpu_serve: {stage}\n" not in lines:
            line = runner.stdout.readline()
            assert line or runner.poll() is None, "".join(lines)
            assert time.monotonic() < deadline, f"the runner never reached {stage}"
            lines.append(line)
        while then_exists is not None and not then_exists.exists():
            assert runner.poll() is None and time.monotonic() < deadline, "".join(lines)
            time.sleep(0.1)
        runner.send_signal(signal.SIGTERM)
        rest, _ = runner.communicate(timeout=GUARD_S)
    finally:
        runner.kill()
    return json.loads((out / "stopped.json").read_text()), "".join(lines) + rest, out


@pytest.mark.integration  # benchmarks.gpu_serve starts its own tritonserver
def test_a_run_stopped_while_a_stage_hangs_saves_its_results_so_far_and_tritons_log(model_repository, tmp_path):
    hung = wrapper(tmp_path, "exec sleep 3600")  # a reference that never answers
    result, output, out = run_until(
        tmp_path,
        model_repository,
        {gpu_serve.REFERENCE_PYTHON: str(hung)},
        "Hugging Face fp32 reference",
        then_exists=tmp_path / "started",
    )
    assert "SIGTERM" in result["errors"]["the run"], output
    assert [len(answers) for answers in result["served"].values()] == [2, 2]  # what came before the stop
    assert "captions" not in result and result["placement"]["captioner"]["instances"]
    assert "Stage 'the run' failed" in (out / "stopped.md").read_text()
    assert "TRITONBACKEND_ModelInstanceInitialize" in (out / "stopped_tritonserver.log").read_text()
    with pytest.raises(ProcessLookupError):  # the hung reference went with the run
        os.kill(int((tmp_path / "started").read_text()), 0)


@pytest.mark.integration  # benchmarks.gpu_serve starts its own tritonserver
def test_a_run_stopped_mid_sweep_keeps_the_captions_check_and_tritons_log(model_repository, tmp_path):
    try:
        perf_analyzer.library_path()
    except perf_analyzer.PerfAnalyzerMissing as exc:
        pytest.skip(f"{exc} (make test installs it)")
    result, output, out = run_until(tmp_path, model_repository, {}, "perf_analyzer")
    assert "SIGTERM" in result["errors"]["the run"], output
    assert [(check["identical"], check["total"]) for check in result["captions"].values()] == [(2, 2), (2, 2)]
    assert len(result.get("perf_analyzer", [])) < 4  # the sweep did not finish
    assert "TRITONBACKEND_ModelInstanceInitialize" in (out / "stopped_tritonserver.log").read_text()


def test_carried_reference_captions_are_used_where_their_keys_match_and_computed_where_not(
    model_repository, client, photos, tmp_path, monkeypatch
):
    """Captions written ahead (--write-reference) stand in for the reference where everything that makes a caption
    matches (no reference process runs); with other weights, their keys match nothing and the reference is made."""
    from benchmarks.lib import carried_reference

    chosen = [photos[name] for name in ("apple.jpg", "coffee.png")]
    served = {"in one request": client.caption(chosen)}
    monkeypatch.setattr(gpu_serve, "SCRATCH", tmp_path / "scratch")
    gpu_serve.write_reference(model_repository, chosen, tmp_path / "reference.json")
    carried = carried_reference.load(tmp_path / "reference.json")
    assert len(carried) == 2 * 12  # each photo with every label's prompt and none
    monkeypatch.setenv(gpu_serve.REFERENCE_PYTHON, str(wrapper(tmp_path, "exit 3")))  # a reference run would fail
    comparisons, where = gpu_serve.compare_with_hugging_face(model_repository, chosen, served, carried)
    assert where == {"carried": 2, "computed_here": 0} and not (tmp_path / "started").exists()
    assert comparisons["in one request"]["identical"] == 2
    other_weights = {key[::-1]: caption for key, caption in carried.items()}
    with pytest.raises(RuntimeError, match="exited 3"):
        gpu_serve.compare_with_hugging_face(model_repository, chosen, served, other_weights)
