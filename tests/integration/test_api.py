"""The FastAPI front over real sockets (uvicorn) against the session's real tritonserver."""

import base64
import logging
from dataclasses import asdict

import httpx
import pytest
from helpers import post_photo

from food11_api.dependencies import get_client
from pipeline_src.serving.launcher import TritonServer
from pipeline_src.serving.ports import free_ports


def test_caption_upload_returns_label_probability_caption_and_time(api, photos):
    response = post_photo(api.url, photos["apple.jpg"])
    assert response.status_code == 200
    body = response.json()
    assert body["label"] == "Vegetable/Fruit"
    assert 0 < body["probability"] <= 1
    assert body["caption"].startswith("a photo of vegetable/fruit,")
    assert body["caption_status"] == "ok"
    assert body["elapsed_ms"] > 0
    assert response.headers["x-request-id"]
    timings = dict(item.split(";dur=") for item in response.headers["server-timing"].split(", "))
    assert 0 < float(timings["triton"]) <= body["elapsed_ms"] <= float(timings["app"])


def test_caller_request_id_is_echoed(api, photos):
    response = post_photo(api.url, photos["apple.jpg"], headers={"X-Request-ID": "trace-me-42"})
    assert response.headers["x-request-id"] == "trace-me-42"


def test_predict_takes_the_courses_base64_json(api, photos, client):
    response = httpx.post(
        f"{api.url}/predict", json={"image": base64.b64encode(photos["orange.jpg"]).decode()}, timeout=120
    )
    assert response.status_code == 200
    (direct,) = client.caption([photos["orange.jpg"]])
    assert response.json() == {
        "prediction": direct.label,
        "probability": pytest.approx(direct.probability),
        "caption": direct.caption,
        "caption_status": direct.caption_status,
        "warnings": direct.warnings,
        "models": [asdict(model) for model in direct.models],
        "extra": direct.extra,  # what the ensemble declares beyond the contract (none as shipped)
    }


def test_health_and_readiness(api):
    assert httpx.get(f"{api.url}/healthz").json() == {"status": "ok"}
    assert httpx.get(f"{api.url}/readyz", timeout=30).status_code == 200


def test_ensemble_not_loaded_then_triton_stopped_are_503(api_factory, model_repository, tmp_path, photos):
    """A second, real tritonserver with no model loaded; then stopped, as when Triton goes down."""
    empty = TritonServer(
        model_repository, tmp_path / "triton", free_ports(), extra_args=("--model-control-mode=explicit",)
    )
    with empty:
        api = api_factory(triton_url=empty.grpc_url, deadline_s=60)
        response = post_photo(api.url, photos["apple.jpg"])
        assert response.status_code == 503 and "food11_pipeline" in response.json()["detail"]
        assert httpx.get(f"{api.url}/readyz", timeout=60).status_code == 503
    response = post_photo(api.url, photos["apple.jpg"])  # the server is gone now
    assert response.status_code == 503
    assert response.json()["request_id"] == response.headers["x-request-id"]
    assert httpx.get(f"{api.url}/readyz", timeout=60).status_code == 503
    assert httpx.get(f"{api.url}/healthz").status_code == 200  # the API itself lives on


def test_deadline_passed_is_504(api_factory, photos):
    hurried = api_factory(deadline_s=0.001)
    response = post_photo(hurried.url, photos["apple.jpg"])
    assert response.status_code == 504
    assert "request_id" in response.json()


class BrokenClient:
    async def caption(self, images, timeout_s=None):
        raise RuntimeError("simulated defect inside the API")


def test_unexpected_failure_is_500_with_a_request_id_that_is_in_the_log(api_factory, photos, caplog):
    # Mocked: a defect in the API's own code cannot be produced against a healthy server.
    broken = api_factory(dependency_overrides={get_client: lambda: BrokenClient()})
    with caplog.at_level(logging.ERROR, logger="food11_api"):
        response = post_photo(broken.url, photos["apple.jpg"])
    assert response.status_code == 500
    request_id = response.json()["request_id"]
    assert request_id and request_id in caplog.text
    assert "simulated defect" not in response.json()["detail"]  # internals stay in the log


def test_openapi_documents_the_upload_the_examples_and_the_errors(api):
    spec = httpx.get(f"{api.url}/openapi.json").json()
    caption = spec["paths"]["/caption"]["post"]
    assert "multipart/form-data" in caption["requestBody"]["content"]
    assert {"200", "400", "413", "422", "500", "503", "504"} <= set(caption["responses"])
    examples = {
        code: caption["responses"][code]["content"]["application/json"]["example"]["detail"]
        for code in ("400", "413", "503", "504")
    }
    assert "preprocess" in examples["400"] and "upload limit" in examples["413"]
    assert len(set(examples.values())) == 4  # each error documented with its own example
    schemas = spec["components"]["schemas"]
    assert schemas["CaptionResponse"]["properties"]["label"]["examples"] == ["Vegetable/Fruit"]
    assert set(spec["paths"]) >= {"/caption", "/predict", "/healthz", "/readyz"}


def test_swagger_and_the_photo_page_are_served_without_any_cdn(api):
    docs = httpx.get(f"{api.url}/docs").text
    assert "/swagger-ui/swagger-ui-bundle.js" in docs and "https://" not in docs
    bundle = httpx.get(f"{api.url}/swagger-ui/swagger-ui-bundle.js")
    assert bundle.status_code == 200 and "SwaggerUIBundle" in bundle.text
    page = httpx.get(f"{api.url}/")
    assert page.headers["content-type"].startswith("text/html")
    assert 'type="file"' in page.text
