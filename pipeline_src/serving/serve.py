"""Run the servers in the foreground until Ctrl-C, SIGTERM or SIGHUP: ``python scripts/serve.py``.

The model repository is validated first (food11-validate): with an error, Triton is not started. Every
port is checked free before anything starts. Then Triton (waiting until it is ready), then the FastAPI
front pointed at it; stopped in reverse. Both listen on 127.0.0.1 unless ``--host`` (FOOD11_HOST) says
otherwise, and both die with this process however it ends (the kernel's parent-death signal).

Triton runs under explicit model control with every model loaded at start (``--load-model=*``), so that a model
can be reloaded while it serves; with ``--reload`` (the default) a step is reloaded as soon as its files, or the
``pipeline_src`` code it imports, change (``reload``). While they run, ``supervisor`` keeps them serving: a server
that dies is started again, a step whose stub died is healed (``watchdog``), a crash loop ends this with its reason.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

from pipeline_src import PROJECT_ROOT
from pipeline_src.repository.validate import validate_repository
from pipeline_src.serving import admin
from pipeline_src.serving.api_process import ApiProcess
from pipeline_src.serving.launcher import (
    LOOPBACK,
    PortInUseError,
    Ports,
    ServerStartError,
    TritonServer,
    TritonStartError,
    check_ports_free,
)
from pipeline_src.serving.model_control import MODEL_CONTROL_FLAG, chosen_model_control, model_control_args
from pipeline_src.serving.reload import DEFAULT_PACKAGES, StepReloader, validator_errors
from pipeline_src.serving.repository_api import TritonRepositoryApi
from pipeline_src.serving.response_cache import (
    DEFAULT_RESPONSE_CACHE_MIB,
    RESPONSE_CACHE_ENV,
    cache_flags,
    local_cache_args,
)
from pipeline_src.serving.supervisor import CrashLoop, RestartBudget, Supervisor
from pipeline_src.serving.watchdog import NeedsAPerson, StubWatchdog

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # SIGHUP: the terminal was closed
STOPPED_STUB_NOTE = (
    "note: tritonserver waited out its exit timeout and exited 1: tritonserver 2.51 never finishes unloading a "
    "model version whose stub was stopped with work in flight (its heal loaded a new version, which served); the "
    "old one counts as live until the server exits"
)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model-repository", type=Path, default=PROJECT_ROOT / "model_repository")
    parser.add_argument("--http-port", type=int, default=8000)
    parser.add_argument("--grpc-port", type=int, default=8001)
    parser.add_argument("--metrics-port", type=int, default=8002)
    parser.add_argument(
        "--work-dir",
        type=Path,
        default=PROJECT_ROOT / ".triton",
        help="where the backend directory is assembled (default: %(default)s)",
    )
    parser.add_argument("--log-file", type=Path, default=PROJECT_ROOT / "logs" / "tritonserver.log")
    parser.add_argument("--tritonserver", type=Path, help="use this tritonserver binary instead of the wheel's")
    parser.add_argument("--ready-timeout", type=float, default=600.0, help="seconds to wait for readiness")
    parser.add_argument("--no-api", action="store_true", help="start Triton only")
    parser.add_argument(
        "--skip-validation",
        action="store_true",
        help="start Triton without validating the model repository first (for experts)",
    )
    parser.add_argument(
        "--host",
        default=os.environ.get("FOOD11_HOST", LOOPBACK),
        help="bind address of every server, Triton's HTTP, gRPC and metrics and the API's "
        "(default: %(default)s, this machine only; 0.0.0.0 serves the network; FOOD11_HOST)",
    )
    parser.add_argument(
        "--api-port",
        type=int,
        default=int(os.environ.get("FOOD11_API_PORT", "8080")),
        help="API port (default: %(default)s; FOOD11_API_PORT)",
    )
    parser.add_argument(
        "--admin-key-file",
        type=Path,
        help="where the key of Triton's admin APIs (loading models, shared memory, trace and log settings) is "
        f"written for this machine's tools, readable by this user only: {admin.KEY_ENV}, else a new one at each "
        "start (default: admin-key in --work-dir)",
    )
    parser.add_argument(
        "--reload",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="reload a step in Triton when its model folder or the pipeline_src code it imports changes, "
        "as a web framework's development server does (default: on; --no-reload for a steady server)",
    )
    parser.add_argument(
        "--reload-package",
        type=Path,
        action="append",
        default=[],
        metavar="DIR",
        help="one more package folder whose modules the steps import (food11-new-step's --source-dir), watched "
        "like pipeline_src; repeatable",
    )
    parser.add_argument(
        "--restart-limit",
        type=int,
        default=5,
        help="restarts in a row of tritonserver (and of the API), each within a minute of the last, before a crash "
        "loop ends this "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--heal-limit",
        type=int,
        default=3,
        help="heals in a row of one step whose stub died, each within a minute of the last, before its next death "
        "ends this "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--response-cache-mib",
        type=int,
        default=int(os.environ.get(RESPONSE_CACHE_ENV, DEFAULT_RESPONSE_CACHE_MIB)),
        help="Triton's local response cache, in MiB, for every ensemble: a photo asked again is answered from it "
        "(docs/api.md, 'Answers from the cache'); 0: off; a --cache-config after -- (Redis, in NVIDIA's image) "
        f"replaces it (default: %(default)s; {RESPONSE_CACHE_ENV})",
    )
    parser.add_argument("extra", nargs="*", help="more tritonserver flags, after --")
    return parser.parse_args(argv)


def cache_args(args) -> tuple[str, ...]:
    """The local cache of --response-cache-mib, unless the tritonserver flags configure a cache themselves."""
    return () if cache_flags(args.extra) else local_cache_args(args.response_cache_mib)


def validate_or_exit(model_repository: Path) -> None:
    """Refuse to start on a repository with errors: the validator names every fault in a second, where
    Triton would load every step first and then stop on one, in its own words."""
    report = validate_repository(model_repository)
    print(report.text(), file=sys.stdout if report.ok else sys.stderr, flush=True)
    if not report.ok:
        print(
            "error: tritonserver not started: fix the model repository above (or pass --skip-validation)",
            file=sys.stderr,
            flush=True,
        )
        sys.exit(1)


class StopRequested(Exception):
    """A stop signal arrived; raised in the main thread wherever it is, start-up included."""


def _stop_requested(signum, _frame):
    raise StopRequested(signal.Signals(signum).name)


def _ignore_further_stop_signals() -> None:
    """While stopping: a second Ctrl-C must not interrupt the orderly shutdown with a traceback."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)


def start_reloader(args, server: TritonServer) -> StepReloader | None:
    if not args.reload:
        return None
    mode = chosen_model_control(server.extra_args)
    if mode != "explicit":
        print(f"reload: off: it needs {MODEL_CONTROL_FLAG}=explicit, not {mode}", flush=True)
        return None
    packages = {**DEFAULT_PACKAGES, **{folder.resolve().name: folder.resolve() for folder in args.reload_package}}
    reloader = StepReloader(
        server.model_repository,
        TritonRepositoryApi(server.http_url, server.admin_http_headers),
        packages,
        report=lambda line: print(line, flush=True),
        # a reloaded step makes a new revision: the cached ensembles are uncached while it reloads, then move to
        # the new revision (response_cache)
        before_reload=server.cached_ensembles.uncache if server.caches_responses else None,
        after_reload=server.cache_ensembles if server.caches_responses else None,
        # a change the validator rejects is refused before Triton sees it (as at start, unless skipped)
        validate=None if args.skip_validation else validator_errors,
    )
    print(
        f"reload: on: a step is reloaded when its files or the code it imports change ({reloader.watch.watched_files} "
        "files watched; --no-reload turns this off)",
        flush=True,
    )
    return reloader


def report(line: str) -> None:
    print(line, flush=True)


def start_api(args, server: TritonServer) -> ApiProcess:
    api = ApiProcess(args.host, args.api_port, server.grpc_url)
    try:
        api.wait_until_alive()
    except ServerStartError as exc:
        api.stop()
        raise ServerStartError(f"the API did not start: {exc}") from None
    print(f"API ready: {api.url} (Swagger: {api.url}/docs, photo page: {api.url}/)", flush=True)
    return api


def main(argv=None) -> None:
    args = parse_args(argv)
    for signum in STOP_SIGNALS:
        signal.signal(signum, _stop_requested)
    server, api, reloader, supervisor, stopped, running = None, None, None, None, False, False
    try:
        if not args.skip_validation:
            validate_or_exit(args.model_repository)
        ports = Ports(args.http_port, args.grpc_port, args.metrics_port)
        check_ports_free(
            args.host,
            {
                "Triton HTTP, --http-port": ports.http,
                "Triton gRPC, --grpc-port": ports.grpc,
                "Triton metrics, --metrics-port": ports.metrics,
                **({} if args.no_api else {"API, --api-port": args.api_port}),
            },
        )
        server = TritonServer(
            args.model_repository,
            args.work_dir,
            ports,
            log_file=args.log_file,
            extra_args=(*model_control_args(tuple(args.extra)), *cache_args(args), *args.extra),
            binary=args.tritonserver,
            address=args.host,
            report=report,
        )
        key_file = admin.write_key_file(args.admin_key_file or args.work_dir / "admin-key", server.admin_key)
        print(
            f"tritonserver starting on {args.model_repository} (log: {server.log_file}; its admin APIs need the "
            f"header {admin.HEADER}: the key in {key_file})",
            flush=True,
        )
        reloader = start_reloader(args, server)  # its first look before Triton's: an edit meanwhile is reloaded
        server.start(args.ready_timeout)
        print(
            f"tritonserver ready: gRPC {server.grpc_url}, HTTP {server.http_url}, metrics {server.metrics_url}",
            flush=True,
        )
        api = None if args.no_api else start_api(args, server)
        supervisor = Supervisor(
            server,
            StubWatchdog(
                lambda: server.pid,
                TritonRepositoryApi(server.http_url, server.admin_http_headers),
                report,
                max_heals=args.heal_limit,
            ),
            report,
            start_api=None if args.no_api else lambda: start_api(args, server),
            reloader=reloader,
            ready_timeout_s=args.ready_timeout,
            triton_budget=RestartBudget("tritonserver", args.restart_limit),
            api_budget=RestartBudget("the API", args.restart_limit),
            api=api,
        )
        print("Ctrl-C stops everything.", flush=True)
        running = True
        supervisor.run()
    except StopRequested as stop:
        print(f"{stop}{'' if running else ' during start-up'}: stopping ...", flush=True)
        stopped = True
    except (CrashLoop, NeedsAPerson) as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
    except (PortInUseError, TritonStartError, ServerStartError) as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
    finally:
        _ignore_further_stop_signals()
        if reloader is not None and reloader.failed_reloads:
            print(
                "note: a reload failed while serving: tritonserver 2.51 keeps counting the failed load as a live "
                "model, so stopping it takes its whole exit timeout (--exit-timeout-secs, 30 s) and ends in an error",
                flush=True,
            )
        if supervisor is not None:
            api = supervisor.api  # the one running now, if the first was restarted
            supervisor.watchdog.close()
        codes = [api.stop() if api else 0, server.stop() if server else 0]
        if codes[1] and supervisor is not None and supervisor.watchdog.stopped_stubs_killed:
            healed = supervisor.watchdog.stopped_stubs_killed
            print(f"{STOPPED_STUB_NOTE} ({healed} stopped stub(s) healed while serving)", flush=True)
    sys.exit(0 if stopped and not any(codes) else 1)


if __name__ == "__main__":
    main()
