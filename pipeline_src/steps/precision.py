"""Which precision a BLIP step runs in: fp32 (exact), int8, or ``auto``, decided from the fidelity the
build measured for that step's int8 graphs (``fidelity.json`` next to them)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

FIDELITY_FILE = "fidelity.json"
FAST_PRECISION = "fp16"  # the fast mode's graphs: decoder_step.fp16.onnx, ...


@dataclass(frozen=True)
class PrecisionChoice:
    precision: str  # fp32 or int8
    reason: str  # for the step's log


def precision_file(path: Path, precision: str) -> Path:
    """``decoder_step.onnx`` for fp32, ``decoder_step.int8.onnx`` for int8 (same for every graph)."""
    return path if precision == "fp32" else path.with_name(f"{path.stem}.{precision}{path.suffix}")


def read_fidelity(directory: Path) -> dict | None:
    path = directory / FIDELITY_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def choose_precision(requested: str, directory: Path, min_agreement: float, on_gpu: bool) -> PrecisionChoice:
    """fp32 and int8 as asked; ``auto``: int8 only where its measured teacher-forced top-1 agreement with
    fp32 reaches ``min_agreement``. On a GPU instance: fp32 on CUDA whatever was asked (int8 weights are a
    CPU option)."""
    if on_gpu:
        return PrecisionChoice("fp32", "GPU instance: fp32 graphs on CUDA")
    if requested != "auto":
        return PrecisionChoice(requested, f"cpu_precision={requested}")
    measured = (read_fidelity(directory) or {}).get("options", {}).get("int8")
    if measured is None:
        return PrecisionChoice("fp32", f"auto: no int8 fidelity measured in {directory / FIDELITY_FILE}, so exact fp32")
    agreement = measured["teacher_forced_top1"]
    if agreement >= min_agreement:
        return PrecisionChoice(
            "int8",
            f"auto: int8 agrees with fp32 on {agreement:.1%} of teacher-forced tokens "
            f">= auto_min_agreement {min_agreement:.1%}",
        )
    return PrecisionChoice(
        "fp32",
        f"auto: int8 agrees with fp32 on only {agreement:.1%} of teacher-forced tokens "
        f"< auto_min_agreement {min_agreement:.1%}, so exact fp32",
    )
