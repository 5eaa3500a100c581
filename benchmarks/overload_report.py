"""What benchmarks/overload.py reports, as plain functions of what it gathered: each machine's levels and steps
as a markdown table, under the API's defaults and the machine's capacity. No server: pure formatting."""

from __future__ import annotations

from collections.abc import Sequence

from food11_api.settings import ApiSettings
from pipeline_src.profiling.report import markdown_table


def _shown(template: str, *values: float | None) -> str:
    """``values`` in ``template``, or "-" where there were none (no refusal, no answer, no limit sampled)."""
    return "-" if None in values else template.format(*values)


def table_row(row: dict) -> dict:
    """One level's or step's figures as the table's cells ("-" where there were none)."""
    return {
        "offered": f"{row['level']:g}x" if "level" in row else f"step to {row['phase']}",
        "sent": row["sent"],
        "answered": row["answered"],
        "goodput / capacity": row["goodput_share"],
        "refused at the door": row["refused"],
        "refusal p99 / max (ms)": _shown("{:.1f} / {:.1f}", row["refusal_p99_ms"], row["refusal_max_ms"]),
        "of which in the API, max (ms)": _shown("{:.2f}", row["refusal_in_the_api_max_ms"]),
        "Retry-After (s)": ", ".join(map(str, row["retry_after_s"][:6])) or "-",
        "admitted, then failed": row["admitted_then_failed"],
        "answered p50 / p99 (ms)": _shown("{:.0f} / {:.0f}", row["answered_p50_ms"], row["answered_p99_ms"]),
        "limit (min-max; settled)": _shown("{:g}-{:g}; {:g}", row["limit_min"], row["limit_max"], row["settled_limit"]),
        "settle (s)": _shown("{:.1f}", row["settle_s"]),
    }


def machine_table(result: dict) -> str:
    verdicts = "; ".join(f"{name}: {'yes' if ok else '**no**'}" for name, ok in result["checks"].items())
    loops = ", ".join(
        f"c={run['concurrency']}: {run['throughput']:.3g}/s, p99 {run['p99_ms'] / 1000:.1f} s"
        for run in result["closed_loops"]
    )
    rows = [table_row(row) for row in result["levels"] + result["steps"]]
    return markdown_table(
        f"{result['machine']}: {result['description']}",
        [
            f"Capacity {result['capacity_per_s']:.3g} photos/s (concurrency "
            f"{result['capacity_concurrency']}; closed loops: {loops}). {result['seconds']:g} s per level "
            "and per step.",
            f"Done when: {verdicts}.",
        ],
        list(rows[0]),
        rows,
        level=2,
    )


def markdown(results: list[dict], settings: ApiSettings, capacity_concurrencies: Sequence[int]) -> str:
    intro = (
        "# Overload through the API on three machines\n",
        f"The API's defaults on every machine: deadline {settings.deadline_s:g} s, latency target "
        f"{settings.latency_target:g} of it, in-flight limit between {settings.min_in_flight} and "
        f"{settings.max_in_flight}. Each level: evenly spaced single-photo uploads at that multiple of "
        "capacity, each waited for on its own. Capacity: the best closed-loop throughput straight to Triton at "
        f"concurrency {', '.join(map(str, capacity_concurrencies))} whose p99 is within the deadline. "
        "'Admitted, then failed': let in by the API, then refused by a Triton queue, out of time (504) or "
        "never answered. Refusal times are the load generator's, which shares this machine's two cores with "
        "the servers; 'in the API' is the API's own (its Server-Timing). "
        "Settle: seconds until the limit stayed within +-20 % (or +-1) of where it ended.\n",
    )
    return "\n".join([*intro, *(machine_table(result) for result in results)])
