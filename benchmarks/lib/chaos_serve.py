"""``scripts/serve.py`` as the chaos run's subject: started on free loopback ports, its output read line by line
with the time each line arrived, its processes found by command line, and stopped with SIGINT at the end with a
check that no process it ever had is left over."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from pipeline_src import PROJECT_ROOT
from pipeline_src.serving.ports import free_port, free_ports
from pipeline_src.serving.stubs import Stub, stubs_of

READY_LINE = "Ctrl-C stops everything."
# serve.py's own lines (the API's access and request logs share its output, unprinted)
ECHOED = ("watchdog:", "supervisor:", "error:", "tritonserver", "API ready", "Ctrl-C", "SIG", "note:", "Traceback")
TRITONSERVER, API = "tritonserver", "food11_api"


@dataclass(frozen=True)
class Line:
    at: float  # time.monotonic() when this process read it
    text: str


@dataclass
class Stopped:
    exit_code: int | None  # serve.py's, after SIGINT (None: it had to be killed)
    was_running: bool  # whether it was still running when asked to stop
    leftovers: list[str]  # processes it had at some point, still running once it ended (then killed by pid)


class Served:
    """serve.py in a session of its own (a Ctrl-C at the terminal reaches only the chaos run, which stops it);
    everything it says is also kept in ``serve.out`` beside its work dir."""

    def __init__(self, repository: Path, scratch: Path, extra_args: Sequence[str] = (), env: dict | None = None):
        self.ports, self.api_port = free_ports(), free_port()
        self.grpc_url = f"127.0.0.1:{self.ports.grpc}"
        self.api_url = f"http://127.0.0.1:{self.api_port}"
        scratch.mkdir(parents=True, exist_ok=True)
        self.command = [
            sys.executable,
            str(PROJECT_ROOT / "scripts" / "serve.py"),
            *("--model-repository", str(repository), "--host", "127.0.0.1"),
            *("--http-port", str(self.ports.http), "--grpc-port", str(self.ports.grpc)),
            *("--metrics-port", str(self.ports.metrics), "--api-port", str(self.api_port)),
            *("--work-dir", str(scratch / "work"), "--log-file", str(scratch / "tritonserver.log")),
            # No response cache: the load repeats its photos, and a cached answer would never meet the fault.
            *("--response-cache-mib", "0"),
            *extra_args,
        ]
        self.output = scratch / "serve.out"  # all it said, the API's request logs included
        self.started = time.monotonic()
        self.process = subprocess.Popen(
            self.command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
            env=env,
            start_new_session=True,
        )
        self.lines: list[Line] = []
        self._lock = threading.Lock()
        self._seen: dict[int, psutil.Process] = {}  # every descendant ever seen, for the leftover check
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        with open(self.output, "w") as output:
            for raw in self.process.stdout:
                output.write(raw)
                self._take(Line(time.monotonic(), raw.rstrip()))

    def _take(self, line: Line) -> None:
        if line.text.startswith(ECHOED):
            print(f"  serve.py [{line.at - self.started:7.1f} s] {line.text}", flush=True)
        with self._lock:
            self.lines.append(line)

    @property
    def running(self) -> bool:
        return self.process.poll() is None

    @property
    def ending(self) -> str:
        """Why serve.py is ending by itself (its ``error:`` line, or its exit), or "" while it serves."""
        with self._lock:
            said = next((line.text for line in self.lines if line.text.startswith("error:")), "")
        if said:
            return said
        return "" if self.running else f"serve.py exited with status {self.process.returncode}"

    def find(self, fragment: str, after: float, *also: str) -> Line | None:
        """The first line read at or after ``after`` that contains ``fragment`` and every one of ``also``."""
        with self._lock:
            lines = list(self.lines)
        return next(
            (ln for ln in lines if ln.at >= after and fragment in ln.text and all(a in ln.text for a in also)), None
        )

    def wait_until_serving(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while self.find(READY_LINE, 0.0) is None:
            if not self.running or time.monotonic() > deadline:
                said = "\n".join(line.text for line in self.lines[-20:])
                raise RuntimeError(f"serve.py did not get to {READY_LINE!r} (exit code {self.process.poll()}):\n{said}")
            time.sleep(0.2)
        self.snapshot()

    def snapshot(self) -> list[psutil.Process]:
        """serve.py's descendants now (remembered for the leftover check)."""
        try:
            found = psutil.Process(self.process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []
        for process in found:
            self._seen.setdefault(process.pid, process)
        return found

    def child(self, fragment: str) -> psutil.Process | None:
        """serve.py's own child whose command line contains ``fragment`` (tritonserver, food11_api)."""
        try:
            children = psutil.Process(self.process.pid).children()
        except psutil.NoSuchProcess:
            return None
        for process in children:
            try:
                if fragment in " ".join(process.cmdline()):
                    self._seen.setdefault(process.pid, process)
                    return process
            except psutil.NoSuchProcess:
                continue
        return None

    def stubs(self) -> list[Stub]:
        triton = self.child(TRITONSERVER)
        if triton is None:
            return []
        found = stubs_of(triton.pid)
        for stub in found:
            try:
                self._seen.setdefault(stub.pid, psutil.Process(stub.pid))
            except psutil.NoSuchProcess:
                continue
        return found

    def stop(self, timeout_s: float = 120.0) -> Stopped:
        """SIGINT (serve.py stops the API, then Triton), then every process it ever had must be gone."""
        self.snapshot()
        was_running = self.running
        exit_code: int | None
        if was_running:
            os.kill(self.process.pid, signal.SIGINT)
            try:
                exit_code = self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
                exit_code = None
        else:
            exit_code = self.process.returncode
        self._reader.join(timeout=10)
        _, alive = psutil.wait_procs(list(self._seen.values()), timeout=15)
        leftovers = []
        for process in alive:
            try:
                if process.status() == psutil.STATUS_ZOMBIE:
                    continue
                leftovers.append(f"pid {process.pid}: {' '.join(process.cmdline())[:160]}")
                process.kill()
            except psutil.NoSuchProcess:
                continue
        return Stopped(exit_code, was_running, leftovers)
