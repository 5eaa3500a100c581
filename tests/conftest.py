"""Fixtures shared by every test folder; shared constants and helpers are in helpers.py.

tests/unit needs no server, no socket and no subprocess server: the pipeline's code, its configs and the
model files a tiny build makes (the ``model_repository`` fixture below, a few seconds). tests/integration
starts the real things: one tritonserver for the session, the API on real sockets, a browser,
``scripts/serve.py``; their fixtures are in servers.py (a plugin, so that tests/benchmarks shares the same
server). Every test in tests/integration is marked ``integration``, and so is a test in any other folder that uses
one of those fixtures: ``make test-unit`` (``pytest -m "not integration"``) runs every other test, in under a minute.
tests/benchmarks tests the measurement package (benchmarks/) and the GPU route's staging (scripts/device_*.py),
apart from the product's tests."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import skimage.data
from helpers import FRUIT_PHOTOS, PHOTOS_DIR, encode
from PIL import Image

pytest_plugins = ["servers"]  # tests/servers.py: the session's tritonserver and API, for every folder

# servers.py's fixtures that start a server: a test using one, in any folder, is an integration test, so that
# make test-unit never starts one; so is every test in tests/integration (those without a server fixture start
# processes of their own: the container's command, pip, a scaffolded step's tests). Elsewhere a test starting a
# server of its own says @pytest.mark.integration itself.
SERVER_FIXTURES = frozenset({"triton", "client", "triton_grpc", "api_factory", "api", "real_api"})
INTEGRATION_DIR = Path(__file__).parent / "integration"


@pytest.hookimpl(tryfirst=True)  # before -m deselects
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if SERVER_FIXTURES.intersection(getattr(item, "fixturenames", ())) or item.path.is_relative_to(INTEGRATION_DIR):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def photos() -> dict[str, bytes]:
    """Real photos in several formats: OpenCV's fruit JPEGs, scikit-image's photos as PNG/JPEG/WebP."""
    found = {name: (PHOTOS_DIR / name).read_bytes() for name in FRUIT_PHOTOS}
    found["coffee.png"] = encode(Image.fromarray(skimage.data.coffee()), "PNG")
    found["chelsea.jpg"] = encode(Image.fromarray(skimage.data.chelsea()), "JPEG", quality=90)
    found["astronaut.webp"] = encode(Image.fromarray(skimage.data.astronaut()), "WEBP", quality=90)
    return found


# The BLS step's instances in the tests' repository. Triton 2.51 stops a Python step's instances one after another,
# about 1.2 s each: at the shipped 8, every graceful stop of a server took 10 s (most of a scripts/serve.py test).
# Two still run requests side by side; tests/unit/test_model_configs.py holds the shipped config to its count.
TEST_BLS_INSTANCES = 2


@pytest.fixture(scope="session")
def model_repository(tmp_path_factory) -> Path:
    """A copy of model_repository/ (configs and model.py files) with its model files built by the
    project's own build command: the offline-default classifier and the tiny BLIP stand-in, with the int8
    twins that the precision tests need and the fp16 twins of the captioner's fast mode. caption_with_label
    runs TEST_BLS_INSTANCES instances; every other setting is the shipped one."""
    from pipeline_src.model_build.cli import build_repository_copy

    repository = build_repository_copy(
        tmp_path_factory.mktemp("repo") / "model_repository", models=["--blip-standin", "tiny", "--int8", "--fast"]
    )
    config = repository / "caption_with_label" / "config.pbtxt"
    text, changed = re.subn(
        r"instance_group \[ \{ count: \d+, kind: KIND_CPU \} \]",
        f"instance_group [ {{ count: {TEST_BLS_INSTANCES}, kind: KIND_CPU }} ]",
        config.read_text(),
    )
    assert changed == 1, f"{config}: its instance_group line changed; set TEST_BLS_INSTANCES anew"
    config.write_text(text)
    return repository


@pytest.fixture(scope="session", autouse=True)
def subprocess_pytest_without_plugins():
    """The pytest runs the tests start (a scaffolded step's generated tests, in a process of their own) load no
    entry-point plugins: this virtualenv's hypothesis, schemathesis and anyio cost 1.6 s a start, and no
    generated test uses them. This process has loaded its plugins already."""
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    yield
    os.environ.pop("PYTEST_DISABLE_PLUGIN_AUTOLOAD", None)
