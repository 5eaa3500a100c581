"""The API's own Prometheus metrics, read back from GET /metrics after real requests."""

import httpx
from helpers import APPLE
from prometheus_client.parser import text_string_to_metric_families


def samples(api_url) -> dict[tuple, float]:
    text = httpx.get(f"{api_url}/metrics", timeout=30).text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(found, name, **labels) -> float:
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


def test_requests_status_codes_and_latency_are_counted_per_route(api_factory):
    api = api_factory(max_upload_bytes=1024 * 1024)
    with httpx.Client(timeout=120) as http:
        for data in (APPLE, APPLE, b"not a photo"):
            http.post(f"{api.url}/caption", files={"photo": ("p.jpg", data, "image/jpeg")})
        too_large = http.post(
            f"{api.url}/caption",
            content=b"\0" * (2 * 1024 * 1024),
            headers={"content-type": "multipart/form-data; boundary=x"},
        )
        assert too_large.status_code == 413
        http.get(f"{api.url}/healthz")
    found = samples(api.url)
    caption = {"handler": "/caption", "method": "POST"}
    assert value(found, "http_requests_total", status="200", **caption) == 2
    assert value(found, "http_requests_total", status="400", **caption) == 1
    assert value(found, "http_requests_total", status="413", **caption) == 1  # answered by a middleware
    assert value(found, "http_request_duration_seconds_count", **caption) == 4
    assert value(found, "http_request_duration_seconds_bucket", le="60.0", **caption) == 4
    assert value(found, "http_requests_total", handler="/healthz", method="GET", status="200") == 1
    assert not any(labels and dict(labels).get("handler") == "/metrics" for _, labels in found)


def test_metrics_stay_out_of_the_openapi_schema(api):
    assert "/metrics" not in httpx.get(f"{api.url}/openapi.json").json()["paths"]
    assert httpx.get(f"{api.url}/metrics").headers["content-type"].startswith("text/plain")
