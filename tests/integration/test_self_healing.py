"""scripts/serve.py keeps the pipeline serving by itself (pipeline_src/serving/supervisor.py, watchdog.py): a step
whose stub process is killed or stopped is healed, a killed tritonserver or API is started again, each logged
with its cause; the next answer is correct again. A step or server that keeps dying ends serve.py with the
reason instead of a restart loop. Real processes, real signals, the real server."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import threading
import time

import httpx
import psutil
import pytest
from helpers import APPLE, CLASSIFY_ONLY, serve_command

from pipeline_src.serving.launcher import SHM_DIR
from pipeline_src.serving.ports import free_port, free_ports
from pipeline_src.serving.stubs import stubs_of

DEADLINE_S = 60.0


class Served:
    """serve.py in a session of its own, its output read line by line in a thread (lines kept in order)."""

    def __init__(self, model_repository, tmp_path, *extra):
        self.api_port = free_port()
        command = serve_command(model_repository, tmp_path, free_ports(), "--api-port", str(self.api_port), *extra)
        self.process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        self.wait_for_line("Ctrl-C stops everything")

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line.rstrip())

    def wait_for_line(self, fragment: str, timeout_s: float = 180.0) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                break
            self.seen.append(line)
            if fragment in line:
                return line
            if self.process.poll() is not None and self.lines.empty():
                break
        raise AssertionError(f"no line with {fragment!r}; serve.py said:\n" + "\n".join(self.seen[-30:]))

    def child(self, fragment: str) -> psutil.Process:
        return next(p for p in psutil.Process(self.process.pid).children() if fragment in " ".join(p.cmdline()))

    def stub(self, model: str) -> int:
        return next(s.pid for s in stubs_of(self.child("tritonserver").pid) if s.model == model)

    def caption(self) -> httpx.Response:
        return httpx.post(
            f"http://127.0.0.1:{self.api_port}/caption", files={"photo": ("apple.jpg", APPLE, "image/jpeg")}, timeout=60
        )

    def answers_correctly_again(self) -> dict:
        """The first complete answer (label and caption) within the deadline; each try must answer or fail
        clearly (an HTTP status), never hang past its own timeout."""
        deadline, statuses = time.monotonic() + DEADLINE_S, []
        while time.monotonic() < deadline:
            try:
                response = self.caption()
            except httpx.TransportError as exc:  # the API itself being restarted
                statuses.append(type(exc).__name__)
            else:
                body = response.json() if response.status_code == 200 else {}
                if body.get("caption_status") == "ok" and body.get("caption"):
                    return body
                statuses.append(response.status_code)
            time.sleep(0.5)
        raise AssertionError(f"no complete answer within {DEADLINE_S} s; tries: {statuses}")

    def stop(self) -> int:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGINT)
        return self.process.wait(timeout=60)


@pytest.fixture(scope="module")
def served(model_repository, tmp_path_factory):
    serve = Served(model_repository, tmp_path_factory.mktemp("healing"), "--no-reload")
    yield serve
    assert serve.stop() == 0


@pytest.fixture(scope="module")
def first_answer(served):
    return served.answers_correctly_again()


@pytest.mark.parametrize("model", ["captioner", "vision_encoder", "caption_with_label"])
def test_a_killed_stub_is_healed_and_the_next_answer_is_correct(served, first_answer, model):
    os.kill(served.stub(model), signal.SIGKILL)
    assert "gone: unloaded, loading it again" in served.wait_for_line(f"watchdog: {model}: stub")
    served.wait_for_line(f"watchdog: {model}: healed in")
    assert served.answers_correctly_again() == {**first_answer, "elapsed_ms": pytest.approx(0, abs=1e9)}


def test_a_stopped_stub_is_healed_and_a_late_sigcont_harms_nothing(served, first_answer):
    pid = served.stub("classifier")
    os.kill(pid, signal.SIGSTOP)
    assert "stopped: unloaded" in served.wait_for_line("watchdog: classifier: stub")
    served.wait_for_line("watchdog: classifier: healed in")
    with pytest.raises(ProcessLookupError):
        os.kill(pid, signal.SIGCONT)  # unloading killed it: nothing left to wake on stale work
    assert served.answers_correctly_again()["label"] == first_answer["label"]


def test_a_killed_tritonserver_is_started_again_and_its_stubs_shared_memory_freed(served, first_answer):
    triton = served.child("tritonserver")
    # A stub's command line names its region in /dev/shm (test_supervision.py's STUB_ARGUMENTS).
    regions = [SHM_DIR / psutil.Process(stub.pid).cmdline()[2] for stub in stubs_of(triton.pid)]
    assert regions and all(region.exists() for region in regions)
    triton.kill()
    assert "tritonserver killed by SIGKILL; restarting it (1 in a row of at most" in served.wait_for_line("supervisor:")
    assert f"removed the {len(regions)} shared-memory region(s)" in served.wait_for_line("tritonserver: removed")
    served.wait_for_line("supervisor: tritonserver ready again in")
    assert not any(region.exists() for region in regions)
    assert served.answers_correctly_again()["caption"] == first_answer["caption"]


def test_a_killed_api_is_started_again(served, first_answer):
    served.child("food11_api").kill()
    assert "the API killed by SIGKILL; restarting it" in served.wait_for_line("supervisor: the API")
    served.wait_for_line("supervisor: the API ready again in")
    assert served.answers_correctly_again()["caption"] == first_answer["caption"]


def test_a_step_that_keeps_dying_ends_serve_with_the_reason(model_repository, tmp_path):
    serve = Served(model_repository, tmp_path, "--no-reload", "--no-api", "--heal-limit", "1", "--", *CLASSIFY_ONLY)
    try:
        os.kill(serve.stub("label"), signal.SIGKILL)
        serve.wait_for_line("watchdog: label: healed in")
        os.kill(serve.stub("label"), signal.SIGKILL)
        line = serve.wait_for_line("error:")
        assert "label died 2 times in a row" in line and "it needs a person" in line
        assert serve.process.wait(timeout=60) == 1
    finally:
        serve.stop()


def test_a_tritonserver_that_keeps_dying_ends_serve_with_the_reason(model_repository, tmp_path):
    serve = Served(model_repository, tmp_path, "--no-reload", "--no-api", "--restart-limit", "1", "--", *CLASSIFY_ONLY)
    try:
        serve.child("tritonserver").kill()
        serve.wait_for_line("supervisor: tritonserver ready again in")
        restarted = serve.child("tritonserver")
        restarted.kill()
        line = serve.wait_for_line("error:")
        assert "tritonserver died 2 times in a row, each within 60 s of coming back (last: killed by SIGKILL)" in line
        assert serve.process.wait(timeout=60) == 1
        psutil.wait_procs([restarted], timeout=10)
        assert not restarted.is_running()
    finally:
        serve.stop()
