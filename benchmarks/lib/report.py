"""How benchmarks lay out their figures: markdown tables and CSV (results.py writes them with their
provenance)."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path


def _cell(value) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"
    return str(value)


def markdown_table(
    title: str, paragraphs: Sequence[str], columns: Sequence[str], rows: Sequence[dict], level: int = 1
) -> str:
    """A titled section: paragraphs, then a table of ``rows`` in ``columns`` (absent cells empty)."""
    lines = [f"{'#' * level} {title}", ""]
    for paragraph in paragraphs:
        lines += [paragraph, ""]
    lines += ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    lines += ["| " + " | ".join(_cell(row.get(column, "")) for column in columns) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def write_csv(path: Path, rows: Sequence[dict]) -> None:
    columns = list(dict.fromkeys(key for row in rows for key in row))
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, columns)
        writer.writeheader()
        writer.writerows(rows)
