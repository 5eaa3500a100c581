"""Run the servers in the foreground until Ctrl-C, SIGTERM or SIGHUP: ``python scripts/serve.py``.

The model repository is validated first (food11-validate): with an error, Triton is not started. Every
port is checked free before anything starts. Then Triton (waiting until it is ready), then the FastAPI
front pointed at it; stopped in reverse. Both listen on 127.0.0.1 unless ``--host`` (FOOD11_HOST) says
otherwise, and both die with this process however it ends (the kernel's parent-death signal).

Triton runs under explicit model control with every model loaded at start (``--load-model=*``), so that a model
can be reloaded while it serves; with ``--reload`` (the default) a step is reloaded as soon as its files, or the
``pipeline_src`` code it imports, change (``reload``). While they run, ``supervisor`` keeps them serving: a server
that dies is started again, a step whose stub died is healed (``watchdog``), a crash loop ends this with its reason.
Each option is also an environment variable (``settings.ServeSettings``; docs/configuration.md lists them).
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

from pipeline_src.repository.validate import validate_repository
from pipeline_src.serving import admin
from pipeline_src.serving.launcher import (
    MODEL_CONTROL_FLAG,
    ApiProcess,
    TritonServer,
    chosen_model_control,
    triton_server,
)
from pipeline_src.serving.ports import check_ports_free
from pipeline_src.serving.processes import ServerStartError
from pipeline_src.serving.reload import DEFAULT_PACKAGES, StepReloader, validator_errors
from pipeline_src.serving.settings import ServeSettings, settings_from
from pipeline_src.serving.supervisor import CrashLoop, NotRestarted, StopRequested, Supervisor, ignore, report, stop_on
from pipeline_src.serving.watchdog import NeedsAPerson

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # SIGHUP: the terminal was closed
STOPPED_STUB_NOTE = (
    "note: tritonserver waited out its exit timeout and exited 1: tritonserver 2.51 never finishes unloading a "
    "model version whose stub was stopped with work in flight (its heal loaded a new version, which served); the "
    "old one counts as live until the server exits"
)


def validate_or_exit(model_repository: Path) -> None:
    """Refuse to start on a repository with errors: the validator names every fault in a second, where
    Triton would load every step first and then stop on one, in its own words."""
    validation = validate_repository(model_repository)
    print(validation.text(), file=sys.stdout if validation.ok else sys.stderr, flush=True)
    if not validation.ok:
        sys.exit("error: tritonserver not started: fix the model repository above (or pass --skip-validation)")


def start_reloader(settings: ServeSettings, server: TritonServer) -> StepReloader | None:
    if not settings.reload:
        return None
    mode = chosen_model_control(server.extra_args)
    if mode != "explicit":
        report(f"reload: off: it needs {MODEL_CONTROL_FLAG}=explicit, not {mode}")
        return None
    packages = {**DEFAULT_PACKAGES, **{folder.resolve().name: folder.resolve() for folder in settings.reload_package}}
    reloader = StepReloader(
        server.model_repository,
        server.repository_api,
        packages,
        report=report,
        # a reloaded step makes a new revision: the cached ensembles are uncached while it reloads, then move to
        # the new revision (response_cache)
        before_reload=server.cached_ensembles.uncache if server.caches_responses else None,
        after_reload=server.cache_ensembles if server.caches_responses else None,
        # a change the validator rejects is refused before Triton sees it (as at start, unless skipped)
        validate=None if settings.skip_validation else validator_errors,
    )
    report(
        f"reload: on: a step is reloaded when its files or the code it imports change ({reloader.watch.watched_files} "
        "files watched; --no-reload turns this off)"
    )
    return reloader


def start_api(settings: ServeSettings, server: TritonServer) -> ApiProcess:
    api = ApiProcess(settings.host, settings.api_port, server.grpc_url)
    try:
        api.wait_until_alive()
    except ServerStartError as exc:
        api.stop()
        raise ServerStartError(f"the API did not start: {exc}") from None
    report(f"API ready: {api.url} (Swagger: {api.url}/docs, photo page: {api.url}/)")
    return api


def main(argv=None) -> None:
    settings = settings_from(ServeSettings, argv, __doc__)
    stop_on(STOP_SIGNALS)
    server, api, reloader, supervisor, stopped, running = None, None, None, None, False, False
    try:
        if not settings.skip_validation:
            validate_or_exit(settings.model_repository)
        check_ports_free(
            settings.host,
            {
                "Triton HTTP, --http-port": settings.http_port,
                "Triton gRPC, --grpc-port": settings.grpc_port,
                "Triton metrics, --metrics-port": settings.metrics_port,
                **({} if settings.no_api else {"API, --api-port": settings.api_port}),
            },
        )
        server = triton_server(settings, report)
        key_file = admin.write_key_file(settings.admin_key_file or server.work_dir / "admin-key", server.admin_key)
        report(
            f"tritonserver starting on {settings.model_repository} (log: "
            f"{'this output' if server.log_to_stdout else server.log_file}; its admin APIs need the header "
            f"{admin.HEADER}: the key in {key_file})"
        )
        reloader = start_reloader(settings, server)  # its first look before Triton's: an edit meanwhile is reloaded
        server.start(settings.ready_timeout)
        report(f"tritonserver ready: gRPC {server.grpc_url}, HTTP {server.http_url}, metrics {server.metrics_url}")
        api = None if settings.no_api else start_api(settings, server)
        restart_api = None if settings.no_api else lambda: start_api(settings, server)
        supervisor = Supervisor(server, settings, report, restart_api, reloader, api)
        report("Ctrl-C stops everything.")
        running = True
        supervisor.run()
    except StopRequested as stop:
        report(f"{stop}{'' if running else ' during start-up'}: stopping ...")
        stopped = True
    except (CrashLoop, NotRestarted, NeedsAPerson, ServerStartError) as exc:  # ServerStartError: ports, Triton, API
        print(f"error: {exc}", file=sys.stderr, flush=True)
    finally:
        ignore(STOP_SIGNALS)
        if reloader is not None and reloader.failed_reloads:
            report(
                "note: a reload failed while serving: tritonserver 2.51 keeps counting the failed load as a live "
                "model, so stopping it takes its whole exit timeout (--exit-timeout-secs, 30 s) and ends in an error"
            )
        if supervisor is not None:
            api = supervisor.api  # the one running now, if the first was restarted
            supervisor.watchdog.close()
        codes = [api.stop() if api else 0, server.stop() if server else 0]
        if codes[1] and supervisor is not None and supervisor.watchdog.stopped_stubs_killed:
            healed = supervisor.watchdog.stopped_stubs_killed
            report(f"{STOPPED_STUB_NOTE} ({healed} stopped stub(s) healed while serving)")
    sys.exit(0 if stopped and not any(codes) else 1)


if __name__ == "__main__":
    main()
