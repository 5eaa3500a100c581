"""A newcomer's step, from the scaffold to every surface, as docs/EXTENDING.md walks it (its ``image_quality``,
named apart here so that it cannot collide with a step of the repository): it reads the preprocess step's
captioner pixels and returns a brightness and a sharpness; wired into ``food11_pipeline``, its outputs reach the
Python client, the CLI, ``/caption`` and ``/openapi.json`` with no file edited but the step's own and the
ensemble's config. Then the step misspells an output: the answer fails, naming the step and the tensor."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import httpx
import pytest
from helpers import APPLE, PHOTOS_DIR, QUICK_EXIT, admin_client, post_photo, running

from food11_client import Food11Client, PipelineError, cli
from pipeline_src.contract import CORE_OUTPUTS
from pipeline_src.repository.validate import validate_repository
from pipeline_src.serving.launcher import TritonServer
from pipeline_src.serving.ports import free_ports

STEP = "walkthrough_quality"
BRIGHTNESS, SHARPNESS = NEW_OUTPUTS = ("WALKTHROUGH_BRIGHTNESS", "WALKTHROUGH_SHARPNESS")
LOGIC = f"{STEP}_step.py"
# The newcomer's logic, in place of the scaffold's example computation. The pixels are uint8, 0 to 255
# (docs/EXTENDING.md, "Which tensor to read"): brightness is their mean, sharpness the mean absolute
# difference between horizontal neighbours.
COMPUTE = (
    '''def compute(batch: Arrays, settings: ImageQualitySettings) -> dict[str, np.ndarray]:
    """Each photo's brightness and sharpness, one row per input row."""
    pixels = batch["PIXELS"].astype(np.float32)
    brightness = pixels.mean(axis=(1, 2, 3)) * settings.scale
    sharpness = np.abs(np.diff(pixels, axis=3)).mean(axis=(1, 2, 3))
    return {
        "BRIGHTNESS": brightness.reshape(-1, 1),
        "SHARPNESS": sharpness.reshape(-1, 1).astype(np.float32),
    }
'''.replace("BRIGHTNESS", BRIGHTNESS)
    .replace("SHARPNESS", SHARPNESS)
    .replace("ImageQuality", "WalkthroughQuality")
)
WIRING = f'''    {{
      model_name: "{STEP}"
      model_version: -1
      input_map {{ key: "PIXELS", value: "captioner_pixels" }}
      output_map {{ key: "{BRIGHTNESS}", value: "{BRIGHTNESS}" }}
      output_map {{ key: "{SHARPNESS}", value: "{SHARPNESS}" }}
    }},
'''


def edit(path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, f"{old!r} not found once in {path}"
    path.write_text(text.replace(old, new))


@pytest.fixture(scope="module")
def extended(model_repository, tmp_path_factory):
    """A copy of the built repository with the step scaffolded into it and wired into food11_pipeline."""
    work = tmp_path_factory.mktemp("newcomer")
    repository = shutil.copytree(model_repository, work / "model_repository")
    subprocess.run(
        [
            *(sys.executable, "-m", "pipeline_src.repository.scaffold", STEP),
            *(
                "--input",
                "PIXELS:UINT8:3,384,384",
                "--output",
                f"{BRIGHTNESS}:FP32:1",
                "--output",
                f"{SHARPNESS}:FP32:1",
            ),
            *("--self-contained", "--repository", str(repository), "--tests-dir", str(work)),
        ],
        check=True,
    )
    logic = repository / STEP / LOGIC
    text = logic.read_text()
    logic.write_text(text[: text.index("def compute(")] + COMPUTE)
    config = repository / "food11_pipeline" / "config.pbtxt"
    models_line = '  { name: "MODELS", data_type: TYPE_STRING, dims: [ 1 ] }'
    added = "".join(f',\n  {{ name: "{name}", data_type: TYPE_FP32, dims: [ 1 ] }}' for name in NEW_OUTPUTS)
    edit(config, models_line, models_line + added)
    edit(config, "  step [\n", "  step [\n" + WIRING)
    return work, repository


def test_the_step_passes_lint_its_test_and_the_validator(extended):
    work, repository = extended
    files = [
        str(repository / STEP / LOGIC),
        str(repository / STEP / "1" / "model.py"),
        str(work / f"test_step_{STEP}.py"),
    ]
    for check in (["ruff", "check", *files], ["ruff", "format", "--check", *files]):
        result = subprocess.run([sys.executable, "-m", *check], capture_output=True, text=True)
        assert result.returncode == 0, result.stdout + result.stderr
    # The generated test's first two tests hold the logic to the config; the others test the example
    # computation, which the newcomer replaced (and would replace those tests with their own).
    kept = "declares_the_configs_tensors or returns_each_output_of_the_config"
    generated = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-k",
            kept,
            str(work / f"test_step_{STEP}.py"),
        ],
        capture_output=True,
        text=True,
    )
    assert generated.returncode == 0, generated.stdout
    report = validate_repository(repository)
    assert report.ok, report.text()


@pytest.fixture(scope="module")
def server(extended, tmp_path_factory):
    _, repository = extended
    work = tmp_path_factory.mktemp("newcomer-triton")
    server = TritonServer(
        repository, work, free_ports(), extra_args=("--model-control-mode=explicit", "--load-model=*", QUICK_EXIT)
    )
    with running(server):
        yield server


def test_the_new_outputs_reach_the_client_the_cli_the_api_and_its_schema(server, api_factory, tmp_path, capsys):
    with Food11Client(server.grpc_url, timeout_s=120) as client:
        apple, orange = client.caption([APPLE, (PHOTOS_DIR / "orange.jpg").read_bytes()])
    # The repository's own outputs beyond the contract, if any, come too.
    assert apple.label == "Vegetable/Fruit" and set(NEW_OUTPUTS) <= set(apple.extra)
    assert all(isinstance(apple.extra[name], float) for name in NEW_OUTPUTS)
    assert apple.extra != orange.extra  # each photo's own values

    photo = tmp_path / "apple.jpg"
    photo.write_bytes(APPLE)
    assert cli.main(["--url", server.grpc_url, str(photo)]) == 0
    (printed,) = json.loads(capsys.readouterr().out)
    assert printed["extra"] == pytest.approx(apple.extra)

    api = api_factory(triton_url=server.grpc_url)
    answer = post_photo(api.url, APPLE)
    assert answer.status_code == 200, answer.text
    assert answer.json()["extra"] == pytest.approx(apple.extra)
    schema = httpx.get(f"{api.url}/openapi.json", timeout=30).json()
    extra = schema["components"]["schemas"]["CaptionResponse"]["properties"]["extra"]["properties"]
    assert set(NEW_OUTPUTS) <= set(extra) and not set(extra) & set(CORE_OUTPUTS)
    assert extra[BRIGHTNESS]["type"] == "number"


def test_an_output_in_another_type_than_the_configs_fails_naming_the_step_the_tensor_and_both_types(server, extended):
    _, repository = extended
    logic, cast = repository / STEP / LOGIC, ".reshape(-1, 1).astype(np.float32)"
    edit(logic, cast, ".reshape(-1, 1).astype(np.float64)")
    try:
        with admin_client(server) as raw:
            raw.load_model(STEP)
        with Food11Client(server.grpc_url, timeout_s=120) as client, pytest.raises(PipelineError) as failure:
            client.caption([APPLE])
    finally:
        edit(logic, ".reshape(-1, 1).astype(np.float64)", cast)
        with admin_client(server) as raw:
            raw.load_model(STEP)
    assert f"{STEP}: " in str(failure.value)
    assert f"output {SHARPNESS} is float64, its config declares TYPE_FP32 (float32)" in str(failure.value)


def test_a_misspelt_output_fails_naming_the_step_and_the_tensor(server, extended):

    _, repository = extended
    edit(repository / STEP / LOGIC, f'"{BRIGHTNESS}": brightness', f'"{BRIGHTNESS[:-1]}": brightness')
    with admin_client(server) as raw:
        raw.load_model(STEP)  # a new stub process, importing the changed logic
    with Food11Client(server.grpc_url, timeout_s=120) as client, pytest.raises(PipelineError) as failure:
        client.caption([APPLE])
    message = str(failure.value)
    assert f"{STEP}: " in message
    assert f"returned but not declared: {BRIGHTNESS[:-1]}" in message
    assert f"declared but not returned: {BRIGHTNESS}" in message
