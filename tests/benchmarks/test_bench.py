"""make bench's targets from what it measured, without a server: each ratio against its goal, met or missed, and
a target left out where its figures were not measured."""

from __future__ import annotations

import pytest

from benchmarks.bench import targets
from pipeline_src.contract import ENSEMBLE

ROWS = [
    {"model": ENSEMBLE, "concurrency": 1, "throughput": 2.0, "p50_ms": 600.0},
    {"model": ENSEMBLE, "concurrency": 8, "throughput": 6.0, "p50_ms": 1300.0},
    {"model": ENSEMBLE, "concurrency": 16, "error": "timed out"},  # a failed level: no target of its own
    {"model": "classifier", "concurrency": 8, "throughput": 90.0, "p50_ms": 80.0},
]
API = [{"concurrency": 1, "throughput": 1.5, "p95_ms": 700.0}, {"concurrency": 8, "throughput": 5.0, "p95_ms": 1800.0}]
COURSE = [{"concurrency": 8, "throughput": 2.0, "p95_ms": 4000.0}]
OFFLINE = {"sum_step_ms_batch_1": 500.0, "best_img_per_s": 6.25}
LIMIT_ROUNDS = [
    {
        "served_img_per_s": 6.0,
        "in_process_img_per_s": 6.5,
        "served_cpu_s_per_image": 0.30,
        "in_process_cpu_s_per_image": 0.29,
    },
    {
        "served_img_per_s": 6.2,
        "in_process_img_per_s": 6.3,
        "served_cpu_s_per_image": 0.31,
        "in_process_cpu_s_per_image": 0.30,
    },
]


def test_each_target_is_its_ratio_against_its_goal():
    assert targets(ROWS, API, COURSE, OFFLINE, LIMIT_ROUNDS) == [
        {
            "target": "orchestration: ensemble p50 at c=1 / sum of in-process steps at batch 1",
            "goal": "<= 1.10",
            "value": pytest.approx(1.2),
            "met": False,
        },
        {
            "target": "limit: ensemble throughput at c=8 / offline best batch",
            "goal": ">= 0.90",
            "value": pytest.approx(0.96),
            "met": True,
        },
        {
            "target": "limit: ensemble throughput at c=8 / in-process at batch 8 (2 alternating rounds)",
            "goal": ">= 0.95",
            "value": pytest.approx(12.2 / 12.8),
            "met": True,
        },
        {
            "target": "limit: CPU seconds per image, in-process at batch 8 / served at c=8 (the same rounds)",
            "goal": ">= 0.95",
            "value": pytest.approx(0.59 / 0.61),
            "met": True,
        },
        {"target": "scaling: ensemble throughput at c=8 / at c=1", "goal": ">= 1", "value": 3.0, "met": True},
        {"target": "product API / course server throughput at c=8", "goal": ">= 2", "value": 2.5, "met": True},
        {"target": "product API p95 / course server p95 at c=8", "goal": "< 1", "value": 0.45, "met": True},
    ]


def test_a_target_whose_figures_were_not_measured_is_left_out():
    assert targets(ROWS[2:], [], COURSE, OFFLINE, []) == []


def test_a_round_without_a_served_cpu_figure_leaves_out_the_cpu_target_alone():
    rounds = [{**LIMIT_ROUNDS[0], "served_cpu_s_per_image": None}, LIMIT_ROUNDS[1]]  # a window that saw no image
    names = [verdict["target"] for verdict in targets(ROWS, API, COURSE, OFFLINE, rounds)]
    assert "limit: ensemble throughput at c=8 / in-process at batch 8 (2 alternating rounds)" in names
    assert not [name for name in names if name.startswith("limit: CPU seconds")]
