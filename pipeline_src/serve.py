"""Run tritonserver in the foreground until Ctrl-C or SIGTERM: ``python scripts/start_triton.py``."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from pipeline_src.launcher import PROJECT_ROOT, Ports, TritonServer, TritonStartError


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
    parser.add_argument("extra", nargs="*", help="more tritonserver flags, after --")
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
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
    print(f"tritonserver ready: gRPC {server.grpc_url}, HTTP {server.http_url}, metrics :{args.metrics_port}. "
          "Ctrl-C stops it.", flush=True)
    while not stop.wait(1.0):
        if server.process.poll() is not None:
            print(f"tritonserver exited with code {server.process.returncode}:\n{server.log_tail()}", file=sys.stderr)
            sys.exit(1)
    print("stopping tritonserver ...", flush=True)
    sys.exit(0 if server.stop() == 0 else 1)


if __name__ == "__main__":
    main()
