"""The real tritonserver serving the repository from a virtualenv that holds the ``steps`` extra alone, as
NVIDIA's Triton image holds it (no tritonclient, no torch, no web stack): every step loads, a photo is
labelled and captioned, and every answer names its models."""

from __future__ import annotations

import subprocess
import sys

import pytest
from helpers import APPLE, running

from food11_client import Food11Client
from pipeline_src import PROJECT_ROOT
from pipeline_src.serving.launcher import TritonServer
from pipeline_src.serving.ports import free_ports


@pytest.fixture(scope="module")
def steps_python(tmp_path_factory):
    """A new virtualenv with this project installed (not editable) with its ``steps`` extra, nothing else."""
    venv = tmp_path_factory.mktemp("steps-env") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run(
        [
            *(str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"),
            *("-c", str(PROJECT_ROOT / "constraints.txt"), f"{PROJECT_ROOT}[steps]"),
        ],
        check=True,
        timeout=900,
    )
    return python


def test_the_steps_extra_alone_serves_the_pipeline(steps_python, model_repository, tmp_path):
    installed = subprocess.run(
        [str(steps_python), "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True, check=True
    ).stdout.lower()
    assert "tritonclient" not in installed and "torch" not in installed and "fastapi" not in installed

    server = TritonServer(model_repository, tmp_path / "triton", free_ports(), steps_python=steps_python)
    with running(server), Food11Client(server.grpc_url, timeout_s=120) as client:
        (result,) = client.caption([APPLE])
        manifests = client.manifests()
    assert result.label == "Vegetable/Fruit"
    assert result.caption_status == "ok" and result.caption.startswith("a photo of vegetable/fruit")
    assert {model.model for model in result.models} == {"classifier", "vision_encoder", "captioner"}
    assert {manifest["model"] for manifest in manifests} == {"classifier", "vision_encoder", "captioner"}
