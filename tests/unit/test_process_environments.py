"""Each process imports only what its own extra installs (pyproject.toml): every entry point, every step's
``model.py`` and the API, each run where every other installed distribution is hidden (tests/only_extra.py).
The development virtualenv holds every extra at once; without this, a step importing tritonclient (which
NVIDIA's Triton image lacks) would pass every other test and fail to load in the container."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import tomllib

from pipeline_src import PROJECT_ROOT

ONLY_EXTRA = Path(__file__).resolve().parent.parent / "only_extra.py"
STEP_MODELS = sorted(PROJECT_ROOT.glob("model_repository/*/1/model.py"))

# The extras each command's process installs. A new command must say which: the test below fails until it does.
COMMAND_EXTRAS = {
    "food11-caption": "client",
    "food11-api": "api",
    "food11-validate": "client",
    "food11-new-step": "client",
    "food11-build-models": "build,steps",  # steps: ONNX Runtime, which checks what it builds
    "food11-perf-analyzer": "client",  # it asks the server whether a model answers from its cache
    "food11-tune": "server,steps,client",  # it starts tritonserver, feeds perf_analyzer the steps' own outputs
    "food11-serve": "server,steps,api",
}
# The profiling scripts (docs/profiling.md): perf_input runs the steps' own code; trace_summary reads a JSON file.
SCRIPT_EXTRAS = {"perf_input.py": "client,steps", "trace_summary.py": ""}


def run_with_only(extras: str, code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ONLY_EXTRA), extras, "-c", code], capture_output=True, text=True, timeout=300
    )


def project_commands() -> dict[str, str]:
    """pyproject.toml's [project.scripts], as the source has them (an installed copy may be older)."""
    return tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]["scripts"]


def command_run(command: str) -> tuple[str, str]:
    """(extras, code): the command's entry point imported with its extras alone."""
    module, _, function = project_commands()[command].partition(":")
    return COMMAND_EXTRAS[command], f"import {module}; {module}.{function}"


def step_run(model_py: Path) -> tuple[str, str]:
    return "steps", f"import runpy; runpy.run_path({str(model_py)!r})"


API_APP_RUN = ("api", "from food11_api.app import create_app; create_app()")


@pytest.fixture(scope="module")
def ran_alone() -> dict[tuple[str, str], subprocess.CompletedProcess]:
    """Every run the tests below check, started side by side: each is a Python process of its own that spends
    its half second importing, so they share the cores rather than wait for one another."""
    runs = [
        *(command_run(command) for command in sorted(set(COMMAND_EXTRAS) & set(project_commands()))),
        *(step_run(model_py) for model_py in STEP_MODELS),
        API_APP_RUN,
    ]
    with ThreadPoolExecutor(max_workers=os.cpu_count()) as pool:
        return dict(zip(runs, pool.map(lambda run: run_with_only(*run), runs)))


def test_every_command_names_its_extras():
    assert set(project_commands()) == set(COMMAND_EXTRAS), "give each [project.scripts] entry its extras here"


@pytest.mark.parametrize("command", sorted(COMMAND_EXTRAS))
def test_each_command_imports_with_its_extras_alone(command, ran_alone):
    result = ran_alone[command_run(command)]
    assert result.returncode == 0, f"{command} with only [{COMMAND_EXTRAS[command]}]:\n{result.stderr}"


@pytest.mark.parametrize("script", sorted(SCRIPT_EXTRAS))
def test_each_profiling_script_imports_with_its_extras_alone(script):
    path = PROJECT_ROOT / "scripts" / script
    result = run_with_only(SCRIPT_EXTRAS[script], f"import runpy; runpy.run_path({str(path)!r}, run_name='imported')")
    assert result.returncode == 0, f"scripts/{script} with only [{SCRIPT_EXTRAS[script]}]:\n{result.stderr}"


@pytest.mark.parametrize("model_py", STEP_MODELS, ids=[path.parts[-3] for path in STEP_MODELS])
def test_each_step_imports_with_the_steps_extra_alone(model_py, ran_alone):
    result = ran_alone[step_run(model_py)]
    assert result.returncode == 0, f"{model_py} with only [steps]:\n{result.stderr}"


def test_the_triton_images_command_imports_with_the_extras_the_image_installs():
    """Dockerfile.triton installs the steps' extra and the supervisor's: its command (the supervisor) runs there."""
    result = run_with_only("steps,supervisor", "import pipeline_src.serving.triton_container")
    assert result.returncode == 0, result.stderr


def test_the_api_app_builds_with_the_api_extra_alone(ran_alone):
    result = ran_alone[API_APP_RUN]
    assert result.returncode == 0, result.stderr


def test_a_module_outside_the_extra_is_refused():
    """The runner itself: tritonclient is the client's, not the steps'."""
    result = run_with_only("steps", "import tritonclient.grpc")
    assert result.returncode != 0
    assert "not by the 'steps' extra" in result.stderr
