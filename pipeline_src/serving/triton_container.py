"""The Triton image's command (Dockerfile.triton): tritonserver under the same supervisor as ``make serve``.

A tritonserver that dies is started again, a step whose stub process died or stopped is healed
(``supervisor``, ``watchdog``); a crash loop ends the container with the reason, so that compose's restart
policy or Kubernetes restarts it (Docker does not restart a container that is merely unhealthy: this is what
does). Triton's log is the container's output. Settings, from the environment:

- ``FOOD11_TRITON_ADMIN_KEY``: the key of Triton's admin APIs (``admin``); unset or empty, a random one, never
  printed. Taken out of the environment before tritonserver starts: its steps do not inherit it.
- ``TRITON_CONFIG``: the ONNX steps' config name (``--model-config-name``), e.g. ``onnxruntime``; empty: the
  Python-backend ``config.pbtxt``.
- ``TRITON_ARGS``: more tritonserver flags, split on spaces; an ``--http-address`` there binds the HTTP, gRPC and
  metrics endpoints alike (default: every interface, as tritonserver's own).
- ``FOOD11_MODEL_REPOSITORY``: the repository, ``/models`` by default.
- ``FOOD11_RESPONSE_CACHE_MIB``: Triton's local response cache for the ensembles, in MiB (64; 0: off), unless
  ``TRITON_ARGS`` has a ``--cache-config`` (Redis in NVIDIA's image): ``response_cache``.
- ``FOOD11_BLIP``, ``FOOD11_CLASSIFIER``: the weights to serve, as `make serve`'s BLIP and CLASSIFIER; unset, what
  the repository holds. Checked against its manifests before tritonserver starts, built there when they differ
  and the image can build (``container_models``), else the container exits with the reason (status 64).

SIGTERM (``docker stop``, Kubernetes) or SIGINT stops tritonserver cleanly.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import sys
import tempfile
from collections.abc import MutableMapping
from dataclasses import dataclass
from pathlib import Path

from pipeline_src.serving import admin
from pipeline_src.serving.container_models import ModelsNotServable, RequestedModels, ensure_models
from pipeline_src.serving.errors import ServerStartError
from pipeline_src.serving.launcher import TritonServer
from pipeline_src.serving.model_control import model_control_args
from pipeline_src.serving.repository_api import TritonRepositoryApi
from pipeline_src.serving.response_cache import (
    DEFAULT_RESPONSE_CACHE_MIB,
    RESPONSE_CACHE_ENV,
    cache_flags,
    local_cache_args,
)
from pipeline_src.serving.supervisor import CrashLoop, Supervisor
from pipeline_src.serving.watchdog import NeedsAPerson, StubWatchdog

EXIT_BAD_SETTING = 64  # EX_USAGE
ADDRESS_FLAG = re.compile(r"--(http|grpc|metrics)-address=(\S+)")
EVERY_INTERFACE = "0.0.0.0"


@dataclass(frozen=True)
class ContainerSettings:
    key: str
    address: str
    extra_args: tuple[str, ...]  # after the launcher's own: model control, the config name, TRITON_ARGS
    model_repository: Path
    models: RequestedModels


def settings_from(environ: MutableMapping[str, str]) -> ContainerSettings:
    """The settings, from (and out of) ``environ``: the key is removed from it. ValueError for a key Triton
    cannot take."""
    key = environ.pop(admin.KEY_ENV, "") or admin.new_key()
    admin.restricted_args(key)  # raises on a key Triton's flag syntax cannot carry
    triton_args = environ.get("TRITON_ARGS", "").split()
    addresses = {kind: value for argument in triton_args for kind, value in ADDRESS_FLAG.findall(argument)}
    config = environ.get("TRITON_CONFIG", "")
    cache_mib = int(environ.get(RESPONSE_CACHE_ENV, DEFAULT_RESPONSE_CACHE_MIB))
    extra = (
        *([f"--model-config-name={config}"] if config else []),
        # Triton's local response cache, unless TRITON_ARGS configure one (Redis: docs/deployment.md)
        *(() if cache_flags(triton_args) else local_cache_args(cache_mib)),
        *(argument for argument in triton_args if not ADDRESS_FLAG.fullmatch(argument)),
    )
    return ContainerSettings(
        key=key,
        address=addresses.get("http", EVERY_INTERFACE),
        extra_args=(*model_control_args(extra), *extra),
        model_repository=Path(environ.get("FOOD11_MODEL_REPOSITORY", "/models")),
        models=RequestedModels.from_environ(environ),
    )


class Stop(Exception):
    pass


def _stop(signum, _frame):
    raise Stop(signal.Signals(signum).name)


def report(line: str) -> None:
    print(line, flush=True)


def main() -> None:
    try:
        settings = settings_from(os.environ)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        sys.exit(EXIT_BAD_SETTING)
    try:
        ensure_models(settings.model_repository, settings.models, report)
    except ModelsNotServable as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        sys.exit(EXIT_BAD_SETTING)
    binary = shutil.which("tritonserver")
    server = TritonServer(
        settings.model_repository,
        Path(tempfile.mkdtemp(prefix="food11-triton-")),
        binary=Path(binary) if binary else None,
        address=settings.address,
        extra_args=settings.extra_args,
        admin_key=settings.key,
        log_to_stdout=True,
    )
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _stop)
    code = 0
    try:
        server.start(ready_timeout_s=float(os.environ.get("FOOD11_READY_TIMEOUT_S", "1800")))
        report("supervisor: tritonserver ready; watching it and its steps")
        watchdog = StubWatchdog(
            lambda: server.pid, TritonRepositoryApi(server.http_url, server.admin_http_headers), report
        )
        Supervisor(server, watchdog, report).run()
    except Stop as stop:
        report(f"{stop}: stopping tritonserver ...")
    except (CrashLoop, NeedsAPerson, ServerStartError) as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        code = 1
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, signal.SIG_IGN)
        stopped = server.stop()
    sys.exit(code or (1 if stopped else 0))


if __name__ == "__main__":
    main()
