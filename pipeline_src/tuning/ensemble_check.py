"""The ensemble, which Model Analyzer cannot profile here (``ANALYZER_LIMITS`` says why), measured as ``make bench``
measures it: perf_analyzer on the untuned and the tuned repository, one server after the other, in the same run and
on the same photos.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from pipeline_src.profiling import perf_analyzer
from pipeline_src.repository.bls_calls import bls_callees, steps_bls_callees
from pipeline_src.serving.launcher import TritonServer
from pipeline_src.serving.ports import free_ports

ANALYZER_LIMITS = (
    "Model Analyzer profiles an ensemble of at most 4 composing models, a BLS model only in its quick mode, and "
    "not an ensemble with a BLS step in it; {ensemble} has {steps} steps, {bls} calling {callees} by BLS. "
    "So Model Analyzer tuned the steps one by one, and perf_analyzer measured the ensemble, as make bench does."
)


def measure_repository(
    label: str,
    repository: Path,
    ensemble: str,
    input_data: Path,
    concurrency: Sequence[int],
    window: int,
    scratch: Path,
) -> list[dict]:
    """perf_analyzer on ``ensemble`` at each level, on a server of ``repository``; a failed level is a row with
    its error."""
    rows = []
    callees = bls_callees(repository, ensemble)
    work = scratch / label
    with TritonServer(repository, work, free_ports(), log_file=work / "tritonserver.log") as triton:
        for level in concurrency:
            try:
                measurement, stability = perf_analyzer.measure_stably(
                    ensemble,
                    triton.grpc_url,
                    input_data,
                    level,
                    work / f"{ensemble}_{level}.csv",
                    max(window, level),
                    bls_composing=callees,
                )
            except perf_analyzer.PerfAnalyzerFailed as exc:
                print(exc, file=sys.stderr, flush=True)
                rows.append({"repository": label, "concurrency": level, "error": str(exc).splitlines()[-1]})
                continue
            row = {"repository": label, **measurement.__dict__, "stability_percentage": stability}
            print(row, flush=True)
            rows.append(row)
    return rows


def analyzer_limits(repository: Path, ensemble: str) -> str:
    """Why Model Analyzer cannot profile ``ensemble``, in this repository's own terms."""
    steps = steps_bls_callees(repository, ensemble)
    callers = {step: callees for step, callees in steps if callees}
    bls = ", ".join(callers) or "none"
    callees = ", ".join(sorted({callee for names in callers.values() for callee in names})) or "nothing"
    return ANALYZER_LIMITS.format(ensemble=ensemble, steps=len(steps), bls=bls, callees=callees)
