"""benchmarks/lib/mps.py, the --mps of the GPU runner, against a stand-in for nvidia-cuda-mps-control (no GPU
here): the daemon started with its own pipe folder in the environment every later CUDA process inherits, its
servers and clients read back, stopped afterwards, and the environment restored; a machine without MPS refused
by name. The report says whether the figures are MPS's."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from benchmarks.gpu_serve_report import _mps_sentence
from benchmarks.lib import mps

# The control daemon's protocol as far as the runner uses it: `-d` starts it, commands come on stdin.
FAKE_CONTROL = """#!/bin/sh
state="$CUDA_MPS_PIPE_DIRECTORY/state"
if [ "$1" = "-d" ]; then echo started > "$state"; echo "$CUDA_MPS_LOG_DIRECTORY" > "$state.log"; exit 0; fi
[ -f "$state" ] || { echo "Cannot find MPS control daemon process" >&2; exit 1; }
read -r command argument
case "$command" in
  get_server_list) echo 4242 ;;
  get_client_list) [ "$argument" = 4242 ] && printf '101\\n102\\n103\\n' ;;
  quit) echo quit > "$state" ;;
esac
"""


@pytest.fixture
def fake_control(tmp_path, monkeypatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    control = bin_dir / mps.CONTROL
    control.write_text(FAKE_CONTROL)
    control.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv(mps.PIPE_ENV, raising=False)
    return control


def test_the_daemon_runs_for_the_block_with_its_folders_in_the_environment_then_quits(fake_control):
    with mps.mps_daemon() as folder:
        assert os.environ[mps.PIPE_ENV] == str(folder / "pipe")
        assert (folder / "pipe" / "state.log").read_text().strip() == str(folder / "log")
        assert mps.state() == {"4242": [101, 102, 103]}
    assert (folder / "pipe" / "state").read_text().strip() == "quit"
    assert mps.PIPE_ENV not in os.environ and mps.LOG_ENV not in os.environ


def test_a_machine_without_mps_is_refused_by_name(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(mps.MpsUnavailable, match="nvidia-cuda-mps-control is not on PATH"), mps.mps_daemon():
        pass


def test_the_report_says_whose_figures_they_are():
    assert "MPS off" in _mps_sentence({})
    assert "MPS on**: one MPS server, 3 client" in _mps_sentence({"requested": True, "servers": {"1": [1, 2, 3]}})
    assert "not MPS's figures" in _mps_sentence({"requested": True, "servers": {}})
