"""Per-request balancing over several Tritons behind one name, as a Kubernetes headless Service gives:
two real tritonservers on 127.0.0.1 and 127.0.0.2 (same gRPC port), one target resolving to both."""

import time

import httpx
import pytest
import tritonclient.grpc as grpcclient
from helpers import APPLE, CLASSIFY_ONLY

from pipeline_src.contract import CLASSIFY_ENSEMBLE
from pipeline_src.serving.launcher import TritonServer
from pipeline_src.serving.ports import Ports, free_port
from pipeline_src.serving.processes import TritonStartError


@pytest.fixture(scope="module")
def two_tritons(model_repository, tmp_path_factory):
    grpc_port = free_port()
    servers = []
    for address in ("127.0.0.1", "127.0.0.2"):  # Linux routes all of 127.0.0.0/8 to loopback
        ports = Ports(http=free_port(), grpc=grpc_port, metrics=free_port())
        # The classify ensemble and its steps only: the captioning models (slow to load) are not needed to count
        # where requests go, so they are /classify's (the API refuses /caption then).
        servers.append(
            TritonServer(
                model_repository,
                tmp_path_factory.mktemp("balanced"),
                ports,
                address=address,
                extra_args=CLASSIFY_ONLY,
            )
        )
    try:
        for server in servers:
            start_once_more_if_it_aborts(server)
        yield servers
    finally:
        for server in servers:
            server.stop(timeout_s=0)  # killed: see helpers.running


def start_once_more_if_it_aborts(server: TritonServer) -> None:
    """The wheel's tritonserver 2.51 has aborted while starting (gRPC's event engine: "epoll_ctl failed: Bad file
    descriptor", exit -6) once in three suite runs here; make serve's supervisor would start it again, so this does
    too, once. A failure to load a step is not retried: it is no abort."""
    try:
        server.start()
    except TritonStartError as exc:
        if "exited with code -6" not in str(exc) or "a step failed to load" in str(exc):
            raise
        server.start()


def ensemble_requests(server: TritonServer) -> int:
    raw = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        stats = raw.get_inference_statistics(CLASSIFY_ENSEMBLE, as_json=True)
    finally:
        raw.close()
    return int(stats["model_stats"][0]["inference_stats"]["success"].get("count", 0))


def served_per_server(servers, api_url, requests: int) -> list[int]:
    before = [ensemble_requests(server) for server in servers]
    with httpx.Client(timeout=120) as http:
        for _ in range(requests):
            response = http.post(f"{api_url}/classify", files={"photo": ("apple.jpg", APPLE, "image/jpeg")})
            assert response.status_code == 200 and response.json()["label"] == "Vegetable/Fruit"
    # Triton updates its statistics just after answering: wait (briefly) until every request is counted.
    for _ in range(50):
        served = [ensemble_requests(server) - count for server, count in zip(servers, before)]
        if sum(served) >= requests:
            break
        time.sleep(0.2)
    return served


def test_round_robin_spreads_requests_over_every_address_of_the_target(two_tritons, api_factory):
    port = two_tritons[0].ports.grpc
    api = api_factory(triton_url=f"ipv4:127.0.0.1:{port},127.0.0.2:{port}")  # the default policy: round_robin
    served = served_per_server(two_tritons, api.url, 10)
    assert sum(served) == 10
    # Each address gets its share, in turn ([5, 5] once both connections are up; the first requests may
    # all go to the first address while the second connection is still being made).
    assert all(count > 0 for count in served), served


def test_pick_first_would_pin_every_request_to_one_server(two_tritons, api_factory):
    """The control: what a plain ClusterIP Service amounts to (one connection, one pod)."""
    port = two_tritons[0].ports.grpc
    api = api_factory(triton_url=f"ipv4:127.0.0.1:{port},127.0.0.2:{port}", grpc_lb_policy="pick_first")
    assert sorted(served_per_server(two_tritons, api.url, 6)) == [0, 6]
