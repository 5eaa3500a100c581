"""Model Analyzer's local launch of tritonserver (``triton_server_path``, ``_flags``, ``_environment``), read
from the launcher's ``TritonServer``, which knows what the wheel's server needs (one source of truth), less what
Model Analyzer sets itself (repository, ports) and the admin key, which would refuse its model loads (it sends no
key). docs/profiling.md, "Tuning each step with Model Analyzer", lists what is passed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from pipeline_src.serving.launcher import TritonServer

# Set by Model Analyzer (its output repository, its endpoints) or closing the APIs it needs.
LEFT_TO_ANALYZER = {"model-repository", "http-port", "grpc-port", "metrics-port"}
ADMIN_FLAGS = {"http-restricted-api", "grpc-restricted-protocol"}
ALWAYS_PASSED = ("PATH", "LD_LIBRARY_PATH")  # what the wheel's server and its stub need, whatever this process has


@dataclass(frozen=True)
class LocalLaunch:
    server_path: str
    flags: dict[str, str]  # without the leading dashes, as Model Analyzer's YAML takes them
    environment: dict[str, str]  # what the launcher sets over this process's environment


def local_launch(work_dir: Path) -> LocalLaunch:
    """What Model Analyzer needs to start the wheel's tritonserver as ``make serve`` does."""
    server = TritonServer(work_dir / "unused_repository", work_dir)
    binary, *arguments = server.command()  # assembles the backend directory under work_dir
    pairs = (argument.removeprefix("--").partition("=") for argument in arguments)
    flags = {key: value for key, _, value in pairs if key not in LEFT_TO_ANALYZER | ADMIN_FLAGS}
    environment = {
        key: value
        for key, value in server.environment().items()
        if key in ALWAYS_PASSED or os.environ.get(key) != value
    }
    return LocalLaunch(binary, flags, environment)
