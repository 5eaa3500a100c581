"""Model Analyzer's profile configuration (YAML; written as JSON, which YAML reads as is)."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pipeline_src.serving.ports import free_ports
from pipeline_src.tuning.measurements import INFERENCE_FIELDS
from pipeline_src.tuning.server_launch import LocalLaunch
from pipeline_src.tuning.sweep import StepPlan

# The project's perf_analyzer: food11-perf-analyzer runs it with the libraries it needs.
PERF_ANALYZER = Path(sys.executable).parent / "food11-perf-analyzer"


class RunPaths:
    """Where one Model Analyzer run keeps its files, all under ``root``."""

    def __init__(self, root: Path):
        self.root = root
        self.config, self.log = root / "model_analyzer.yaml", root / "model_analyzer.log"
        # Model Analyzer's output repository: one folder per configuration it made (``<step>_config_<n>``).
        self.variants = root / "variants" / "repository"
        self.export = root / "export"
        self.inference_csv = self.export / "results" / "metrics-model-inference.csv"


@dataclass(frozen=True)
class Measuring:
    """How perf_analyzer measures each configuration (count windows: a caption takes seconds here)."""

    requests_per_window: int = 16
    stability_percentage: int = 25
    max_trials: int = 10


def profile_config(
    repository: Path,
    plans: Sequence[StepPlan],
    inputs: dict[str, Path],
    launch: LocalLaunch,
    paths: RunPaths,
    concurrency: Sequence[int],
    budgets_ms: dict[str, float],
    measuring: Measuring,
) -> dict:
    """Brute search over each step's own values (manual mode), every instance on the CPU, on free ports; a step
    with a budget gets the constraint p99 <= budget, which Model Analyzer reports per measurement."""
    ports = free_ports()
    models = {}
    for plan in plans:
        model: dict = {
            "cpu_only": True,
            "model_config_parameters": plan.model_config_parameters(),
            "perf_analyzer_flags": {
                "input-data": str(inputs[plan.step]),
                "measurement-request-count": measuring.requests_per_window,
                "stability-percentage": measuring.stability_percentage,
                "max-trials": measuring.max_trials,
            },
        }
        if plan.step in budgets_ms:
            model["constraints"] = {"perf_latency_p99": {"max": budgets_ms[plan.step]}}
        models[plan.step] = model
    return {
        "model_repository": str(repository),
        "run_config_search_mode": "brute",
        "concurrency": list(concurrency),
        "profile_models": models,
        "triton_launch_mode": "local",
        "triton_server_path": launch.server_path,
        "triton_server_flags": launch.flags,
        "triton_server_environment": launch.environment,
        "triton_http_endpoint": f"127.0.0.1:{ports.http}",
        "triton_grpc_endpoint": f"127.0.0.1:{ports.grpc}",
        "triton_metrics_url": f"http://127.0.0.1:{ports.metrics}/metrics",
        "triton_output_path": str(paths.root / "tritonserver.log"),
        "client_protocol": "grpc",
        "perf_analyzer_path": str(PERF_ANALYZER),
        "output_model_repository_path": str(paths.variants),
        "override_output_model_repository": True,
        "export_path": str(paths.export),
        "checkpoint_directory": str(paths.root / "checkpoints"),
        "inference_output_fields": list(INFERENCE_FIELDS),
    }


def write_profile_config(config: dict, paths: RunPaths) -> None:
    paths.variants.parent.mkdir(parents=True, exist_ok=True)  # under root; Model Analyzer makes only the last folder
    paths.config.write_text(json.dumps(config, indent=2) + "\n")
