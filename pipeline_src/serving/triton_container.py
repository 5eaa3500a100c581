"""The Triton image's command (Dockerfile.triton): tritonserver under the same supervisor as ``make serve``, but
restarted by whoever runs the container, not in it.

A step whose stub process died or stopped is healed in place (``watchdog``: Triton does not see it, so nothing
outside would). A tritonserver that dies ends the container with its cause and status 1, so that Compose's
``restart:`` policy or Kubernetes starts a new one, with their backoff (``restart_limit`` 0; a crash loop of a step
ends it the same way). Triton's log is the container's output.

Settings: ``settings.ContainerSettings``, from the environment (or flags): make serve's, with the container's
defaults (``/models``, every interface, no in-container restart); docs/configuration.md lists them. Besides:

- ``FOOD11_TRITON_ADMIN_KEY``: the key of Triton's admin APIs (``admin``); unset or empty, a random one, never
  printed. Its steps do not inherit it.
- ``TRITON_ARGS``: an ``--http-address`` there binds the HTTP, gRPC and metrics endpoints alike.
- ``FOOD11_BLIP``, ``FOOD11_CLASSIFIER``: checked against the repository's manifests before tritonserver starts,
  built there when they differ and the image can build (``container_models``), else the container exits with the
  reason (status 64), as for any setting it cannot run with.

SIGTERM (``docker stop``, Kubernetes) or SIGINT stops tritonserver cleanly.
"""

from __future__ import annotations

import shutil
import signal
import sys
from pathlib import Path

from pipeline_src.serving.container_models import ModelsNotServable, RequestedModels, ensure_models
from pipeline_src.serving.launcher import triton_server
from pipeline_src.serving.processes import ServerStartError
from pipeline_src.serving.settings import EXIT_BAD_SETTING, ContainerSettings, settings_from
from pipeline_src.serving.supervisor import CrashLoop, NotRestarted, StopRequested, Supervisor, ignore, report, stop_on
from pipeline_src.serving.watchdog import NeedsAPerson

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def main(argv=None) -> None:
    settings = settings_from(ContainerSettings, argv, __doc__)
    try:
        ensure_models(settings.model_repository, RequestedModels(settings.blip, settings.classifier), report)
    except ModelsNotServable as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        sys.exit(EXIT_BAD_SETTING)
    on_path = shutil.which("tritonserver")  # NVIDIA's, in the image
    server = triton_server(settings, report, binary=Path(on_path) if on_path else None)
    stop_on(STOP_SIGNALS)
    code = 0
    try:
        server.start(settings.ready_timeout)
        report("supervisor: tritonserver ready; watching it and its steps")
        Supervisor(server, settings, report).run()
    except StopRequested as stop:
        report(f"{stop}: stopping tritonserver ...")
    except NotRestarted as exc:
        print(
            f"error: {exc}: the container ends, for its restart policy to start it again", file=sys.stderr, flush=True
        )
        code = 1
    except (CrashLoop, NeedsAPerson, ServerStartError) as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        code = 1
    finally:
        ignore(STOP_SIGNALS)
        stopped = server.stop()
    sys.exit(code or (1 if stopped else 0))


if __name__ == "__main__":
    main()
