"""Triton's admin APIs behind a key: what may change the server (load and unload models, register shared memory,
change trace or log settings) answers only a caller presenting the operator's key; inference, health, metadata,
model configuration and statistics stay open to the API and to profilers.

Triton's own mechanism (``--http-restricted-api`` and ``--grpc-restricted-protocol``, both in Triton 2.51 and
NVIDIA's 25.08 image): a request of a restricted group must carry a header with the key, else HTTP 403 or
gRPC UNAVAILABLE. Every path that starts Triton restricts the same groups with these arguments: ``TritonServer``
(``make serve``, the tests, the benchmarks, and the Triton image's command, ``triton_container``).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

HEADER = "food11-admin-key"
RESTRICTED = ("model-repository", "shared-memory", "trace", "logging")
KEY_ENV = "FOOD11_TRITON_ADMIN_KEY"  # the operator's key; without it each start makes one nobody else knows
GRPC_HEADER_PREFIX = "triton-grpc-protocol-"  # how Triton's gRPC server names a restricted protocol's header


def new_key() -> str:
    return secrets.token_hex(32)


KEY_RULE = "a non-empty key without ',', ':', '=' or whitespace (Triton's flag syntax)"


def is_valid_key(key: str) -> bool:
    return bool(key) and not any(character in key for character in ",:= \n")


def restricted_args(key: str) -> tuple[str, ...]:
    """tritonserver's arguments closing the admin groups to callers without ``key``, on HTTP and gRPC."""
    if not is_valid_key(key):
        raise ValueError(f"{KEY_ENV}: {KEY_RULE}")
    setting = f"{','.join(RESTRICTED)}:{HEADER}={key}"
    return (f"--http-restricted-api={setting}", f"--grpc-restricted-protocol={setting}")


def http_headers(key: str) -> dict[str, str]:
    return {HEADER: key}


def grpc_headers(key: str) -> dict[str, str]:
    """tritonclient.grpc's ``headers=`` for a restricted call."""
    return {GRPC_HEADER_PREFIX + HEADER: key}


def write_key_file(path: Path, key: str) -> Path:
    """The key where the operator's tools on this machine find it: readable by this user alone."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(key + "\n")
    path.chmod(0o600)  # an existing file keeps its mode through O_CREAT
    return path
