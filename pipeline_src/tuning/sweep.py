"""What is swept for each step: instance count, max batch size, the dynamic batcher's queue delay, and ONNX
Runtime's ``intra_op_threads`` for the steps whose settings read it; all on the CPU (KIND_CPU).

A step's max batch size cannot go below what its callers send it (an ensemble's max_batch_size, a BLS
caller's): Triton refuses the ensemble, and food11-validate the repository. Such values are left out of
that step's sweep, with the reason, rather than measured for a configuration that could not be served.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pipeline_src.repository.loading import ModelEntry, load_models
from pipeline_src.repository.report import Report
from pipeline_src.repository.step_settings import check_settings

THREADS_PARAMETER = "intra_op_threads"


@dataclass(frozen=True)
class Sweep:
    """The candidate values, for every step alike (a value a step cannot take is left out for it)."""

    instance_counts: tuple[int, ...] = (1, 2)
    max_batch_sizes: tuple[int, ...] = (8, 32)
    queue_delays_us: tuple[int, ...] = (0, 2000)
    intra_op_threads: tuple[int, ...] = (1, 2)
    concurrency: tuple[int, ...] = (1, 4)


@dataclass
class StepPlan:
    """One step's share of the sweep: its candidate values and what was left out, with why."""

    step: str
    instance_counts: tuple[int, ...]
    max_batch_sizes: tuple[int, ...]
    queue_delays_us: tuple[int, ...]
    intra_op_threads: tuple[int, ...]  # empty: the step does not read the parameter
    notes: list[str] = field(default_factory=list)

    @property
    def variants(self) -> int:
        threads = max(1, len(self.intra_op_threads))
        return len(self.instance_counts) * len(self.max_batch_sizes) * len(self.queue_delays_us) * threads

    def model_config_parameters(self) -> dict:
        """Model Analyzer's manual (brute) search space: every combination of these lists is measured; the
        extra list level of instance_group makes each group one candidate."""
        parameters: dict = {
            "max_batch_size": list(self.max_batch_sizes),
            "dynamic_batching": {"max_queue_delay_microseconds": list(self.queue_delays_us)},
            "instance_group": [[{"kind": "KIND_CPU", "count": count}] for count in self.instance_counts],
        }
        if self.intra_op_threads:
            threads = [str(count) for count in self.intra_op_threads]
            parameters["parameters"] = {THREADS_PARAMETER: {"string_value": threads}}
        return parameters


def smallest_max_batch(models: dict[str, ModelEntry], step: str, report: Report) -> tuple[int, str]:
    """The largest batch a caller may send ``step`` (its floor for max_batch_size), and which caller."""
    floor, caller = 0, ""
    for entry in models.values():
        if entry.config is None:
            continue
        if entry.is_ensemble:
            calls = step in {s.model_name for s in entry.config.ensemble_scheduling.step}
        else:
            settings = check_settings(entry, report) if entry.config.backend == "python" else None
            calls = settings is not None and step in {c.callee(settings) for c in type(settings).BLS_CALLS}
        if calls and entry.max_batch_size > floor:
            floor, caller = entry.max_batch_size, entry.name
    return floor, caller


def reads_threads(entry: ModelEntry, report: Report) -> bool:
    settings = check_settings(entry, report)
    return settings is not None and THREADS_PARAMETER in {f.name for f in dataclasses.fields(settings)}


def plan_steps(repository: Path, steps: Sequence[str], sweep: Sweep) -> list[StepPlan]:
    report = Report(repository)
    models = load_models(repository, report)
    plans = []
    for step in steps:
        if step not in models or models[step].config is None:
            raise SystemExit(f"{step}: no such model in {repository}")
        floor, caller = smallest_max_batch(models, step, report)
        batches = tuple(size for size in sweep.max_batch_sizes if size >= floor)
        notes = []
        if dropped := [size for size in sweep.max_batch_sizes if size < floor]:
            notes.append(
                f"max_batch_size {', '.join(map(str, dropped))} not swept: {caller} sends it batches of up to "
                f"{floor} (Triton would refuse the repository)"
            )
        if not batches:
            batches = (floor,)
            notes.append(f"max_batch_size {floor} (its callers' largest batch) measured instead")
        threads = sweep.intra_op_threads if reads_threads(models[step], report) else ()
        if not threads:
            notes.append(f"{THREADS_PARAMETER} not swept: its settings do not read it")
        plans.append(StepPlan(step, sweep.instance_counts, batches, sweep.queue_delays_us, threads, notes))
    return plans
