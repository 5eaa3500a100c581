"""The memory and CPU time of running servers, as the OS counts them: tritonserver and every process it started
(the Python backend stubs), the API process; and the one sampler every benchmark watches memory with over a run."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import psutil


def server_processes(pid: int) -> list[psutil.Process]:
    """A server and every process it started (tritonserver's: the backend stubs)."""
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def _memory(process: psutil.Process):
    try:
        return process.memory_full_info()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def server_cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of a server and every process it started (those alive now)."""
    total = 0.0
    for process in server_processes(pid):
        try:
            times = process.cpu_times()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        total += times.user + times.system
    return total


def server_memory_mib(*pids: int) -> dict[str, float]:
    """Resident memory of the servers ``pids`` and all their child processes, together, in MiB.

    ``rss`` counts shared pages once per process; ``pss`` shares them out (the shared-memory
    regions through which tensors pass between server and stubs are counted once)."""
    measured = [memory for pid in pids for memory in map(_memory, server_processes(pid)) if memory is not None]
    return {
        "rss_mib": sum(memory.rss for memory in measured) / 2**20,
        "pss_mib": sum(getattr(memory, "pss", memory.rss) for memory in measured) / 2**20,
        "processes": len(measured),
    }


class MemorySampler:
    """The servers' memory on entry (the baseline), every ``every_s`` seconds from a thread, and on exit.

    Each sample: ``t_s`` (seconds since entry) and ``server_memory_mib`` of ``pids`` (``rss_mib``,
    ``pss_mib``, ``processes``)."""

    def __init__(self, pids: Sequence[int], every_s: float = 5.0):
        self.pids, self.every_s = list(pids), every_s
        self.samples: list[dict] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._started = time.monotonic()

    def sample(self) -> dict:
        self.samples.append({"t_s": round(time.monotonic() - self._started, 1), **server_memory_mib(*self.pids)})
        return self.samples[-1]

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self.sample()

    def __enter__(self) -> MemorySampler:
        self._started = time.monotonic()
        self.sample()  # the baseline: enter after the warm-up
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def growth(self) -> dict[str, float]:
        """The total PSS first, at its peak and last, and its growth over the first."""
        first, last = self.samples[0]["pss_mib"], self.samples[-1]["pss_mib"]
        peak = max(sample["pss_mib"] for sample in self.samples)
        return {
            "pss_first_mib": first,
            "pss_peak_mib": peak,
            "pss_last_mib": last,
            "growth_last_over_first": last / first - 1,
            "growth_peak_over_first": peak / first - 1,
        }
