"""Deadlines against a Triton that dies when a call is cancelled in flight (2.51, the PyPI wheel's; see
food11_client/cancellation.py): every caller gets its deadline error and the server serves on."""

import asyncio

import pytest
from helpers import APPLE, QUICK_EXIT, running

from food11_client import AsyncFood11Client, DeadlineExceededError, Food11Client
from food11_client.cancellation import cancels_safely
from pipeline_src.serving.launcher import TritonServer
from pipeline_src.serving.ports import free_ports


@pytest.mark.parametrize(
    "version, safe",
    [("2.51.0", False), ("2.52.0", False), ("2.53.0", True), ("2.60.0", True), ("3.0.1", True), ("custom", False)],
)
def test_only_servers_with_the_fix_are_cancelled(version, safe):
    assert cancels_safely(version) is safe


@pytest.fixture(scope="module")
def own_triton(model_repository, tmp_path_factory):
    """Its own server: if the workaround failed, the session's would die with it."""
    with running(
        TritonServer(model_repository, tmp_path_factory.mktemp("cancellation"), free_ports(), extra_args=(QUICK_EXIT,))
    ) as server:
        yield server


def test_short_deadlines_under_concurrency_leave_the_server_serving(own_triton):
    async def hurried(client, deadline_s):
        with pytest.raises(DeadlineExceededError, match="deadline"):
            await client.caption([APPLE], timeout_s=deadline_s)

    async def storm():
        async with AsyncFood11Client(own_triton.grpc_url) as client:
            # 3 to 20 ms, 8 at a time (less than one photo's work): raw gRPC deadlines crash Triton 2.51 so
            # (benchmarks/results/cancellation.md)
            for deadline_s in (0.003, 0.005, 0.01, 0.02):
                await asyncio.gather(*(hurried(client, deadline_s) for _ in range(8)))
            return await client.caption([APPLE])

    (result,) = asyncio.run(storm())
    assert result.label == "Vegetable/Fruit"
    with Food11Client(own_triton.grpc_url, timeout_s=0.003) as hurried_sync:
        for _ in range(4):
            with pytest.raises(DeadlineExceededError, match="deadline"):
                hurried_sync.caption([APPLE])
    assert own_triton.process.poll() is None
    with Food11Client(own_triton.grpc_url, timeout_s=120) as client:
        assert client.caption([APPLE])[0].caption_status == "ok"
