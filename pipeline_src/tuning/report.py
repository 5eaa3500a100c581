"""``make tune``'s report: what Model Analyzer measured, what was chosen per step, the ensemble before and after."""

from __future__ import annotations

from collections.abc import Sequence

from pipeline_src.profiling import perf_analyzer
from pipeline_src.profiling.report import markdown_table
from pipeline_src.tuning.measurements import Choice, Measured


def config_cells(row: Measured | None) -> dict:
    """The swept values of a measured configuration; blank cells without one (nothing chosen)."""
    if row is None:
        return dict.fromkeys(("instances", "max_batch", "queue_delay_us", "intra_op_threads"), "")
    config = row.config
    return {
        "instances": f"{config.instance_count} ({config.instance_kind.removeprefix('KIND_')})",
        "max_batch": config.max_batch_size,
        "queue_delay_us": "" if config.queue_delay_us is None else config.queue_delay_us,
        "intra_op_threads": config.intra_op_threads or "",
    }


def measured_row(row: Measured, chosen: set[tuple[str, str]]) -> dict:
    return {
        "step": row.step,
        "configuration": row.variant.removeprefix(f"{row.step}_") + (" (as is)" if row.is_current else ""),
        **config_cells(row),
        "concurrency": row.concurrency,
        "infer_per_s": row.throughput,
        "avg_ms": row.avg_ms,
        "p95_ms": row.p95_ms,
        "p99_ms": row.p99_ms,
        "within_budget": "yes" if row.within_budget else "no",
        "chosen": "**yes**" if (row.step, row.variant) in chosen else "",
    }


def choice_row(choice: Choice, budgets_ms: dict[str, float]) -> dict:
    """Every column, blank where nothing was chosen or the step as it is was not measured."""
    budget, chosen, current = budgets_ms.get(choice.step), choice.chosen, choice.current
    return {
        "step": choice.step,
        "p99_budget_ms": "none" if budget is None else budget,
        **config_cells(chosen),
        "at_concurrency": chosen.concurrency if chosen else "",
        "infer_per_s": chosen.throughput if chosen else "",
        "p99_ms": chosen.p99_ms if chosen else "",
        "as_is_infer_per_s": current.throughput if current else "",
        "as_is_p99_ms": current.p99_ms if current else "",
        "why": choice.why,
    }


# measured_row's keys, named here too: a run that measured nothing (every configuration failed to load, say) still
# heads its empty table with them.
MEASURED_COLUMNS = (
    "step",
    "configuration",
    "instances",
    "max_batch",
    "queue_delay_us",
    "intra_op_threads",
    "concurrency",
    "infer_per_s",
    "avg_ms",
    "p95_ms",
    "p99_ms",
    "within_budget",
    "chosen",
)
# perf_analyzer's table with the repository measured in place of the model, and why a level failed.
ENSEMBLE_COLUMNS = ("repository", *perf_analyzer.COLUMNS[1:], "error")


def markdown(result: dict, choices: Sequence[Choice], measured: Sequence[Measured]) -> str:
    budgets = result["budgets_ms"]
    chosen = {(c.step, c.chosen.variant) for c in choices if c.chosen is not None}
    sweep = result["sweep"]
    intro = [
        f"Triton Model Analyzer {result['model_analyzer']} (its own virtualenv, build/model_analyzer/) in its local "
        f"launch mode, starting the project's tritonserver ({result['tritonserver']}) as `make serve` does, once per "
        "configuration, and the project's perf_analyzer (tritonclient 2.50.0's). Brute search over the values given "
        f"(manual mode), every instance on the CPU (KIND_CPU): instance count {sweep['instance_counts']}, "
        f"max_batch_size {sweep['max_batch_sizes']}, max_queue_delay_microseconds {sweep['queue_delays_us']}, "
        f"intra_op_threads {sweep['intra_op_threads']} (steps that read it), at concurrency {sweep['concurrency']}; "
        f"count windows of {result['measuring']['requests_per_window']} requests, stable within "
        f"{result['measuring']['stability_percentage']} %. Input data: scripts/perf_input.py's, from "
        f"{result['photos']} photos. Model Analyzer ran {result['analyzer_seconds']:.0f} s.",
        "Chosen per step: the highest throughput whose p99 latency is within the step's budget (Model Analyzer's "
        "constraint and objective), at any concurrency swept; `(as is)` is the step's configuration in "
        f"{result['repository']}. The chosen configurations are written into {result['tuned_repository']} "
        f"(model files linked, not copied): {result['validation']}.",
        *result["notes"],
    ]
    # The choices' columns in their rows' order: every row has them all, and there is one per step swept.
    choice_rows = [choice_row(c, budgets) for c in choices]
    sections = [
        markdown_table("Tuning each step with Model Analyzer", intro, list(choice_rows[0]), choice_rows),
        markdown_table(
            "Every configuration measured",
            ["Latency in ms, throughput in inferences per second, as Model Analyzer reported them (its order)."],
            MEASURED_COLUMNS,
            [measured_row(row, chosen) for row in measured],
            level=2,
        ),
    ]
    ensemble = result.get("ensemble")
    if ensemble:
        sections.append(
            markdown_table(
                f"The ensemble ({ensemble['name']}): untuned and tuned, perf_analyzer",
                [
                    ensemble["why"],
                    "Both repositories measured in this run, one server after the other, on the same photos.",
                ],
                ENSEMBLE_COLUMNS,
                ensemble["rows"],
                level=2,
            )
        )
    return "\n".join(sections)
