"""A text step after the captioning step, from the scaffold to every caller, as docs/EXTENDING.md walks it
("A text step after the caption"): it reads caption_with_label's CAPTION_AFTER_PROMPT (the caption's own words,
no ensemble output) and returns tags (BYTES) and a word count (INT32). No file is edited but the step's own and
the ensemble's config. A caller naming only its outputs gets them; one naming only the label pays no caption.

The same step wired the tempting way, reading the ensemble outputs CAPTION and LABEL, shows why not: the
validator warns, and the real Triton fails exactly the calls the validator names ('unexpected deadlock')."""

from __future__ import annotations

import shutil
import subprocess
import sys

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from helpers import APPLE, QUICK_EXIT, admin_client, post_photo, running
from tritonclient.utils import InferenceServerException

from food11_client import Food11Client
from pipeline_src.ensemble_pruning import Step, produced, pruned_steps
from pipeline_src.repository.loading import parse_config
from pipeline_src.repository.validate import validate_repository
from pipeline_src.serving.launcher import TritonServer
from pipeline_src.serving.ports import free_ports

STEP = "walkthrough_tags"
TAGS, WORDS = NEW_OUTPUTS = ("WALKTHROUGH_TAGS", "WALKTHROUGH_WORDS")
MISWIRED = "food11_pipeline_miswired"  # the same step reading ensemble outputs, in an ensemble of its own
# The newcomer's logic, in place of the scaffold's example computation.
COMPUTE = f'''def compute(batch: Arrays, settings: WalkthroughTagsSettings) -> dict[str, np.ndarray]:
    """Each caption's words of at least ``scale`` letters, comma-separated, and how many words it has."""
    words = [text.decode("utf-8").split() for text in batch["WORDS"].reshape(-1)]
    tags = [",".join(word for word in row if len(word) >= settings.scale) for row in words]
    return {{
        "{TAGS}": np.array([tag.encode("utf-8") for tag in tags], dtype=np.object_).reshape(-1, 1),
        "{WORDS}": np.array([len(row) for row in words], dtype=np.int32).reshape(-1, 1),
    }}
'''


def step_wiring(reads: str) -> str:
    return f"""    {{
      model_name: "{STEP}"
      model_version: -1
      input_map {{ key: "WORDS", value: "{reads}" }}
      output_map {{ key: "{TAGS}", value: "{TAGS}" }}
      output_map {{ key: "{WORDS}", value: "{WORDS}" }}
    }},
"""


def edit(path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, f"{old!r} not found once in {path}"
    path.write_text(text.replace(old, new))


def add_outputs(config) -> None:
    models_line = '  { name: "MODELS", data_type: TYPE_STRING, dims: [ 1 ] }'
    edit(
        config,
        models_line,
        models_line
        + f',\n  {{ name: "{TAGS}", data_type: TYPE_STRING, dims: [ 1 ] }}'
        + f',\n  {{ name: "{WORDS}", data_type: TYPE_INT32, dims: [ 1 ] }}',
    )


@pytest.fixture(scope="module")
def extended(model_repository, tmp_path_factory):
    """A copy of the built repository with the step scaffolded, wired into food11_pipeline as EXTENDING says,
    and into a copy of it (MISWIRED) reading the ensemble output CAPTION instead."""
    work = tmp_path_factory.mktemp("text_step")
    repository = shutil.copytree(model_repository, work / "model_repository")
    subprocess.run(
        [
            *(sys.executable, "-m", "pipeline_src.repository.scaffold", STEP),
            *("--input", "WORDS:BYTES:1", "--output", f"{TAGS}:BYTES:1", "--output", f"{WORDS}:INT32:1"),
            *("--self-contained", "--repository", str(repository), "--tests-dir", str(work)),
        ],
        check=True,
    )
    logic = repository / STEP / f"{STEP}_step.py"
    text = logic.read_text()
    logic.write_text(text[: text.index("def compute(")] + COMPUTE)
    # The tempting wiring first, from the shipped config: the step reads the ensemble output CAPTION.
    shutil.copytree(repository / "food11_pipeline", repository / MISWIRED)
    miswired = repository / MISWIRED / "config.pbtxt"
    edit(miswired, 'name: "food11_pipeline"', f'name: "{MISWIRED}"')
    add_outputs(miswired)
    edit(miswired, "  step [\n", "  step [\n" + step_wiring("CAPTION"))
    # As EXTENDING says: map caption_with_label's CAPTION_AFTER_PROMPT and read that.
    config = repository / "food11_pipeline" / "config.pbtxt"
    add_outputs(config)
    edit(
        config,
        '      output_map { key: "CAPTION_STATUS", value: "CAPTION_STATUS" }\n',
        '      output_map { key: "CAPTION_STATUS", value: "CAPTION_STATUS" }\n'
        '      output_map { key: "CAPTION_AFTER_PROMPT", value: "caption_after_prompt" }\n',
    )
    edit(config, "  step [\n", "  step [\n" + step_wiring("caption_after_prompt"))
    return work, repository


def test_lint_the_generated_test_and_the_validator_pass_and_the_validator_warns_of_the_miswiring(extended):
    work, repository = extended
    files = [str(repository / STEP / f"{STEP}_step.py"), str(work / f"test_step_{STEP}.py")]
    for check in (["ruff", "check", *files], ["ruff", "format", "--check", *files]):
        result = subprocess.run([sys.executable, "-m", *check], capture_output=True, text=True)
        assert result.returncode == 0, result.stdout + result.stderr
    kept = "declares_the_configs_tensors or returns_each_output_of_the_config"
    generated = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", kept, files[1]],
        capture_output=True,
        text=True,
    )
    assert generated.returncode == 0, generated.stdout
    report = validate_repository(repository)
    assert report.ok, report.text()
    assert {problem.model for problem in report.warnings if "unexpected deadlock" in problem.message} == {MISWIRED}
    assert any(
        "a call naming only 'CAPTION' fails in Triton" in problem.message
        and "leaves out step 6 (caption_with_label), so 'CAPTION' is never made" in problem.message
        and f"step 1 ({STEP}) reads 'CAPTION'" in problem.message
        for problem in report.warnings
    ), report.text()


@pytest.fixture(scope="module")
def server(extended, tmp_path_factory):
    _, repository = extended
    server = TritonServer(
        repository,
        tmp_path_factory.mktemp("text_step_triton"),
        free_ports(),
        extra_args=("--model-control-mode=explicit", "--load-model=*", QUICK_EXIT),
    )
    with running(server):
        yield server


def call(server, outputs: list[str], model: str = "food11_pipeline") -> dict[str, np.ndarray]:
    image = grpcclient.InferInput("IMAGE", [1, 1], "BYTES")
    image.set_data_from_numpy(np.array([[APPLE]], dtype=np.object_))
    client = admin_client(server)
    try:
        result = client.infer(model, [image], outputs=[grpcclient.InferRequestedOutput(name) for name in outputs])
        return {
            output["name"]: result.as_numpy(output["name"]) for output in result.get_response(as_json=True)["outputs"]
        }
    finally:
        client.close()


def test_a_call_naming_only_the_new_outputs_gets_exactly_them(server):
    with Food11Client(server.grpc_url, timeout_s=120) as client:
        (full,) = client.caption([APPLE])
    answer = call(server, list(NEW_OUTPUTS))
    assert sorted(answer) == sorted(NEW_OUTPUTS)
    words = full.caption.split()[len(["a", "photo", "of", "vegetable/fruit,"]) :]
    assert full.caption_status == "ok" and answer[WORDS][0, 0] == len(words) == full.extra[WORDS]
    assert answer[TAGS][0, 0].decode() == ",".join(word for word in words if len(word) >= 2) == full.extra[TAGS]
    assert sorted(call(server, ["LABEL"])) == ["LABEL"]  # a label-only call still needs no caption
    assert sorted(call(server, [TAGS, "CAPTION"])) == sorted([TAGS, "CAPTION"])


def single_output_calls(repository, ensemble: str) -> dict[str, bool]:
    """Each output of ``ensemble``, and whether pipeline_src.ensemble_pruning says Triton starves a call
    naming only it."""
    config = parse_config(repository / ensemble / "config.pbtxt")
    steps = [
        Step(s.model_name, frozenset(s.input_map.values()), tuple(s.output_map.values()))
        for s in config.ensemble_scheduling.step
    ]
    outputs = [tensor.name for tensor in config.output]
    made_without = {
        name: {name} <= produced(steps, ["IMAGE"], pruned_steps(steps, outputs, [name])) for name in outputs
    }
    return {name: not made for name, made in made_without.items()}


def test_triton_starves_exactly_the_calls_the_pruning_model_predicts(extended, server):
    """The validator's model of Triton's pruning, held to the real server, call by call."""
    _, repository = extended
    predicted = single_output_calls(repository, MISWIRED)
    assert predicted[TAGS] and predicted["CAPTION"] and not predicted["LABEL"]  # the cases EXTENDING names
    for name, starves in predicted.items():
        if starves:
            with pytest.raises(InferenceServerException, match="unexpected deadlock"):
                call(server, [name], model=MISWIRED)
        else:
            assert sorted(call(server, [name], model=MISWIRED)) == [name]
    assert not any(single_output_calls(repository, "food11_pipeline").values())


def test_the_miswired_ensemble_answers_a_call_naming_every_output(server):
    answer = call(server, ["LABEL", "CAPTION", TAGS, WORDS], model=MISWIRED)
    assert answer[WORDS][0, 0] == len(answer["CAPTION"][0, 0].split())


def test_the_new_outputs_reach_the_api(server, api_factory):
    api = api_factory(triton_url=server.grpc_url)
    response = post_photo(api.url, APPLE)
    assert response.status_code == 200, response.text
    assert set(NEW_OUTPUTS) <= set(response.json()["extra"])
    schema = httpx.get(f"{api.url}/openapi.json").json()["components"]["schemas"]
    assert schema["CaptionResponse"]["properties"]["extra"]  # the extra outputs are documented there
