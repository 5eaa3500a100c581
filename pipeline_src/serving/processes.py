"""Server child processes: started so that they die with this process, waited on until they answer over
HTTP (``ServerStartError`` when one does not), and stopped gracefully (forcibly if they hang)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request


class ServerStartError(RuntimeError):
    """A server process exited, or did not answer in time."""


class TritonStartError(ServerStartError):
    """tritonserver exited or did not become ready; the message carries the end of its log."""


_PR_SET_PDEATHSIG = 1
# Resolved before any fork: the child runs only this call between fork and exec.
_prctl = ctypes.CDLL(None, use_errno=True).prctl if sys.platform == "linux" else None


def _die_with_parent(parent_pid: int):
    """preexec_fn: the kernel sends the child SIGTERM when its parent dies, however the parent ends
    (SIGKILL included), so no server outlives the process that started it."""

    def arm() -> None:
        if _prctl is not None:
            _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent_pid:  # the parent died before the signal was armed
            os._exit(1)

    return arm


def spawn(command: list[str], env: dict[str, str] | None = None, **popen_args) -> subprocess.Popen:
    """Start a server process that dies with this one and gets no signal meant for this one.

    Its own session: Ctrl-C in a terminal reaches only the caller, which stops its servers in order, once.
    PR_SET_PDEATHSIG belongs to the thread that forks: call this from a thread that lives as long as the
    server (the main thread does).
    """
    return subprocess.Popen(
        command, env=env, start_new_session=True, preexec_fn=_die_with_parent(os.getpid()), **popen_args
    )


def wait_for_http(process: subprocess.Popen, url: str, timeout_s: float, name: str) -> None:
    """Until ``url`` answers 200; ServerStartError if ``process`` exits first or time runs out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ServerStartError(f"{name} exited with code {process.returncode}")
        # not answering yet: refused, or an error status (HTTPError is a URLError)
        with (
            contextlib.suppress(urllib.error.URLError, ConnectionError, TimeoutError),
            urllib.request.urlopen(url, timeout=2) as response,
        ):
            if response.status == 200:
                return
        time.sleep(0.25)
    raise ServerStartError(f"{name} not ready after {timeout_s:.0f} s")


def stop_process(process: subprocess.Popen, timeout_s: float) -> int:
    """SIGINT (a graceful shutdown for tritonserver and uvicorn), then SIGKILL if it hangs."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return process.returncode
