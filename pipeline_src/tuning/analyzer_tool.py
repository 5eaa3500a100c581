"""Triton Model Analyzer, installed as a tool apart in ``build/model_analyzer/`` (its own virtualenv), so that its
dependencies (protobuf 6, numpy 2, numba, ...) never enter the product's. It drives tritonserver and perf_analyzer
as subprocesses, the project's own (``server_launch``). 1.46.0: PyPI lacks 1.45.0, the release paired with
tritonserver 2.51, and what 1.46.0 asks of the server is the same in 2.51 (docs/profiling.md, "Tuning each step").
"""

from __future__ import annotations

import subprocess
import sys

from pipeline_src import PROJECT_ROOT

VERSION = "1.46.0"
REQUIREMENT = f"triton-model-analyzer=={VERSION}"
TOOL_DIR = PROJECT_ROOT / "build" / "model_analyzer"
PYTHON = TOOL_DIR / "bin" / "python"
BINARY = TOOL_DIR / "bin" / "model-analyzer"  # there once install() has run, as food11-tune does first


def installed_version() -> str | None:
    """The version in the tool virtualenv, or None when there is none."""
    if not PYTHON.exists():
        return None
    done = subprocess.run(
        [str(PYTHON), "-c", "import importlib.metadata as m; print(m.version('triton-model-analyzer'))"],
        capture_output=True,
        text=True,
    )
    return done.stdout.strip() if done.returncode == 0 else None


def install() -> str:
    """The pinned Model Analyzer in its own virtualenv (from PyPI; a few seconds when already there)."""
    if installed_version() == VERSION:
        return VERSION
    if not PYTHON.exists():
        subprocess.run([sys.executable, "-m", "venv", str(TOOL_DIR)], check=True)
    print(f"installing {REQUIREMENT} into {TOOL_DIR} (about half a minute)", flush=True)
    subprocess.run([str(PYTHON), "-m", "pip", "install", "--quiet", REQUIREMENT], check=True)
    return VERSION
