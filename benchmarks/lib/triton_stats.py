"""What Triton says about a running server: per-model counters and statistics (its processes' memory:
memory.py)."""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass

import tritonclient.grpc as grpcclient

from pipeline_src.serving.launcher import TritonServer

# The served pipeline's steps, in the order a request passes them.
STEPS = ("preprocess", "classifier", "label", "vision_encoder", "caption_with_label", "captioner")
PHASES = ("queue", "compute_input", "compute_infer", "compute_output")


@dataclass(frozen=True)
class ModelCounters:
    """Triton's cumulative counters for one model."""

    inferences: int  # images (batch rows)
    executions: int  # model executions: inferences / executions is the mean batch size
    requests: int  # successful requests
    phase_ns: dict[str, int]  # total nanoseconds per phase, summed over requests


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


def step_figures(before: Mapping[str, ModelCounters], now: Mapping[str, ModelCounters]) -> dict[str, float]:
    """What each model that ran between ``before`` and ``now`` did, as one row's columns: its mean batch, and its
    queue and compute time per request, in milliseconds."""
    row = {}
    for step, counters in now.items():
        earlier = before.get(step)
        if earlier is None or counters.requests <= earlier.requests:
            continue
        requests, executions = counters.requests - earlier.requests, counters.executions - earlier.executions
        ms = {phase: (counters.phase_ns[phase] - earlier.phase_ns[phase]) / requests / 1e6 for phase in PHASES}
        row[f"{step}_mean_batch"] = (counters.inferences - earlier.inferences) / executions if executions else 0.0
        row[f"{step}_queue_ms"] = ms["queue"]
        row[f"{step}_compute_ms"] = ms["compute_input"] + ms["compute_infer"] + ms["compute_output"]
    return row


# The steps' own phase counters on Triton's /metrics (pipeline_src/steps/step_metrics.py).
_PHASE_SAMPLE = re.compile(r"^food11_step_phase_(seconds|runs)_total\{([^}]*)\}\s+(\S+)$", re.MULTILINE)
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def step_phases(metrics_url: str) -> dict[tuple[str, str], dict[str, float]]:
    """Each (model, phase)'s cumulative ``seconds`` and ``runs``, from Triton's metrics endpoint."""
    with urllib.request.urlopen(f"http://{metrics_url}/metrics", timeout=10) as response:
        text = response.read().decode()
    phases: dict[tuple[str, str], dict[str, float]] = {}
    for kind, labels, value in _PHASE_SAMPLE.findall(text):
        label = dict(_LABEL.findall(labels))
        phases.setdefault((label["model"], label["phase"]), {"seconds": 0.0, "runs": 0.0})[kind] += float(value)
    return phases


OUTER_PHASES = ("iteration", "execute")  # a step's phase that holds its others


def phase_figures(
    before: Mapping[tuple[str, str], Mapping[str, float]], after: Mapping[tuple[str, str], Mapping[str, float]]
) -> dict[str, float]:
    """What the steps timed in between, as one row's columns: each phase's mean milliseconds a run
    (``captioner_decoder_step_ms``); ``<model>_host_ms``, what a step's outer phase (``iteration``, or ``execute``
    for a step that times its executes) spent outside its other phases; and ``<model>_rows_per_step``, the rows a
    decoder step carried (``row_step`` runs over ``decoder_step`` runs)."""
    row: dict[str, float] = {}
    spent: dict[str, dict[str, tuple[float, float]]] = {}
    for (model, phase), now in after.items():
        earlier = before.get((model, phase), {"seconds": 0.0, "runs": 0.0})
        runs, seconds = now["runs"] - earlier["runs"], now["seconds"] - earlier["seconds"]
        if runs > 0:
            spent.setdefault(model, {})[phase] = (seconds, runs)
    for model, phases in spent.items():
        if "row_step" in phases and "decoder_step" in phases:
            row[f"{model}_rows_per_step"] = phases.pop("row_step")[1] / phases["decoder_step"][1]
        for phase, (seconds, runs) in phases.items():
            row[f"{model}_{phase}_ms"] = 1000 * seconds / runs
        outer = next((phase for phase in OUTER_PHASES if phase in phases), None)
        if outer:
            seconds, runs = phases[outer]
            inside = sum(total for phase, (total, _) in phases.items() if phase != outer)
            row[f"{model}_host_ms"] = 1000 * (seconds - inside) / runs
    return row


@dataclass(frozen=True)
class StepSnapshot:
    """Triton's per-model counters and the steps' own phase clocks at one moment."""

    counters: dict[str, ModelCounters]
    phases: dict[tuple[str, str], dict[str, float]]


def snapshot(server: TritonServer) -> StepSnapshot:
    return StepSnapshot(model_counters(server.grpc_url), step_phases(server.metrics_url))


def figures_since(server: TritonServer, earlier: StepSnapshot) -> dict[str, float]:
    """Each step's batch, queue and compute (Triton's) and phases (its own clock) since ``earlier``, as columns."""
    steps = step_figures(earlier.counters, model_counters(server.grpc_url))
    return {**steps, **phase_figures(earlier.phases, step_phases(server.metrics_url))}
