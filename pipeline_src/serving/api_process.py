"""The FastAPI front as a child process of ``make serve``, the benchmarks and the tests."""

from __future__ import annotations

import os
import sys

from pipeline_src.serving.ports import reachable_host
from pipeline_src.serving.processes import spawn, stop_process, wait_for_http


class ApiProcess:
    """``python -m food11_api`` as a child process, configured through FOOD11_API_* variables."""

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
