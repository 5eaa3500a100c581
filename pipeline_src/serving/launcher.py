"""Start and stop the real ``tritonserver`` that the ``nvidia-pytriton`` wheel bundles.

No Docker needed: the wheel carries the server, the Python backend and one backend stub per Python
version. The stub must sit in the backend directory, so a private one is assembled under
``work_dir`` (site-packages is never written to). Elsewhere (NVIDIA's container) pass ``binary``.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import importlib.util
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path


class ServerStartError(RuntimeError):
    """A server process exited, or did not answer in time."""


class TritonStartError(ServerStartError):
    """tritonserver exited or did not become ready; the message carries the end of its log."""


@dataclass(frozen=True)
class Ports:
    http: int = 8000
    grpc: int = 8001
    metrics: int = 8002


LOOPBACK = "127.0.0.1"


def reachable_host(bind_address: str) -> str:
    """Where a local client reaches a server bound to ``bind_address`` (the wildcard means loopback)."""
    return LOOPBACK if bind_address in ("0.0.0.0", "") else bind_address


def free_port() -> int:
    """A localhost port nobody listens on now (for tests and benchmarks)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def free_ports() -> Ports:
    return Ports(http=free_port(), grpc=free_port(), metrics=free_port())


def http_ok(url: str) -> bool:
    """Whether ``url`` answers 200 now."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


def wait_for_http(process: subprocess.Popen, url: str, timeout_s: float, name: str) -> None:
    """Until ``url`` answers 200; ServerStartError if ``process`` exits first or time runs out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ServerStartError(f"{name} exited with code {process.returncode}")
        if http_ok(url):
            return
        time.sleep(0.25)
    raise ServerStartError(f"{name} not ready after {timeout_s:.0f} s")


class PortInUseError(ServerStartError):
    """A port a server needs is taken, typically by a server left over from an earlier run."""


def check_ports_free(address: str, ports: dict[str, int]) -> None:
    """PortInUseError naming the first taken port, before anything is started.

    Probes bind as the servers will (SO_REUSEADDR, so a socket in TIME_WAIT from a server stopped a
    moment ago does not count as taken); a port taken on the wildcard address also conflicts here.
    """
    for role, port in ports.items():
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((address, port))
            except OSError as exc:
                if exc.errno != errno.EADDRINUSE:
                    raise
                raise PortInUseError(
                    f"port {port} ({role}) on {address} is already in use, perhaps by a server from an earlier "
                    f"run: see who holds it with `ss -ltnp 'sport = :{port}'` and stop it, or pick another port"
                ) from None


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


def stop_process(process: subprocess.Popen, timeout_s: float, whole_group: bool = False) -> int:
    """SIGINT (a graceful shutdown for tritonserver and uvicorn), then SIGKILL if it hangs."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            if whole_group:
                os.killpg(process.pid, signal.SIGKILL)
            else:
                process.kill()
            process.wait()
    return process.returncode


def _pytriton_dir() -> Path:
    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        raise TritonStartError("nvidia-pytriton is not installed: pip install nvidia-pytriton==0.7.0")
    return Path(next(iter(spec.submodule_search_locations)))


def _bundled_backend_dir(work_dir: Path) -> Path:
    """backends/python with the wheel's backend library and the stub for this Python."""
    server_dir = _pytriton_dir() / "tritonserver"
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = server_dir / "python_backend_stubs" / version / "triton_python_backend_stub"
    if not stub.exists():
        raise TritonStartError(f"nvidia-pytriton has no Python backend stub for Python {version}")
    python_backend = work_dir / "backends" / "python"
    python_backend.mkdir(parents=True, exist_ok=True)
    for source in (server_dir / "backends" / "python").iterdir():
        if source.is_file():
            shutil.copy2(source, python_backend / source.name)
    shutil.copy2(stub, python_backend / stub.name)
    return python_backend.parent


def _path_with_python(python: Path) -> str:
    """PATH with ``python``'s bin directory first.

    The stub's embedded interpreter ignores PYTHONPATH (it starts isolated) but finds its prefix from
    ``python3`` on PATH; from a virtualenv's bin it reads ``pyvenv.cfg`` and so imports that
    environment's packages, this project included.
    """
    return os.pathsep.join(filter(None, [str(python.parent), os.environ.get("PATH")]))


class TritonServer:
    """A tritonserver process on a model repository; a context manager that always stops it."""

    def __init__(
        self,
        model_repository: Path,
        work_dir: Path,
        ports: Ports = Ports(),
        log_file: Path | None = None,
        extra_args: tuple[str, ...] = (),
        binary: Path | None = None,
        address: str = LOOPBACK,
        steps_python: Path | None = None,
    ):
        """``steps_python``: the interpreter of the environment the steps import from (a virtualenv holding the
        ``steps`` extra); by default this process's own. It must be the same Python version as this one."""
        self.model_repository = Path(model_repository).resolve()
        self.work_dir = Path(work_dir).resolve()
        self.ports = ports
        # tritonserver listens on every interface unless told: loopback unless the caller says otherwise.
        self.address = address
        self.log_file = Path(log_file or self.work_dir / "tritonserver.log").resolve()
        self.extra_args = tuple(extra_args)
        self.binary = binary
        self.steps_python = Path(steps_python or sys.executable)
        self.process: subprocess.Popen | None = None

    @property
    def pid(self) -> int:
        if self.process is None:
            raise RuntimeError("tritonserver has not been started")
        return self.process.pid

    @property
    def is_running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def http_url(self) -> str:
        return f"{reachable_host(self.address)}:{self.ports.http}"

    @property
    def grpc_url(self) -> str:
        return f"{reachable_host(self.address)}:{self.ports.grpc}"

    @property
    def metrics_url(self) -> str:
        return f"{reachable_host(self.address)}:{self.ports.metrics}"

    def command(self) -> list[str]:
        if self.binary:
            command = [str(self.binary)]
        else:
            command = [
                str(_pytriton_dir() / "tritonserver" / "bin" / "tritonserver"),
                f"--backend-directory={_bundled_backend_dir(self.work_dir)}",
            ]
        return [
            *command,
            f"--model-repository={self.model_repository}",
            f"--http-address={self.address}",
            f"--http-port={self.ports.http}",
            f"--grpc-address={self.address}",
            f"--grpc-port={self.ports.grpc}",
            f"--metrics-address={self.address}",
            f"--metrics-port={self.ports.metrics}",
            *self.extra_args,
        ]

    def environment(self) -> dict[str, str]:
        env = dict(os.environ, PATH=_path_with_python(self.steps_python))
        if not self.binary:
            # This Python's libpython first: the stub must embed the same patch release as the
            # standard library it will import, or extension modules miss symbols.
            libs = [sysconfig.get_config_var("LIBDIR"), str(_pytriton_dir().parent / "nvidia_pytriton.libs")]
            env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [*libs, os.environ.get("LD_LIBRARY_PATH")]))
        return env

    def start(self, ready_timeout_s: float = 300.0) -> TritonServer:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "ab") as log:
            # Own process group: stopping it also stops the backend stubs it spawned.
            self.process = spawn(self.command(), env=self.environment(), stdout=log, stderr=subprocess.STDOUT)
        try:
            self.wait_until_ready(ready_timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def wait_until_ready(self, timeout_s: float) -> None:
        assert self.process is not None, "start() spawns the server first"
        try:
            wait_for_http(self.process, f"http://{self.http_url}/v2/health/ready", timeout_s, "tritonserver")
        except ServerStartError as exc:
            failures = self.load_failures()
            if failures:  # the reason, first line only: the Python traceback under it is in the log
                raise TritonStartError(
                    f"{exc}: a step failed to load:\n"
                    + "\n".join(f"  {model}: {reason}" for model, reason in failures)
                    + f"\n(full log: {self.log_file})"
                ) from None
            raise TritonStartError(f"{exc}; tritonserver log tail:\n{self.log_tail()}") from None

    def load_failures(self) -> list[tuple[str, str]]:
        """(model, reason) for every model whose load failed, from Triton's log."""
        try:
            log = self.log_file.read_text(errors="replace")
        except FileNotFoundError:
            return []
        return re.findall(r"failed to load '([^']+)' version \d+: (.*?)(?:\\n|\"$)", log, flags=re.MULTILINE)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"

    def stop(self, timeout_s: float = 30.0) -> int | None:
        """Graceful shutdown; if it hangs, the whole group (backend stubs included) is killed. Stubs that
        outlive their server (it crashed: they wait for it forever) are killed too."""
        if self.process is None:
            return None
        code = stop_process(self.process, timeout_s, whole_group=True)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        return code

    def __enter__(self) -> TritonServer:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()
