"""Session fixtures of the tests that talk to servers (tests/integration, tests/benchmarks): one real
tritonserver serving the shared ``model_repository`` on free ports for the whole session, clients of it, the
API on real uvicorn sockets; on demand, a second repository built as from real weights, with its own server
and API."""

from __future__ import annotations

import shutil
import threading
import time

import pytest
from helpers import QUICK_EXIT, admin_client, running

from pipeline_src.serving.launcher import TritonServer
from pipeline_src.serving.ports import free_port, free_ports
from pipeline_src.steps.captioning import STANDIN_MARKER


@pytest.fixture(scope="session")
def triton(model_repository, tmp_path_factory) -> TritonServer:
    """One real tritonserver for the session. Explicit model control lets tests unload the captioner
    (a real fault) and reload a step with another config."""
    work_dir = tmp_path_factory.mktemp("triton")
    server = TritonServer(
        model_repository,
        work_dir,
        free_ports(),
        extra_args=(
            "--model-control-mode=explicit",
            "--load-model=*",
            QUICK_EXIT,
            # Tracing stays OFF until a test turns it on (tests/integration/test_tracing.py).
            f"--trace-config=triton,file={work_dir / 'trace.json'}",
        ),
    )
    with running(server):
        yield server
    print(f"tritonserver log: {server.log_file}")


@pytest.fixture(scope="session")
def client(triton):
    from food11_client import Food11Client

    with Food11Client(triton.grpc_url, timeout_s=120) as food11:
        yield food11


@pytest.fixture(scope="session")
def triton_grpc(triton):
    """A raw tritonclient for calling single steps and managing models (it presents the admin key)."""
    raw = admin_client(triton)
    yield raw
    raw.close()


class UvicornThread:
    """A real uvicorn server on a free localhost port, in a thread of the test process."""

    def __init__(self, app):
        import uvicorn

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> UvicornThread:
        self.thread.start()
        while not self.server.started:
            if not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc_info) -> None:
        stop_together([self])


def stop_together(apis: list[UvicornThread]) -> None:
    """Every server told to exit before any is waited on: each takes a tenth of a second to wind down, and the
    session starts a score of them."""
    for api in apis:
        api.server.should_exit = True
    for api in apis:
        api.thread.join(timeout=30)


@pytest.fixture(scope="session")
def api_factory(triton):
    """Start the FastAPI app (real uvicorn, real sockets) with settings of the test's choosing,
    pointed by default at the session's tritonserver."""
    from food11_api.app import create_app
    from food11_api.settings import ApiSettings

    started: list[UvicornThread] = []

    def start(dependency_overrides=None, **settings):
        app = create_app(ApiSettings(**{"triton_url": triton.grpc_url, **settings}))
        app.dependency_overrides.update(dependency_overrides or {})
        started.append(UvicornThread(app).__enter__())
        return started[-1]

    try:
        yield start
    finally:
        stop_together(started)


@pytest.fixture(scope="session")
def api(api_factory):
    return api_factory(max_upload_bytes=2 * 1024 * 1024)


@pytest.fixture(scope="session")
def real_repository(model_repository, tmp_path_factory):
    """A repository built as a user with real weights builds it: the classifier from a course-style
    checkpoint (a state dict), BLIP from a local snapshot without the stand-in marker. Their weights are
    not trained (none can be fetched here); what is tested is that the build records what it was given."""
    import torch

    from pipeline_src.model_build.classifier_export import course_mobilenet_v2
    from pipeline_src.model_build.cli import build_repository_copy

    work = tmp_path_factory.mktemp("real")
    checkpoint = work / "food11.pth"
    torch.manual_seed(0)
    torch.save(course_mobilenet_v2().state_dict(), checkpoint)
    snapshot = shutil.copytree(model_repository / "captioner" / "1" / "blip", work / "blip-snapshot")
    (snapshot / STANDIN_MARKER).unlink()  # what makes it a stand-in
    return build_repository_copy(
        work / "model_repository", models=["--classifier-checkpoint", str(checkpoint), "--blip", str(snapshot)]
    )


@pytest.fixture(scope="session")
def real_api(real_repository, tmp_path_factory):
    from food11_api.app import create_app
    from food11_api.settings import ApiSettings

    with (
        running(
            TritonServer(
                real_repository, tmp_path_factory.mktemp("real-triton"), free_ports(), extra_args=(QUICK_EXIT,)
            )
        ) as server,
        UvicornThread(create_app(ApiSettings(triton_url=server.grpc_url))) as api,
    ):
        yield api
