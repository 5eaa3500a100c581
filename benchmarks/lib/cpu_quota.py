"""A slower machine made from this one: processes held to a share of one CPU by a cgroup CPU quota.

Pinning to one core (taskset) does not do it on VMs whose two vCPUs give about one core's floating-point
throughput; a CFS quota does. Needs root, and the cgroup v1 ``cpu`` controller or cgroup v2.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from benchmarks.lib.memory import server_processes

CGROUP_ROOT = Path("/sys/fs/cgroup")
PERIOD_US = 100_000


class CpuQuota:
    """``with CpuQuota(0.6) as quota: quota.hold(pid)``: ``pid`` and every process it started get at most
    60 % of one CPU between them; given back to the root group on exit."""

    def __init__(self, cpus: float, name: str = f"food11-slower-{os.getpid()}"):
        self.cpus = cpus
        self.v2 = (CGROUP_ROOT / "cgroup.controllers").exists()
        self.root = CGROUP_ROOT if self.v2 else CGROUP_ROOT / "cpu"
        self.group = self.root / name

    def available(self) -> str | None:
        """Why a quota cannot be set here (no cgroup CPU controller, not root); None when it can."""
        if not (self.root / "cgroup.procs").exists():
            return f"no cgroup CPU controller at {self.root}"
        if not os.access(self.root, os.W_OK):
            return f"{self.root} is not writable: run as root"
        return None

    def __enter__(self) -> CpuQuota:
        self.group.mkdir()
        quota_us = round(self.cpus * PERIOD_US)
        if self.v2:
            (self.group / "cpu.max").write_text(f"{quota_us} {PERIOD_US}")
        else:
            (self.group / "cpu.cfs_period_us").write_text(str(PERIOD_US))
            (self.group / "cpu.cfs_quota_us").write_text(str(quota_us))
        return self

    def hold(self, pid: int) -> int:
        """Moves ``pid`` and its descendants (those it starts later follow by themselves); returns how many."""
        processes = server_processes(pid)
        for process in processes:
            (self.group / "cgroup.procs").write_text(str(process.pid))
        return len(processes)

    def __exit__(self, *exc_info) -> None:
        for pid in (self.group / "cgroup.procs").read_text().split():
            with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
                (self.root / "cgroup.procs").write_text(pid)
        self.group.rmdir()
