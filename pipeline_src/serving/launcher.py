"""Start and stop the real ``tritonserver`` that the ``nvidia-pytriton`` wheel bundles (``TritonServer``).

The wheel's server needs no Docker (``triton_binary`` finds it and assembles its backend directory under
``work_dir``); elsewhere (NVIDIA's container) pass ``binary``. Ports, errors and process helpers live in
their own modules (``ports``, ``errors``, ``processes``) and are re-exported here for the code that imports them.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from pipeline_src.contract import RESPONSES_CACHED_ENV
from pipeline_src.serving import admin
from pipeline_src.serving.errors import PortInUseError, ServerStartError, TritonStartError
from pipeline_src.serving.model_control import chosen_model_control
from pipeline_src.serving.ports import LOOPBACK, Ports, check_ports_free, free_port, free_ports, reachable_host
from pipeline_src.serving.processes import spawn, stop_process, wait_for_http
from pipeline_src.serving.repository_api import TritonRepositoryApi
from pipeline_src.serving.response_cache import CachedEnsembles, cache_flags
from pipeline_src.serving.triton_binary import bundled_command, bundled_library_path, path_with_python

# serve.py, tests, benchmarks and deploy/ import these from here.
__all__ = [
    "LOOPBACK",
    "PortInUseError",
    "Ports",
    "ServerStartError",
    "TritonServer",
    "TritonStartError",
    "check_ports_free",
    "free_port",
    "free_ports",
    "reachable_host",
    "spawn",
    "stop_process",
    "wait_for_http",
]

DEFAULT_PORTS = Ports()  # 8000, 8001, 8002; frozen, so every server may share it as its default


class TritonServer:
    """A tritonserver process on a model repository; a context manager that always stops it."""

    def __init__(
        self,
        model_repository: Path,
        work_dir: Path,
        ports: Ports = DEFAULT_PORTS,
        log_file: Path | None = None,
        extra_args: tuple[str, ...] = (),
        binary: Path | None = None,
        address: str = LOOPBACK,
        steps_python: Path | None = None,
        admin_key: str | None = None,
        log_to_stdout: bool = False,
        report: Callable[[str], None] = print,
    ):
        """``steps_python``: the interpreter of the environment the steps import from (a virtualenv holding the
        ``steps`` extra); by default this process's own. It must be the same Python version as this one.
        ``admin_key``: what a caller of Triton's admin APIs must present (``admin``); by default
        FOOD11_TRITON_ADMIN_KEY, else a new one, which ``admin_http_headers`` and ``admin_grpc_headers`` carry.
        A ``--cache-config`` among ``extra_args`` turns on the response cache for every ensemble once the server is
        ready (``response_cache``: it needs explicit model control); ``report`` says how that went."""
        self.model_repository = Path(model_repository).resolve()
        self.work_dir = Path(work_dir).resolve()
        self.ports = ports
        # tritonserver listens on every interface unless told: loopback unless the caller says otherwise.
        self.address = address
        self.log_file = Path(log_file or self.work_dir / "tritonserver.log").resolve()
        self.extra_args = tuple(extra_args)
        self.binary = binary
        self.steps_python = Path(steps_python or sys.executable)
        self.admin_key = admin_key or admin.key_from_environment()
        self.log_to_stdout = log_to_stdout  # a container's log is its output: no file then
        self.report = report
        self.process: subprocess.Popen | None = None

    @property
    def caches_responses(self) -> bool:
        return bool(cache_flags(self.extra_args))

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

    @property
    def admin_http_headers(self) -> dict[str, str]:
        return admin.http_headers(self.admin_key)

    @property
    def admin_grpc_headers(self) -> dict[str, str]:
        """``headers=`` for tritonclient.grpc's load_model, unload_model, update_trace_settings and the like."""
        return admin.grpc_headers(self.admin_key)

    def command(self) -> list[str]:
        command = [str(self.binary)] if self.binary else bundled_command(self.work_dir)
        return [
            *command,
            f"--model-repository={self.model_repository}",
            f"--http-address={self.address}",
            f"--http-port={self.ports.http}",
            f"--grpc-address={self.address}",
            f"--grpc-port={self.ports.grpc}",
            f"--metrics-address={self.address}",
            f"--metrics-port={self.ports.metrics}",
            *admin.restricted_args(self.admin_key),
            *self.extra_args,
        ]

    def environment(self) -> dict[str, str]:
        env = dict(os.environ, PATH=path_with_python(self.steps_python))
        if not self.binary:  # the wheel's server: its stub embeds this Python (triton_binary says why)
            env["LD_LIBRARY_PATH"] = bundled_library_path()
        if self.caches_responses:
            env[RESPONSES_CACHED_ENV] = "1"
        else:
            env.pop(RESPONSES_CACHED_ENV, None)
        return env

    def start(self, ready_timeout_s: float = 300.0) -> TritonServer:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        if self.log_to_stdout:
            # Own process group: stopping it also stops the backend stubs it spawned.
            self.process = spawn(self.command(), env=self.environment())
        else:
            self.log_file.parent.mkdir(parents=True, exist_ok=True)
            with open(self.log_file, "ab") as log:
                self.process = spawn(self.command(), env=self.environment(), stdout=log, stderr=subprocess.STDOUT)
        try:
            self.wait_until_ready(ready_timeout_s)
            if self.caches_responses:
                self.cache_ensembles()
        except BaseException:
            self.stop()
            raise
        return self

    @property
    def cached_ensembles(self) -> CachedEnsembles:
        return CachedEnsembles(
            self.model_repository, TritonRepositoryApi(self.http_url, self.admin_http_headers), self.report
        )

    def cache_ensembles(self) -> None:
        """Every loaded ensemble at the repository's revision with the response cache on (response_cache.py)."""
        mode = chosen_model_control(self.extra_args)
        if mode != "explicit":
            self.report(f"response cache: off: turning it on needs --model-control-mode=explicit, not {mode}")
            return
        self.cached_ensembles.refresh()

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
