"""The API's readiness and admission while a model is not ready in Triton, as the stub watchdog leaves one while
it heals it (an unload, then a load) or after it gives up (unloaded): models unloaded for real on the session's
tritonserver through its admin API, and loaded back whatever happens, so other tests find them as before."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import httpx
import pytest
from helpers import APPLE, admin_client, post_photo
from prometheus_client.parser import text_string_to_metric_families
from repository_checks import models_built_from
from servers import UvicornThread

from food11_api.app import create_app
from food11_api.settings import ApiSettings
from pipeline_src.contract import CLASSIFY_ENSEMBLE, ENSEMBLE
from pipeline_src.serving.ports import free_port

INTERVAL_S = 0.2  # the API's look at Triton: fast, so the test waits little
RETRY_AFTER_S = 7  # not the default, so the header is seen to come from the setting


def poll(check: Callable[[], object], what: str, deadline_s: float = 30.0) -> object:
    """``check()``'s first truthy answer within the deadline; fails naming ``what`` and the last answer."""
    give_up_at, answer = time.monotonic() + deadline_s, None
    while time.monotonic() < give_up_at:
        if answer := check():
            return answer
        time.sleep(0.05)
    pytest.fail(f"{what}: not within {deadline_s} s (last: {answer!r})")


def readyz(api, **params) -> httpx.Response:
    return httpx.get(f"{api.url}/readyz", params=params, timeout=30)


def classify(api) -> httpx.Response:
    return httpx.post(f"{api.url}/classify", files={"photo": ("apple.jpg", APPLE, "image/jpeg")}, timeout=120)


def metrics(api) -> dict[tuple[str, tuple], float]:
    text = httpx.get(f"{api.url}/metrics", timeout=30).text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


class Operator:
    """The watchdog's two moves on the session's server: unload a model, load it again."""

    def __init__(self, triton):
        self.raw = admin_client(triton)
        self.unloaded: list[str] = []

    def unload(self, name: str) -> None:
        self.unloaded.append(name)
        self.raw.unload_model(name)

    def load(self, name: str) -> None:
        self.raw.load_model(name)


@pytest.fixture
def operator(triton) -> Iterator[Operator]:
    """Every model unloaded is loaded back afterwards, whatever happened, and awaited ready with the ensembles
    (Triton reloads them with their step), so the tests after these find the server as before."""
    operator = Operator(triton)
    try:
        yield operator
    finally:
        for name in operator.unloaded:
            operator.load(name)  # a no-op for one the test loaded back already
        for name in [*operator.unloaded, ENSEMBLE, "food11_pipeline_topk", CLASSIFY_ENSEMBLE]:
            poll(lambda name=name: operator.raw.is_model_ready(name), f"{name} ready again")
        operator.raw.close()


@pytest.fixture(scope="module")
def watched_api(triton):
    """An API of this module's own, stopped after it: it looks at Triton five times a second."""
    settings = ApiSettings(
        triton_url=triton.grpc_url, step_health_interval_s=INTERVAL_S, step_down_retry_after_s=RETRY_AFTER_S
    )
    with UvicornThread(create_app(settings)) as api:
        poll(lambda: readyz(api).status_code == 200, "the API ready")
        yield api


def test_the_api_watches_its_ensembles_and_every_model_they_are_built_from(watched_api, model_repository):
    """The models, read from the served repository's configs (each ensemble's steps and the BLS callees their
    settings declare, tests/repository_checks.py), are exactly those the API reports, each ready: one it does
    not watch, or one it watches beyond them, fails."""
    api = watched_api
    ready = {labels[0][1]: value for (name, labels), value in metrics(api).items() if name == "food11_model_ready"}
    models = [*models_built_from(model_repository, ENSEMBLE), *models_built_from(model_repository, CLASSIFY_ENSEMBLE)]
    assert {"captioner", "vision_encoder", ENSEMBLE, CLASSIFY_ENSEMBLE} <= set(models)
    assert ready == dict.fromkeys(models, 1.0)


def test_a_captioner_not_ready_is_named_refused_at_once_for_captions_and_classify_goes_on(watched_api, operator):
    api = watched_api
    refused_before = metrics(api)[("food11_refused_total", (("by", "step_down"),))]
    operator.unload("captioner")  # a BLS callee: Triton keeps the ensemble READY and would answer captionless

    started = time.monotonic()
    not_ready = poll(lambda: (r := readyz(api)).status_code == 503 and r, "/readyz 503")
    seen_after_s = time.monotonic() - started
    assert not_ready.json()["detail"] == "not ready: captioner (not ready in Triton)"
    assert readyz(api, route="/classify").status_code == 200  # what /classify needs is all there

    started = time.monotonic()
    caption = post_photo(api.url, APPLE, "apple.jpg")
    refused_in_s = time.monotonic() - started
    assert caption.status_code == 503 and refused_in_s < 2  # at once: no wait on Triton (the bound is for slow CI)
    assert caption.json()["detail"] == "captioner is not ready (healing or down): retry later"
    assert caption.headers["retry-after"] == str(RETRY_AFTER_S)
    assert caption.json()["request_id"] == caption.headers["x-request-id"]
    predict = httpx.post(
        f"{api.url}/predict", json={"image": "aGVsbG8="}, timeout=30
    )  # refused before its body is read
    assert predict.status_code == 503 and "captioner" in predict.json()["detail"]
    labelled = classify(api)
    assert labelled.status_code == 200 and labelled.json()["label"] == "Vegetable/Fruit"

    after = metrics(api)
    assert after[("food11_refused_total", (("by", "step_down"),))] == refused_before + 2
    assert after[("food11_model_ready", (("model", "captioner"),))] == 0.0
    assert after[("food11_model_ready", (("model", ENSEMBLE),))] == 1.0

    operator.load("captioner")  # the watchdog's second move
    started = time.monotonic()
    poll(lambda: readyz(api).status_code == 200, "/readyz 200 after the load")
    ready_after_s = time.monotonic() - started
    answered = poll(lambda: (r := post_photo(api.url, APPLE, "apple.jpg")).status_code == 200 and r, "a caption")
    assert answered.json()["caption_status"] == "ok"
    print(
        f"not ready seen after {seen_after_s:.2f} s, caption refused in {refused_in_s * 1000:.1f} ms, "
        f"ready again after {ready_after_s:.2f} s"
    )


def test_a_step_unloaded_takes_its_ensembles_with_it_and_the_refusals_name_the_step(watched_api, operator):
    """Triton 2.51 unloads every ensemble that has the step: the vision encoder takes food11_pipeline (nothing
    of it can be answered, a call that would skip the step included) but not food11_classify, which has none."""
    api = watched_api
    operator.unload("vision_encoder")
    not_ready = poll(lambda: (r := readyz(api)).status_code == 503 and r, "/readyz 503")
    assert not_ready.json()["detail"] == (
        f"not ready: vision_encoder (not ready in Triton), {ENSEMBLE} (not ready in Triton)"
    )
    caption = post_photo(api.url, APPLE, "apple.jpg")
    assert caption.status_code == 503
    assert caption.json()["detail"] == f"vision_encoder and {ENSEMBLE} are not ready (healing or down): retry later"
    assert caption.headers["retry-after"] == str(RETRY_AFTER_S)
    assert readyz(api, route="/classify").status_code == 200
    labelled = classify(api)
    assert labelled.status_code == 200 and labelled.json()["label"] == "Vegetable/Fruit"

    operator.load("vision_encoder")
    poll(lambda: readyz(api).status_code == 200, "/readyz 200 after the load")


def test_a_label_step_unloaded_refuses_classify_naming_it(watched_api, operator):
    api = watched_api
    operator.unload("label")  # in both ensembles: both go
    poll(lambda: readyz(api, route="/classify").status_code == 503, "/readyz?route=/classify 503")
    labelled = classify(api)
    assert labelled.status_code == 503
    assert labelled.json()["detail"] == f"label and {CLASSIFY_ENSEMBLE} are not ready (healing or down): retry later"
    assert labelled.headers["retry-after"] == str(RETRY_AFTER_S)

    operator.load("label")
    poll(lambda: readyz(api, route="/classify").status_code == 200, "/readyz?route=/classify 200 after the load")
    assert classify(api).status_code == 200


def test_triton_unreachable_is_still_503_at_once_naming_triton_and_no_step_is_blamed():
    nowhere = f"127.0.0.1:{free_port()}"  # nothing listens there
    settings = ApiSettings(triton_url=nowhere, step_health_interval_s=INTERVAL_S)
    with UvicornThread(create_app(settings)) as api:
        not_ready = readyz(api)
        assert not_ready.status_code == 503
        assert not_ready.json()["detail"].startswith(
            f"ensembles {ENSEMBLE} and {CLASSIFY_ENSEMBLE} not ready at {nowhere}: Triton not reachable ("
        )
        started = time.monotonic()
        caption = post_photo(api.url, APPLE, "apple.jpg")
        assert caption.status_code == 503 and time.monotonic() - started < 5  # the call's own failure, at once
        assert "retry-after" not in caption.headers  # as before the monitor: Triton's error, no step named
        assert metrics(api)[("food11_refused_total", (("by", "step_down"),))] == 0
        assert not any(name == "food11_model_ready" for name, _ in metrics(api))  # no model's state is known
