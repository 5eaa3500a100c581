"""Under overload the service refuses at once (503 + Retry-After, OverloadedError, exit 4) instead of
queueing until the deadline; what it answers is still right, and it serves normally once the load drops.
The API's limit follows the measured rate; a request's deadline reaches Triton's queues."""

import asyncio
import json
import math
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest
from fastapi import Request

from food11_api.dependencies import get_client
from food11_client import Food11Client, OverloadedError, cli


class HeldClient:
    """The API's real client, whose calls wait for the test to let them through: a request held in flight
    for as long as the test needs, which real load cannot promise."""

    def __init__(self, client, entered: threading.Event, release: threading.Event):
        self.client, self.entered, self.release = client, entered, release

    async def caption(self, images, timeout_s=None):
        self.entered.set()
        await asyncio.get_running_loop().run_in_executor(None, self.release.wait, 60)
        return await self.client.caption(images, timeout_s)

    async def cancels_calls(self):
        return await self.client.cancels_calls()


def metric(api_url: str, sample: str) -> float:
    for line in httpx.get(f"{api_url}/metrics").text.splitlines():
        if line.startswith(sample + " "):
            return float(line.split()[-1])
    raise AssertionError(f"no {sample} in /metrics")


def refused_count(api_url: str, by: str) -> float:
    return metric(api_url, f'food11_refused_total{{by="{by}"}}')


def test_the_api_refuses_past_its_in_flight_cap_at_once_and_serves_again_after(api_factory, photos, client):
    entered, release = threading.Event(), threading.Event()

    def held_client(request: Request) -> HeldClient:
        return HeldClient(request.app.state.client, entered, release)

    api = api_factory(max_in_flight=1, retry_after_s=3, dependency_overrides={get_client: held_client})
    upload = {"photo": ("apple.jpg", photos["apple.jpg"])}
    with ThreadPoolExecutor(1) as pool:
        held = pool.submit(httpx.post, f"{api.url}/caption", files=upload, timeout=120)
        assert entered.wait(60)
        refused = httpx.post(f"{api.url}/caption", files=upload, timeout=120)
        also_refused = httpx.post(f"{api.url}/predict", json={"image": "aGk="}, timeout=120)
        assert httpx.get(f"{api.url}/healthz").status_code == 200  # not capped: costs no model time
        release.set()
        answered = held.result()
    assert refused.status_code == also_refused.status_code == 503
    assert refused.headers["retry-after"] == "3"  # nothing measured yet: the configured fallback
    assert refused.json()["detail"] == (
        "over capacity: this API serves 1 requests, its limit until answers measure the pipeline's speed; "
        "retry after 3 s"
    )
    assert refused_count(api.url, "api") == 2
    (direct,) = client.caption([photos["apple.jpg"]])
    assert answered.status_code == 200 and answered.json()["caption"] == direct.caption
    after = httpx.post(f"{api.url}/caption", files=upload, timeout=120)
    assert after.status_code == 200 and after.json()["caption"] == direct.caption


def test_the_limit_follows_the_measured_rate_and_retry_after_the_drain_time(api_factory, photos):
    """After one answer the limit is the measured rate times the latency target, within the guard rails,
    and a refusal's Retry-After is the time the requests in flight take to drain at that rate."""
    entered, release = threading.Event(), threading.Event()
    holding = threading.Event()

    def maybe_held(request: Request):
        return HeldClient(request.app.state.client, entered, release) if holding.is_set() else request.app.state.client

    api = api_factory(deadline_s=60, latency_target=0.5, max_in_flight=1, dependency_overrides={get_client: maybe_held})
    upload = {"photo": ("apple.jpg", photos["apple.jpg"])}
    assert metric(api.url, "food11_answer_rate") == 0 and metric(api.url, "food11_admission_limit") == 1
    assert httpx.post(f"{api.url}/caption", files=upload, timeout=120).status_code == 200
    rate = metric(api.url, "food11_answer_rate")
    assert rate > 0
    assert metric(api.url, "food11_admission_limit") == max(1, min(1, math.floor(rate * 30)))
    holding.set()
    with ThreadPoolExecutor(1) as pool:
        held = pool.submit(httpx.post, f"{api.url}/caption", files=upload, timeout=120)
        assert entered.wait(60)
        assert metric(api.url, "food11_requests_in_flight") == 1
        refused = httpx.post(f"{api.url}/caption", files=upload, timeout=120)
        release.set()
        assert held.result().status_code == 200
    assert refused.status_code == 503
    assert refused.headers["retry-after"] == str(max(1, math.ceil(1 / rate)))
    assert f"at the measured {rate:.3g} per second" in refused.json()["detail"]


def test_the_callers_time_left_reaches_every_queue_of_the_pipeline(triton_grpc, photos):
    """A request's timeout (the time its caller has left) is passed by the ensemble to the steps, whose
    queues refuse it once it has waited that long: 1 µs has passed before any batch forms."""
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    image = grpcclient.InferInput("IMAGE", [1, 1], "BYTES")
    image.set_data_from_numpy(np.array([[photos["apple.jpg"]]], dtype=np.object_))
    with pytest.raises(InferenceServerException, match="Request timeout expired"):
        triton_grpc.infer("food11_pipeline", [image], timeout=1)
    answered = triton_grpc.infer("food11_pipeline", [image], timeout=120_000_000)  # the caller's two minutes
    assert answered.as_numpy("CAPTION")[0][0]


@pytest.fixture
def reloaded_captioner(triton_grpc):
    """Reload the captioner with another policy for the requests waiting to join its table (its parameters
    max_waiting_requests, waiting_timeout_microseconds); restore the original config afterwards."""
    original = triton_grpc.get_model_config("captioner", as_json=True)["config"]

    def reload(**policy):
        config = json.loads(json.dumps(original))
        config["parameters"].update({key: {"string_value": str(value)} for key, value in policy.items()})
        triton_grpc.load_model("captioner", config=json.dumps(config))

    yield reload
    triton_grpc.load_model("captioner", config=json.dumps(original))


def test_a_step_that_refuses_under_load_makes_the_whole_request_refused(
    client, api, photos, reloaded_captioner, triton, tmp_path, capsys
):
    """A queue timeout of 1 µs: the captioner's loop refuses every call (in Triton's words, "Request timeout
    expired": it joins its table at the earliest from the loop's thread), as it does under overload. The request is
    refused, not answered without its caption."""
    reloaded_captioner(waiting_timeout_microseconds=1)
    with pytest.raises(OverloadedError, match=r"the captioner is over capacity.*Request timeout expired"):
        client.caption([photos["apple.jpg"]])

    before = refused_count(api.url, "triton")
    response = httpx.post(f"{api.url}/caption", files={"photo": ("apple.jpg", photos["apple.jpg"])}, timeout=120)
    rate = metric(api.url, "food11_answer_rate")  # the session's API has answered before: drain time
    expected_retry_after = max(1, math.ceil(1 / rate)) if rate else 2  # one in flight (this one), else the fallback
    assert response.status_code == 503 and response.headers["retry-after"] == str(expected_retry_after)
    assert response.json()["detail"].startswith("over capacity: ")
    assert refused_count(api.url, "triton") == before + 1

    photo = tmp_path / "apple.jpg"
    photo.write_bytes(photos["apple.jpg"])
    assert cli.main(["--url", triton.grpc_url, str(photo)]) == cli.EXIT_OVERLOADED
    assert "over capacity and refused the photos at once" in capsys.readouterr().err


def test_a_storm_over_a_short_queue_ends_every_request_right_or_refused(triton, photos, reloaded_captioner):
    """Far more concurrent callers than a one-request queue holds: each call ends, with its own photo's
    answer or an OverloadedError, nothing else; once the storm is over, everything is answered."""
    names = ["apple.jpg", "orange.jpg", "coffee.png", "chelsea.jpg"]
    with Food11Client(triton.grpc_url, timeout_s=120) as client:
        alone = {name: client.caption([photos[name]])[0] for name in names}
        reloaded_captioner(max_waiting_requests=1)

        def call(index):
            name = names[index % len(names)]
            try:
                return name, client.caption([photos[name]])[0]
            except OverloadedError as exc:
                return name, exc

        with ThreadPoolExecutor(24) as pool:
            outcomes = list(pool.map(call, range(96)))
        answered = [(name, result) for name, result in outcomes if not isinstance(result, Exception)]
        refused = [result for _, result in outcomes if isinstance(result, OverloadedError)]
        assert len(answered) + len(refused) == 96
        for name, result in answered:
            assert (result.label, result.caption, result.caption_status) == (
                alone[name].label,
                alone[name].caption,
                alone[name].caption_status,
            ), name
            assert result.probability == pytest.approx(alone[name].probability, abs=1e-5)
        assert all("Exceeds maximum queue size" in str(exc) for exc in refused)
        after = client.caption([photos[name] for name in names])
        assert [result.caption for result in after] == [alone[name].caption for name in names]
