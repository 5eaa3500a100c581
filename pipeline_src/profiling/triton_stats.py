"""What Triton and the OS say about a running server: per-model statistics and the memory of every
server process (tritonserver and its Python backend stubs)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import psutil
import tritonclient.grpc as grpcclient

PHASES = ("queue", "compute_input", "compute_infer", "compute_output")


@dataclass(frozen=True)
class ModelCounters:
    """Triton's cumulative counters for one model."""
    inferences: int  # images (batch rows)
    executions: int  # model executions: inferences / executions is the mean batch size
    requests: int  # successful requests
    phase_ns: dict[str, int]  # total nanoseconds per phase, summed over requests

    def minus(self, earlier: "ModelCounters") -> "ModelCounters":
        return ModelCounters(self.inferences - earlier.inferences, self.executions - earlier.executions,
                             self.requests - earlier.requests,
                             {phase: self.phase_ns[phase] - earlier.phase_ns[phase] for phase in PHASES})

    def summary(self) -> dict[str, float]:
        """Mean batch size, and each phase's mean milliseconds per request."""
        figures = {"requests": self.requests, "inferences": self.inferences,
                   "mean_batch": self.inferences / self.executions if self.executions else 0.0}
        for phase in PHASES:
            figures[f"{phase}_ms"] = self.phase_ns[phase] / self.requests / 1e6 if self.requests else 0.0
        return figures


def model_counters(url: str) -> dict[str, ModelCounters]:
    """Every loaded model's counters, by model name."""
    with grpcclient.InferenceServerClient(url) as client:
        stats = client.get_inference_statistics(as_json=True).get("model_stats", [])
    counters = {}
    for model in stats:
        inference = model.get("inference_stats", {})
        counters[model["name"]] = ModelCounters(
            inferences=int(model.get("inference_count", 0)),
            executions=int(model.get("execution_count", 0)),
            requests=int(inference.get("success", {}).get("count", 0)),
            phase_ns={phase: int(inference.get(phase, {}).get("ns", 0)) for phase in PHASES},
        )
    return counters


def counters_since(url: str, before: dict[str, ModelCounters]) -> dict[str, dict[str, float]]:
    """Per-model summaries of what happened since ``before``, for the models that ran."""
    now = model_counters(url)
    return {name: counters.minus(before[name]).summary() for name, counters in now.items()
            if name in before and counters.requests > before[name].requests}


def server_processes(pid: int) -> list[psutil.Process]:
    """tritonserver and every process it started (the backend stubs)."""
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def _memory(process: psutil.Process):
    try:
        return process.memory_full_info()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def server_memory_mib(pid: int) -> dict[str, float]:
    """Resident memory of a server and all its child processes (the backend stubs), in MiB.

    ``rss`` counts shared pages once per process; ``pss`` shares them out (the shared-memory
    regions through which tensors pass between server and stubs are counted once)."""
    measured = [memory for memory in map(_memory, server_processes(pid)) if memory is not None]
    return {"rss_mib": sum(memory.rss for memory in measured) / 2**20,
            "pss_mib": sum(getattr(memory, "pss", memory.rss) for memory in measured) / 2**20,
            "processes": len(measured)}


def memory_by_model_mib(pid: int) -> dict[str, dict[str, float]]:
    """The PSS of tritonserver and of each model's stubs (one per instance), named by the model whose
    ``model.py`` they run: ``{name: {"pss_mib": ..., "processes": ...}}``."""
    groups: dict[str, dict[str, float]] = {}
    for process in server_processes(pid):
        memory = _memory(process)
        try:
            command = process.cmdline()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            memory = None
        if memory is None:  # gone, or not ours to read
            continue
        model_file = next((Path(part) for part in command if part.endswith("model.py")), None)
        name = ("tritonserver" if process.pid == pid else
                model_file.parent.parent.name if model_file else " ".join(command[:2]))
        group = groups.setdefault(name, {"pss_mib": 0.0, "processes": 0})
        group["pss_mib"] += getattr(memory, "pss", memory.rss) / 2**20
        group["processes"] += 1
    return groups
