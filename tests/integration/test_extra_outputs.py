"""Outputs an ensemble declares beyond the core contract reach every surface without a line of client or
API code naming them: the Python client, the CLI, /caption's JSON, /openapi.json and the photo page's data.
The shipped ``food11_pipeline_topk`` ensemble declares two (TOP_LABELS, TOP_PROBABILITIES)."""

import json

import httpx
import pytest
from helpers import APPLE, post_photo

from food11_client import Food11Client, OutputSpec, cli
from pipeline_src.contract import CORE_OUTPUTS

pytestmark = pytest.mark.integration

TOPK = "food11_pipeline_topk"


def test_the_client_returns_the_ensembles_other_outputs(triton):
    with Food11Client(triton.grpc_url, TOPK, timeout_s=120) as client:
        assert client.extra_outputs() == (
            OutputSpec("TOP_LABELS", "BYTES", (3,)),
            OutputSpec("TOP_PROBABILITIES", "FP32", (3,)),
        )
        (result,) = client.caption([APPLE])
    assert result.extra["TOP_LABELS"][0] == result.label
    assert result.extra["TOP_PROBABILITIES"][0] == pytest.approx(result.probability)
    assert len(result.extra["TOP_LABELS"]) == 3 and result.extra["TOP_PROBABILITIES"] == sorted(
        result.extra["TOP_PROBABILITIES"], reverse=True
    )


def test_the_shipped_ensemble_has_no_other_outputs(client):
    assert client.extra_outputs() == ()
    assert client.caption([APPLE])[0].extra == {}


def test_the_cli_prints_them(triton, tmp_path, capsys):
    photo = tmp_path / "apple.jpg"
    photo.write_bytes(APPLE)
    assert cli.main(["--url", triton.grpc_url, "--model", TOPK, str(photo)]) == 0
    (printed,) = json.loads(capsys.readouterr().out)
    assert printed["extra"]["TOP_LABELS"][0] == printed["label"]


def test_the_api_answers_them_and_its_schema_names_them(api_factory):
    api = api_factory(model_name=TOPK)
    answer = post_photo(api.url, APPLE)
    assert answer.status_code == 200, answer.text
    assert answer.json()["extra"]["TOP_LABELS"][0] == answer.json()["label"]

    schema = httpx.get(f"{api.url}/openapi.json", timeout=30).json()
    extra = schema["components"]["schemas"]["CaptionResponse"]["properties"]["extra"]
    assert set(extra["properties"]) == {"TOP_LABELS", "TOP_PROBABILITIES"}
    assert extra["properties"]["TOP_LABELS"]["items"] == {"type": "string"}
    assert extra["properties"]["TOP_PROBABILITIES"]["items"] == {"type": "number"}
    assert not set(extra["properties"]) & set(CORE_OUTPUTS)
