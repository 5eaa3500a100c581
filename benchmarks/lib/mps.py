"""NVIDIA MPS (Multi-Process Service) around a measured run: its control daemon started before Triton, so that
the GPU steps' processes (each its own CUDA context) share one context on the GPU instead of being
time-sliced, then read back (which MPS server, how many client processes) and stopped.

The daemon's pipe and log folders are a fresh temporary folder, named to every CUDA process through
CUDA_MPS_PIPE_DIRECTORY / CUDA_MPS_LOG_DIRECTORY in this process's environment, which tritonserver and its
stubs inherit: nothing is left behind in the system-wide /tmp/nvidia-mps, and a daemon already running there
is not touched. The GPU's compute mode is not changed (MPS runs in the default mode).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

CONTROL = "nvidia-cuda-mps-control"
PIPE_ENV, LOG_ENV = "CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY"
TIMEOUT_S = 30.0


class MpsUnavailable(RuntimeError):
    """MPS could not be started here: the figures would not be MPS's."""


def ask(command: str) -> str:
    """One command to the running control daemon (``get_server_list``, ``get_client_list PID``, ``quit``)."""
    done = subprocess.run(
        [CONTROL], input=command + "\n", capture_output=True, text=True, timeout=TIMEOUT_S, env=os.environ
    )
    if done.returncode != 0:
        raise MpsUnavailable(f"{CONTROL} answered {command!r} with exit {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def pids(answer: str) -> list[int]:
    """The process ids in a control daemon's answer, one a line."""
    return [int(line) for line in answer.split() if line.strip().isdigit()]


def state() -> dict:
    """The MPS servers running now and each one's client processes (a server starts with its first client)."""
    return {str(server): pids(ask(f"get_client_list {server}")) for server in pids(ask("get_server_list"))}


def wait_until_answering(timeout_s: float = TIMEOUT_S) -> None:
    """The daemon makes its pipe a moment after ``-d`` returns."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            state()
            return
        except MpsUnavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@contextlib.contextmanager
def mps_daemon() -> Iterator[Path]:
    """MPS's control daemon for the block, with this process's environment pointing every later CUDA process at
    it; stopped and its environment taken back afterwards. Raises MpsUnavailable where it cannot start."""
    if shutil.which(CONTROL) is None:
        raise MpsUnavailable(f"{CONTROL} is not on PATH: this machine's driver install has no MPS")
    folder = Path(tempfile.mkdtemp(prefix="mps_", dir="/tmp"))  # a short path: the pipe is a Unix socket
    (folder / "pipe").mkdir()
    (folder / "log").mkdir()
    saved = {name: os.environ.get(name) for name in (PIPE_ENV, LOG_ENV)}
    os.environ[PIPE_ENV], os.environ[LOG_ENV] = str(folder / "pipe"), str(folder / "log")
    try:
        done = subprocess.run([CONTROL, "-d"], capture_output=True, text=True, timeout=TIMEOUT_S, env=os.environ)
        if done.returncode != 0:
            raise MpsUnavailable(f"{CONTROL} -d exited {done.returncode}: {done.stderr.strip()}")
        wait_until_answering()
        try:
            yield folder
        finally:
            with contextlib.suppress(MpsUnavailable, subprocess.TimeoutExpired):
                ask("quit")
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def control_log(folder: Path, limit: int = 4000) -> str:
    """The end of the control daemon's log (why a server did not start, for one)."""
    log = folder / "log" / "control.log"
    return log.read_text(errors="replace")[-limit:] if log.exists() else ""
