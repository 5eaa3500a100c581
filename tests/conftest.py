"""Session fixtures: photos, a model repository built with the tiny stand-ins, and one real
tritonserver serving it on free ports for the whole test session."""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

import pytest
import skimage.data
from PIL import Image

from helpers import encode
from pipeline_src.launcher import PROJECT_ROOT, Ports, TritonServer

PHOTOS_DIR = Path(__file__).parent / "photos"
FRUIT_PHOTOS = ("apple.jpg", "orange.jpg", "fruits.jpg")


@pytest.fixture(scope="session")
def photos() -> dict[str, bytes]:
    """Real photos in several formats: OpenCV's fruit JPEGs, scikit-image's photos as PNG/JPEG/WebP."""
    found = {name: (PHOTOS_DIR / name).read_bytes() for name in FRUIT_PHOTOS}
    found["coffee.png"] = encode(Image.fromarray(skimage.data.coffee()), "PNG")
    found["chelsea.jpg"] = encode(Image.fromarray(skimage.data.chelsea()), "JPEG", quality=90)
    found["astronaut.webp"] = encode(Image.fromarray(skimage.data.astronaut()), "WEBP", quality=90)
    return found


@pytest.fixture(scope="session")
def model_repository(tmp_path_factory) -> Path:
    """A copy of model_repository/ (configs and model.py files) with its model files built by the
    project's own build command: the offline-default classifier and the tiny BLIP stand-in."""
    from pipeline_src.model_build.cli import main as build_models

    repository = tmp_path_factory.mktemp("repo") / "model_repository"
    shutil.copytree(PROJECT_ROOT / "model_repository", repository,
                    ignore=shutil.ignore_patterns("model.onnx", "blip", "__pycache__"))
    build_models(["--repository", str(repository), "--blip-standin", "tiny"])
    return repository


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def free_ports() -> Ports:
    return Ports(http=free_port(), grpc=free_port(), metrics=free_port())


@pytest.fixture(scope="session")
def triton(model_repository, tmp_path_factory) -> TritonServer:
    """One real tritonserver for the session. Explicit model control lets tests unload the captioner
    (a real fault) and reload a step with another config."""
    work_dir = tmp_path_factory.mktemp("triton")
    server = TritonServer(model_repository, work_dir, free_ports(),
                          extra_args=("--model-control-mode=explicit", "--load-model=*"))
    with server:
        yield server
    print(f"tritonserver log: {server.log_file}")


@pytest.fixture(scope="session")
def client(triton):
    from food11_client import Food11Client

    with Food11Client(triton.grpc_url, timeout_s=120) as food11:
        yield food11


@pytest.fixture(scope="session")
def triton_grpc(triton):
    """A raw tritonclient for calling single steps and managing models."""
    import tritonclient.grpc as grpcclient

    raw = grpcclient.InferenceServerClient(triton.grpc_url)
    yield raw
    raw.close()
