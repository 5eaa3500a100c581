"""`make serve BLIP=... CLASSIFIER=...`: the Makefile's own serve target, run by make, replaces a stand-in build with
the weights named, serves them (every answer says kind `real`), and a later `make models` without them keeps them.

Run in this checkout with MODEL_REPOSITORY pointing at a copy of the session's tiny repository (so the real
model_repository is never touched), this virtualenv (VENV; its install stamp taken as done: make installs
nothing) and free ports. The weights are untrained (none can be fetched here): what is tested is the route from
the setting to the answer."""

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import torch

from pipeline_src import PROJECT_ROOT
from pipeline_src.model_build.classifier_export import course_mobilenet_v2
from pipeline_src.provenance.manifest import read_manifest
from pipeline_src.serving.ports import free_port, free_ports
from pipeline_src.steps.captioning import STANDIN_MARKER

VENV = Path(sys.executable).parent.parent  # the virtualenv running the tests (not resolved: a venv's python is a link)


def make(target: str, repository: Path, *settings: str) -> list[str]:
    """make TARGET in this checkout, on ``repository``, with this virtualenv and ``settings`` (NAME=value)."""
    return [
        "make",
        "--no-print-directory",
        "-C",
        str(PROJECT_ROOT),
        "-o",
        f"{VENV}/.installed-serve",  # installed already: make must not reinstall because pyproject.toml changed
        target,
        f"VENV={VENV}",
        f"MODEL_REPOSITORY={repository}",
        "BLIP_STANDIN=tiny",
        *settings,
    ]


@contextlib.contextmanager
def make_serve(repository: Path, tmp_path: Path, *settings: str):
    """`make serve` until scripts/serve.py says it is ready; yields (API URL, what make printed until then)."""
    ports, api_port = free_ports(), free_port()
    command = make(
        "serve",
        repository,
        *settings,
        "HOST=127.0.0.1",
        f"HTTP_PORT={ports.http}",
        f"GRPC_PORT={ports.grpc}",
        f"METRICS_PORT={ports.metrics}",
        f"API_PORT={api_port}",
        f"SERVE_ARGS=--work-dir {tmp_path / 'work'} --log-file {tmp_path / 'server.log'}",
    )
    # A session of its own: SIGINT to the group is Ctrl-C in the terminal that ran make.
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    printed = []
    try:
        for line in process.stdout:
            printed.append(line)
            if "Ctrl-C stops everything" in line:
                break
        assert "Ctrl-C stops everything" in printed[-1], "".join(printed[-40:])
        yield f"http://127.0.0.1:{api_port}", "".join(printed)
        os.killpg(process.pid, signal.SIGINT)
        process.wait(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@pytest.fixture
def stand_in_repository(model_repository, tmp_path) -> Path:
    """A copy of the session's tiny stand-in build: what `make serve` left before the user named real weights."""
    return shutil.copytree(
        model_repository, tmp_path / "model_repository", ignore=shutil.ignore_patterns("__pycache__")
    )


@pytest.fixture
def real_weights(model_repository, tmp_path) -> tuple[Path, Path]:
    """A BLIP snapshot as from the hub (the stand-in's, without its marker) and a course checkpoint (a state dict)."""
    snapshot = shutil.copytree(model_repository / "captioner" / "1" / "blip", tmp_path / "blip-snapshot")
    (snapshot / STANDIN_MARKER).unlink()
    checkpoint = tmp_path / "food11.pth"
    torch.manual_seed(0)
    torch.save(course_mobilenet_v2().state_dict(), checkpoint)
    return snapshot, checkpoint


def test_make_serve_builds_and_serves_the_weights_named_and_a_later_build_keeps_them(
    stand_in_repository, real_weights, tmp_path, photos
):
    snapshot, checkpoint = real_weights
    with make_serve(stand_in_repository, tmp_path, f"BLIP={snapshot}", f"CLASSIFIER={checkpoint}") as (api, printed):
        assert "captioner: building: built from BLIP stand-in 'tiny'" in printed
        assert f"asked for BLIP {snapshot}" in printed
        assert "classifier: building: built from EfficientNet-Lite0" in printed
        answer = httpx.post(f"{api}/caption", files={"photo": ("apple.jpg", photos["apple.jpg"])}, timeout=120)
        assert answer.status_code == 200, answer.text
        models = {model["model"]: model for model in answer.json()["models"]}
    assert {name: model["kind"] for name, model in models.items()} == {
        "captioner": "real",
        "classifier": "real",
        "vision_encoder": "real",
    }
    assert models["captioner"]["source"] == f"BLIP {snapshot}"
    assert answer.json()["warnings"] == []

    kept = subprocess.run(make("models", stand_in_repository), capture_output=True, text=True, check=True).stdout
    assert f"captioner: keeping what is built (real: BLIP {snapshot})" in kept
    assert "classifier: keeping what is built (real: course MobileNetV2 checkpoint food11.pth" in kept
    assert read_manifest(stand_in_repository / "captioner" / "1").source == f"BLIP {snapshot}"
