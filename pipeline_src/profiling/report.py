"""How the profiling tools write what they measured: markdown tables, and the machine they measured on."""

from __future__ import annotations

import os
import platform
from collections.abc import Sequence
from pathlib import Path

NOTABLE_CPU_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16")


def machine_description() -> str:
    """e.g. ``AMD EPYC, 2 cores (avx2), 23.4 GiB, no GPU``."""
    model, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and model in ("", platform.machine(), platform.processor()):
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    gpu = "GPU" if Path("/dev/nvidia0").exists() else "no GPU"
    features = ", ".join(flag for flag in NOTABLE_CPU_FLAGS if flag in flags) or "no AVX2"
    return f"{model}, {os.cpu_count()} cores ({features}), {memory_gib:.1f} GiB, {gpu}"


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
