"""Start and stop the servers: the real ``tritonserver`` that the ``nvidia-pytriton`` wheel bundles
(``TritonServer``; ``triton_server``: as the serving settings say, for ``make serve`` and the Triton container),
and the FastAPI front (``ApiProcess``).

The wheel's server needs no Docker (``triton_binary`` finds it and assembles its backend directory under
``work_dir``); elsewhere (NVIDIA's container) pass ``binary``.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import astuple
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline_src.contract import RESPONSES_CACHED_ENV
from pipeline_src.serving import admin
from pipeline_src.serving.ports import LOOPBACK, Ports, reachable_host
from pipeline_src.serving.processes import ServerStartError, TritonStartError, spawn, stop_process, wait_for_http
from pipeline_src.serving.repository_api import TritonRepositoryApi
from pipeline_src.serving.response_cache import CachedEnsembles, cache_flags, local_cache_args
from pipeline_src.serving.triton_binary import bundled_command, bundled_library_path, path_with_python

if TYPE_CHECKING:  # the settings' packages are the supervisor's; tests and benchmarks start servers without them
    from pipeline_src.serving.settings import ServeSettings

DEFAULT_PORTS = Ports()  # 8000, 8001, 8002; frozen, so every server may share it as its default

# Model control: explicit, every model loaded at start, unless the flags given choose a mode. Explicit control lets
# a model be unloaded and loaded while serving (the reload watcher, the stub watchdog); loading every model at start
# keeps what Triton's default mode did: all served, ready only once all loaded, a failed load ends the start.
MODEL_CONTROL_FLAG = "--model-control-mode"
EXPLICIT_MODEL_CONTROL = (f"{MODEL_CONTROL_FLAG}=explicit", "--load-model=*")


def chosen_model_control(extra: Sequence[str]) -> str | None:
    """The model control mode the extra tritonserver flags choose, if they do."""
    found = re.search(rf"(?:^| ){MODEL_CONTROL_FLAG}[= ](\S+)", " ".join(extra))
    return found.group(1) if found else None


def model_control_args(extra: Sequence[str]) -> tuple[str, ...]:
    """Explicit model control with every model loaded, unless the extra tritonserver flags choose a mode."""
    return () if chosen_model_control(extra) else EXPLICIT_MODEL_CONTROL


# The Python backend's stubs talk to tritonserver through regions in /dev/shm (memory, not disk). A server that stops
# cleanly removes its own; one killed (or crashed) leaves them there for good, so each server gets a prefix of its
# own (python_backend's ``shm-region-prefix-name``, a uuid follows it) and ``stop`` removes what is left under it.
SHM_DIR = Path("/dev/shm")
SHM_PREFIX_CONFIG = "shm-region-prefix-name="


def remove_shared_memory(prefix: str, shm_dir: Path = SHM_DIR) -> int:
    """Remove the regions whose names start with ``prefix`` (letters, digits and ``_``): how many there were."""
    removed = 0
    for region in shm_dir.glob(f"{prefix}*"):
        with contextlib.suppress(FileNotFoundError):
            region.unlink()
            removed += 1
    return removed


ADDRESS_FLAG = re.compile(r"--(http|grpc|metrics)-address=(\S+)")


def triton_server(settings: ServeSettings, report: Callable[[str], None], binary: Path | None = None) -> TritonServer:
    """tritonserver as the serving settings say; ``binary`` where they name none. Its flags: model control, the
    ONNX steps' config name, the local response cache unless the tritonserver flags configure one (Redis), then
    those flags. An ``--http-address`` among them binds the HTTP, gRPC and metrics endpoints alike (TRITON_ARGS on
    a host network)."""
    addresses = {kind: value for argument in settings.triton_args for kind, value in ADDRESS_FLAG.findall(argument)}
    extra = [argument for argument in settings.triton_args if not ADDRESS_FLAG.fullmatch(argument)]
    return TritonServer(
        settings.model_repository,
        settings.work_dir or Path(tempfile.mkdtemp(prefix="food11-triton-")),
        Ports(settings.http_port, settings.grpc_port, settings.metrics_port),
        log_file=settings.log_file,
        log_to_stdout=settings.log_file is None,
        extra_args=(
            *model_control_args(extra),
            *([f"--model-config-name={settings.triton_config}"] if settings.triton_config else []),
            *(() if cache_flags(extra) else local_cache_args(settings.response_cache_mib)),
            *extra,  # last, so that it wins
        ),
        binary=settings.tritonserver or binary,
        address=addresses.get("http", settings.host),
        admin_key=settings.admin_key(),
        report=report,
    )


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
        host = reachable_host(address)  # where a client on this machine reaches it
        self.http_url, self.grpc_url, self.metrics_url = (f"{host}:{port}" for port in astuple(ports))
        self.log_file = Path(log_file or self.work_dir / "tritonserver.log").resolve()
        self.extra_args = tuple(extra_args)
        self.caches_responses = bool(cache_flags(self.extra_args))
        self.binary = binary
        self.steps_python = Path(steps_python or sys.executable)
        self.admin_key = admin_key or os.environ.get(admin.KEY_ENV) or admin.new_key()
        self.admin_http_headers = admin.http_headers(self.admin_key)
        # headers= for tritonclient.grpc's load_model, unload_model, update_trace_settings and the like
        self.admin_grpc_headers = admin.grpc_headers(self.admin_key)
        self.repository_api = TritonRepositoryApi(self.http_url, self.admin_http_headers)
        self.cached_ensembles = CachedEnsembles(self.model_repository, self.repository_api, report)
        self.log_to_stdout = log_to_stdout  # a container's log is its output: no file then
        self.report = report
        self.process: subprocess.Popen | None = None
        # None where the flags name a prefix of their own: their regions are the caller's to look after
        self.shm_prefix = (
            None
            if any(SHM_PREFIX_CONFIG in argument for argument in self.extra_args)
            else f"triton_python_backend_shm_region_food11_{secrets.token_hex(4)}_"
        )

    @property
    def pid(self) -> int:
        if self.process is None:
            raise RuntimeError("tritonserver has not been started")
        return self.process.pid

    @property
    def is_running(self) -> bool:
        return self.process is not None and self.process.poll() is None

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
            *([f"--backend-config=python,{SHM_PREFIX_CONFIG}{self.shm_prefix}"] if self.shm_prefix else []),
            *self.extra_args,
        ]

    def environment(self) -> dict[str, str]:
        env = dict(os.environ, PATH=path_with_python(self.steps_python))
        env.pop(admin.KEY_ENV, None)  # the server has its key in its flags; its steps never see it
        env.pop(RESPONSES_CACHED_ENV, None)  # this server's to say, not its caller's
        if not self.binary:  # the wheel's server: its stub embeds this Python (triton_binary says why)
            env["LD_LIBRARY_PATH"] = bundled_library_path()
        if self.caches_responses:
            env[RESPONSES_CACHED_ENV] = "1"
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
            # (model, reason) for every model whose load failed, from Triton's log
            pattern = r"failed to load '([^']+)' version \d+: (.*?)(?:\\n|\"$)"
            failures = re.findall(pattern, self.log() or "", flags=re.MULTILINE)
            if failures:  # the reason, first line only: the Python traceback under it is in the log
                raise TritonStartError(
                    f"{exc}: a step failed to load:\n"
                    + "\n".join(f"  {model}: {reason}" for model, reason in failures)
                    + f"\n(full log: {self.log_file})"
                ) from None
            raise TritonStartError(f"{exc}; tritonserver log tail:\n{self.log_tail()}") from None

    def log(self) -> str | None:
        """Triton's log; None before it wrote one."""
        with contextlib.suppress(FileNotFoundError):
            return self.log_file.read_text(errors="replace")
        return None

    def log_tail(self, lines: int = 40) -> str:
        log = self.log()
        return "(no log)" if log is None else "\n".join(log.splitlines()[-lines:])

    def stop(self, timeout_s: float = 30.0) -> int | None:
        """Graceful shutdown, killed if it hangs; then the rest of its group is killed: backend stubs that outlive
        their server (it crashed or hung: they wait for it forever)."""
        if self.process is None:
            return None
        code = stop_process(self.process, timeout_s)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        if self.shm_prefix and (left := remove_shared_memory(self.shm_prefix)):
            self.report(f"tritonserver: removed the {left} shared-memory region(s) its stubs left in {SHM_DIR}")
        return code

    def __enter__(self) -> TritonServer:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()


class ApiProcess:
    """``python -m food11_api`` as a child process, configured through FOOD11_API_* variables: ``make serve``'s,
    the benchmarks' and the tests'."""

    def __init__(self, host: str, port: int, triton_grpc_url: str, **settings: object):
        """``settings``: more of the API's settings by name (``max_in_flight=16``: FOOD11_API_MAX_IN_FLIGHT)."""
        self.url = f"http://{reachable_host(host)}:{port}"
        env = dict(os.environ, FOOD11_API_HOST=host, FOOD11_API_PORT=str(port), FOOD11_API_TRITON_URL=triton_grpc_url)
        env |= {f"FOOD11_API_{name.upper()}": str(value) for name, value in settings.items()}
        self.process = spawn([sys.executable, "-m", "food11_api"], env=env)

    def wait_until_alive(self, timeout_s: float = 60.0) -> None:
        wait_for_http(self.process, f"{self.url}/healthz", timeout_s, f"the API on {self.url}")

    def stop(self, timeout_s: float = 15.0) -> int:
        return stop_process(self.process, timeout_s)
