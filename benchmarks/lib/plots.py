"""The PNG figures ``make bench`` writes: throughput, latency percentiles and the per-step time split."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt

STEP_COLOURS = {
    "preprocess": "tab:blue",
    "classifier": "tab:orange",
    "label": "tab:purple",
    "caption_with_label": "tab:green",
    "captioner": "tab:red",
}


def throughput_plot(path: Path, rows: Sequence[dict], subtitle: str) -> None:
    """Inferences per second against concurrency, one line per model (log scale: steps differ 100x)."""
    figure, axes = plt.subplots(figsize=(7, 4.5))
    for model in dict.fromkeys(row["model"] for row in rows):
        points = [(row["concurrency"], row["throughput"]) for row in rows if row["model"] == model]
        axes.plot(*zip(*points), marker="o", label=model)
    axes.set(xscale="log", yscale="log", xlabel="concurrency (requests in flight)", ylabel="inferences / s")
    axes.set_title(f"Throughput by concurrency\n{subtitle}", fontsize=9)
    axes.set_xticks([row["concurrency"] for row in rows], labels=[str(row["concurrency"]) for row in rows])
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def latency_plot(path: Path, rows: Sequence[dict], model: str, subtitle: str) -> None:
    """p50, p95 and p99 latency of one model against concurrency."""
    figure, axes = plt.subplots(figsize=(7, 4.5))
    chosen = [row for row in rows if row["model"] == model]
    levels = [row["concurrency"] for row in chosen]
    for percentile in ("p50", "p95", "p99"):
        axes.plot(levels, [row[f"{percentile}_ms"] / 1000 for row in chosen], marker="o", label=percentile)
    axes.set(xscale="log", xlabel="concurrency", ylabel="latency (s)")
    axes.set_title(f"{model} latency\n{subtitle}", fontsize=9)
    axes.set_xticks(levels, labels=[str(level) for level in levels])
    axes.grid(True, alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def step_split_plot(path: Path, splits: Sequence[dict], subtitle: str) -> None:
    """Per concurrency, the mean time a request spends in each step of the ensemble, queue hatched."""
    figure, axes = plt.subplots(figsize=(7, 4.5))
    labels = [str(split["concurrency"]) for split in splits]
    bottoms = [0.0] * len(splits)
    for step, colour in STEP_COLOURS.items():
        for phase, hatch in (("queue_ms", "//"), ("compute_ms", None)):
            heights = [split["steps"].get(step, {}).get(phase, 0.0) / 1000 for split in splits]
            axes.bar(
                labels,
                heights,
                bottom=bottoms,
                color=colour,
                hatch=hatch,
                edgecolor="white",
                label=f"{step} {'queue' if hatch else 'compute'}",
            )
            bottoms = [b + h for b, h in zip(bottoms, heights)]
    axes.set(xlabel="concurrency", ylabel="seconds per request")
    axes.set_title(f"Where an ensemble request's time goes (Triton's statistics)\n{subtitle}", fontsize=9)
    axes.legend(fontsize=7, ncol=2)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
