"""Run the servers in the foreground until Ctrl-C or SIGTERM: ``python scripts/serve.py``.

The model repository is validated first (food11-validate): with an error, Triton is not started.
Then Triton (waiting until it is ready), then the FastAPI front pointed at it; stopped in reverse.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from pipeline_src import PROJECT_ROOT
from pipeline_src.repository.validate import validate_repository
from pipeline_src.serving.launcher import (Ports, ServerStartError, TritonServer, TritonStartError,
                                   stop_process, wait_for_http)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model-repository", type=Path, default=PROJECT_ROOT / "model_repository")
    parser.add_argument("--http-port", type=int, default=8000)
    parser.add_argument("--grpc-port", type=int, default=8001)
    parser.add_argument("--metrics-port", type=int, default=8002)
    parser.add_argument("--work-dir", type=Path, default=PROJECT_ROOT / ".triton",
                        help="where the backend directory is assembled (default: %(default)s)")
    parser.add_argument("--log-file", type=Path, default=PROJECT_ROOT / "logs" / "tritonserver.log")
    parser.add_argument("--tritonserver", type=Path, help="use this tritonserver binary instead of the wheel's")
    parser.add_argument("--ready-timeout", type=float, default=600.0, help="seconds to wait for readiness")
    parser.add_argument("--no-api", action="store_true", help="start Triton only")
    parser.add_argument("--skip-validation", action="store_true",
                        help="start Triton without validating the model repository first (for experts)")
    parser.add_argument("--api-host", default=os.environ.get("FOOD11_API_HOST", "127.0.0.1"),
                        help="API bind address (default: %(default)s; FOOD11_API_HOST)")
    parser.add_argument("--api-port", type=int, default=int(os.environ.get("FOOD11_API_PORT", "8080")),
                        help="API port (default: %(default)s; FOOD11_API_PORT)")
    parser.add_argument("extra", nargs="*", help="more tritonserver flags, after --")
    return parser.parse_args(argv)


class ApiProcess:
    """``python -m food11_api`` as a child process, configured through FOOD11_API_* variables."""

    def __init__(self, host: str, port: int, triton_grpc_url: str):
        self.url = f"http://{host if host != '0.0.0.0' else '127.0.0.1'}:{port}"
        env = dict(os.environ, FOOD11_API_HOST=host, FOOD11_API_PORT=str(port), FOOD11_API_TRITON_URL=triton_grpc_url)
        self.process = subprocess.Popen([sys.executable, "-m", "food11_api"], env=env)

    def wait_until_alive(self, timeout_s: float = 60.0) -> None:
        wait_for_http(self.process, f"{self.url}/healthz", timeout_s, f"the API on {self.url}")

    def stop(self, timeout_s: float = 15.0) -> int:
        return stop_process(self.process, timeout_s)


def validate_or_exit(model_repository: Path) -> None:
    """Refuse to start on a repository with errors: the validator names every fault in a second, where
    Triton would load every step first and then stop on one, in its own words."""
    report = validate_repository(model_repository)
    print(report.text(), file=sys.stdout if report.ok else sys.stderr, flush=True)
    if not report.ok:
        print("error: tritonserver not started: fix the model repository above (or pass --skip-validation)",
              file=sys.stderr, flush=True)
        sys.exit(1)


def main(argv=None) -> None:
    args = parse_args(argv)
    if not args.skip_validation:
        validate_or_exit(args.model_repository)
    server = TritonServer(args.model_repository, args.work_dir, Ports(args.http_port, args.grpc_port, args.metrics_port),
                          log_file=args.log_file, extra_args=tuple(args.extra), binary=args.tritonserver)
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    print(f"tritonserver starting on {args.model_repository} (log: {server.log_file})", flush=True)
    try:
        server.start(args.ready_timeout)
    except TritonStartError as exc:
        print(exc, file=sys.stderr)
        sys.exit(1)
    print(f"tritonserver ready: gRPC {server.grpc_url}, HTTP {server.http_url}, metrics :{args.metrics_port}", flush=True)
    api = None
    if not args.no_api:
        api = ApiProcess(args.api_host, args.api_port, server.grpc_url)
        try:
            api.wait_until_alive()
        except ServerStartError as exc:
            print(f"error: {exc}", file=sys.stderr)
            api.stop()
            server.stop()
            sys.exit(1)
        print(f"API ready: {api.url} (Swagger: {api.url}/docs, photo page: {api.url}/)", flush=True)
    print("Ctrl-C stops everything.", flush=True)
    failed = False
    while not stop.wait(1.0):
        if server.process.poll() is not None or (api and api.process.poll() is not None):
            print(f"a server exited; tritonserver log tail:\n{server.log_tail()}", file=sys.stderr)
            failed = True
            break
    print("stopping ...", flush=True)
    api_code = api.stop() if api else 0
    triton_code = server.stop()
    sys.exit(1 if failed or api_code or triton_code else 0)


if __name__ == "__main__":
    main()
