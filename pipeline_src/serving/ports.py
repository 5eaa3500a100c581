"""The addresses and ports servers listen on: the defaults, free ones for tests and benchmarks, where a local
client reaches a server, and a check that none is taken before anything starts."""

from __future__ import annotations

import errno
import socket
from dataclasses import dataclass

from pipeline_src.serving.processes import ServerStartError


@dataclass(frozen=True)
class Ports:
    http: int = 8000
    grpc: int = 8001
    metrics: int = 8002


LOOPBACK = "127.0.0.1"


def reachable_host(bind_address: str) -> str:
    """Where a local client reaches a server bound to ``bind_address`` (the wildcard means loopback)."""
    return LOOPBACK if bind_address in ("0.0.0.0", "") else bind_address


def free_port() -> int:
    """A localhost port nobody listens on now (for tests and benchmarks)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def free_ports() -> Ports:
    return Ports(http=free_port(), grpc=free_port(), metrics=free_port())


def check_ports_free(address: str, ports: dict[str, int]) -> None:
    """ServerStartError naming the first taken port, before anything is started.

    Probes bind as the servers will (SO_REUSEADDR, so a socket in TIME_WAIT from a server stopped a
    moment ago does not count as taken); a port taken on the wildcard address also conflicts here.
    """
    for role, port in ports.items():
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((address, port))
            except OSError as exc:
                if exc.errno != errno.EADDRINUSE:
                    raise
                raise ServerStartError(
                    f"port {port} ({role}) on {address} is already in use, perhaps by a server from an earlier "
                    f"run: see who holds it with `ss -ltnp 'sport = :{port}'` and stop it, or pick another port"
                ) from None
