"""A step's time per phase (counters labelled by model, version and phase) and its load, on Triton's own /metrics.
The captioner's phases are ``captioning.CAPTIONER_PHASES`` (iteration, vision, prefill, decoder_step, row_step);
what each means: docs/profiling.md, "Inside a step"."""

from __future__ import annotations

from collections.abc import Iterable

import triton_python_backend_utils as pb_utils

from pipeline_src.steps.phase_clock import PhaseClock


def families(kind, *named: tuple[str, str]) -> list:
    """Triton metric families of ``kind`` (COUNTER, GAUGE), each (name, description)."""
    return [pb_utils.MetricFamily(name=name, description=description, kind=kind) for name, description in named]


class StepPhaseMetrics:
    """Adds a ``PhaseClock``'s totals to the step's counters, once per execute (each add is a message to Triton)."""

    def __init__(self, model: str, version: str, phases: Iterable[str]):
        seconds, runs = families(
            pb_utils.MetricFamily.COUNTER,
            ("food11_step_phase_seconds_total", "Wall seconds a food11 step spent per phase"),
            ("food11_step_phase_runs_total", "How many times a food11 step ran each phase"),
        )
        self._counters = {}
        for phase in phases:
            labels = {"model": model, "version": version, "phase": phase}
            self._counters[phase] = (seconds.Metric(labels=labels), runs.Metric(labels=labels))
        # Kept, and after the counters: Triton refuses a Metric whose family is gone, and a step's attributes
        # are deleted in the order they were set.
        self._families = (seconds, runs)

    def add(self, clock: PhaseClock) -> None:
        for phase, total in clock.take().items():
            seconds, runs = self._counters[phase]
            seconds.increment(total.seconds)
            runs.increment(total.runs)


class StepLoadGauges:
    """What a step that answers from its own loop holds itself, where Triton's ``nv_inference_pending_request_count``
    cannot see it: the requests waiting to start and the rows being worked on, labelled by model and version."""

    def __init__(self, model: str, version: str):
        labels = {"model": model, "version": version}
        waiting, in_flight = families(
            pb_utils.MetricFamily.GAUGE,
            ("food11_step_waiting_requests", "Requests waiting inside a food11 step"),
            ("food11_step_rows_in_flight", "Rows a food11 step is working on"),
        )
        self._waiting, self._in_flight = waiting.Metric(labels=labels), in_flight.Metric(labels=labels)
        self._families = (waiting, in_flight)  # kept after the metrics (see StepPhaseMetrics)

    def set(self, waiting: int, in_flight: int) -> None:
        self._waiting.set(waiting)
        self._in_flight.set(in_flight)
