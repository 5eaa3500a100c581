"""Outputs an ensemble declares beyond the core contract reach every surface without a line of client or
API code naming them: the Python client, the CLI, /caption's JSON, /openapi.json and the photo page's data.
The shipped ``food11_pipeline_topk`` ensemble declares two (TOP_LABELS, TOP_PROBABILITIES); what each
ensemble declares is read from the repository, so a step added to one keeps these tests true."""

import json

import httpx
import pytest
from helpers import APPLE, extra_outputs, post_photo

from food11_client import Food11Client, OutputSpec, cli
from pipeline_src.contract import CORE_OUTPUTS, ENSEMBLE

TOPK = "food11_pipeline_topk"


def test_the_client_returns_the_ensembles_other_outputs(triton, model_repository):
    with Food11Client(triton.grpc_url, TOPK, timeout_s=120) as client:
        specs = {spec.name: spec for spec in client.extra_outputs()}
        (result,) = client.caption([APPLE])
    assert list(specs) == extra_outputs(model_repository, TOPK)
    assert specs["TOP_LABELS"] == OutputSpec("TOP_LABELS", "BYTES", (3,))
    assert specs["TOP_PROBABILITIES"] == OutputSpec("TOP_PROBABILITIES", "FP32", (3,))
    assert list(result.extra) == list(specs)
    assert result.extra["TOP_LABELS"][0] == result.label
    assert result.extra["TOP_PROBABILITIES"][0] == pytest.approx(result.probability)
    probabilities = result.extra["TOP_PROBABILITIES"]
    assert len(result.extra["TOP_LABELS"]) == 3 and probabilities == sorted(probabilities, reverse=True)


def test_the_pipeline_answers_what_its_config_declares_beyond_the_contract(client, model_repository):
    declared = extra_outputs(model_repository, ENSEMBLE)  # none as shipped
    assert [spec.name for spec in client.extra_outputs()] == declared
    assert list(client.caption([APPLE])[0].extra) == declared


def test_the_cli_prints_them(triton, tmp_path, capsys):
    photo = tmp_path / "apple.jpg"
    photo.write_bytes(APPLE)
    assert cli.main(["--url", triton.grpc_url, "--model", TOPK, str(photo)]) == 0
    (printed,) = json.loads(capsys.readouterr().out)
    assert printed["extra"]["TOP_LABELS"][0] == printed["label"]


def test_the_api_answers_them_and_its_schema_names_them(api_factory, model_repository):
    api = api_factory(model_name=TOPK)
    answer = post_photo(api.url, APPLE)
    assert answer.status_code == 200, answer.text
    assert answer.json()["extra"]["TOP_LABELS"][0] == answer.json()["label"]

    schema = httpx.get(f"{api.url}/openapi.json", timeout=30).json()
    extra = schema["components"]["schemas"]["CaptionResponse"]["properties"]["extra"]
    assert list(extra["properties"]) == extra_outputs(model_repository, TOPK)
    assert extra["properties"]["TOP_LABELS"]["items"] == {"type": "string"}
    assert extra["properties"]["TOP_PROBABILITIES"]["items"] == {"type": "number"}
    assert not set(extra["properties"]) & set(CORE_OUTPUTS)
