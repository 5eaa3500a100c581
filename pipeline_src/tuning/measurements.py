"""What Model Analyzer measured, read back: its CSV row per configuration and concurrency, with the values
of that configuration read from the config.pbtxt it wrote (``<step>_config_<n>``; ``_config_default`` is
the step's configuration as the repository has it), and the choice per step."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tritonclient.grpc import model_config_pb2

from pipeline_src.repository.loading import parse_config
from pipeline_src.tuning.sweep import THREADS_PARAMETER

DEFAULT_SUFFIX = "_config_default"
# What Model Analyzer writes in its CSV, one row per configuration and concurrency (analyzer_config asks for these
# fields, by its own names): each field's CSV header.
INFERENCE_FIELDS = {
    "model_name": "Model",
    "concurrency": "Concurrency",
    "model_config_path": "Model Config Path",
    "satisfies_constraints": "Satisfies Constraints",
    "perf_throughput": "Throughput (infer/sec)",
    "perf_latency_avg": "Avg Latency (ms)",
    "perf_latency_p95": "p95 Latency (ms)",
    "perf_latency_p99": "p99 Latency (ms)",
}


@dataclass(frozen=True)
class StepConfig:
    """The swept values of one configuration (None: the config leaves it to Triton or the step)."""

    instance_count: int
    instance_kind: str
    max_batch_size: int
    queue_delay_us: int | None
    intra_op_threads: str | None

    @classmethod
    def of(cls, config: model_config_pb2.ModelConfig) -> StepConfig:
        groups = config.instance_group
        kind = model_config_pb2.ModelInstanceGroup.Kind.Name(groups[0].kind) if groups else "KIND_AUTO"
        threads = config.parameters[THREADS_PARAMETER].string_value if THREADS_PARAMETER in config.parameters else None
        return cls(
            sum(group.count or 1 for group in groups) or 1,
            kind,
            config.max_batch_size,
            config.dynamic_batching.max_queue_delay_microseconds if config.HasField("dynamic_batching") else None,
            threads,
        )


@dataclass(frozen=True)
class Measured:
    step: str
    variant: str  # Model Analyzer's name for the configuration
    config: StepConfig
    concurrency: int
    throughput: float  # inferences per second
    avg_ms: float
    p95_ms: float
    p99_ms: float
    within_budget: bool

    @property
    def is_current(self) -> bool:
        return self.variant.endswith(DEFAULT_SUFFIX)


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def read_measurements(inference_csv: Path, variants_dir: Path) -> list[Measured]:
    """Every row of Model Analyzer's inference CSV, in its order (its ranking: best configuration first)."""
    with open(inference_csv, newline="") as handle:
        rows = list(csv.DictReader(handle))
    measured = []
    for row in rows:
        cell = {field: row[header] for field, header in INFERENCE_FIELDS.items()}
        variant = cell["model_config_path"]
        measured.append(
            Measured(
                step=cell["model_name"],
                variant=variant,
                config=StepConfig.of(parse_config(variants_dir / variant / "config.pbtxt")),
                concurrency=int(cell["concurrency"]),
                throughput=_number(cell["perf_throughput"]),
                avg_ms=_number(cell["perf_latency_avg"]),
                p95_ms=_number(cell["perf_latency_p95"]),
                p99_ms=_number(cell["perf_latency_p99"]),
                within_budget=cell["satisfies_constraints"].strip().lower() == "yes",
            )
        )
    return measured


@dataclass(frozen=True)
class Choice:
    step: str
    chosen: Measured | None  # None: nothing within the budget; the step keeps its configuration
    current: Measured | None  # the best measurement of the step's configuration as it is
    why: str


def _best(rows: Sequence[Measured]) -> Measured | None:
    return max(rows, key=lambda row: row.throughput, default=None)


def choose(step: str, measured: Sequence[Measured]) -> Choice:
    """The highest throughput within the budget (Model Analyzer's objective and constraint), at any concurrency
    swept. A step none of whose measurements is within budget keeps its configuration."""
    rows = [row for row in measured if row.step == step]
    current = _best([row for row in rows if row.is_current and row.within_budget]) or _best(
        [row for row in rows if row.is_current]
    )
    chosen = _best([row for row in rows if row.within_budget])
    if chosen is None:
        fastest = min(rows, key=lambda row: row.p99_ms, default=None)
        lowest = f"; the lowest p99 was {fastest.p99_ms:.1f} ms ({fastest.variant})" if fastest else ""
        return Choice(step, None, current, f"no configuration within the budget{lowest}: kept as it is")
    if chosen.is_current:
        return Choice(step, chosen, current, "its configuration as it is was the best measured: kept")
    return Choice(step, chosen, current, "highest throughput within the budget")
