"""``food11-tune``'s short version (``make tune``): Model Analyzer sweeps two steps of the tiny stand-in on the real
tritonserver, the choice is among what was swept, the tuned copy of the repository passes food11-validate and serves
the ensemble, measured against the untuned one (the full run: make tune). Then the pieces without a server: what
each step's sweep holds, the launch Model Analyzer is given, a choice written into a config."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline_src import PROJECT_ROOT
from pipeline_src.profiling import perf_analyzer
from pipeline_src.repository.loading import parse_config
from pipeline_src.repository.validate import validate_repository
from pipeline_src.tuning import analyzer_tool
from pipeline_src.tuning.measurements import StepConfig
from pipeline_src.tuning.server_launch import local_launch
from pipeline_src.tuning.sweep import Sweep, plan_steps
from pipeline_src.tuning.tuned_repository import apply_config

SWEPT = {"instance_count": [1], "max_batch_size": [32], "queue_delay_us": [0], "intra_op_threads": ["1", "2"]}


def require_tools() -> None:
    try:
        perf_analyzer.library_path()
    except perf_analyzer.PerfAnalyzerMissing as exc:
        pytest.skip(f"{exc} (make test installs it)")
    try:
        analyzer_tool.install()
    except subprocess.CalledProcessError as exc:  # no PyPI here
        pytest.skip(f"could not install {analyzer_tool.REQUIREMENT}: {exc}")


def test_a_short_tuning_run_chooses_among_the_swept_configs_and_writes_a_valid_repository(model_repository, tmp_path):
    require_tools()
    tuned = tmp_path / "tuned_repository"
    command = [
        *(sys.executable, "-m", "pipeline_src.tuning.cli", "--repository", str(model_repository)),
        # One step, one configuration and the step as it is: each costs Model Analyzer a server start (make test
        # stays short); benchmarks/results/tune.md has the base stand-in's fuller run.
        *("--steps", "classifier", "--instance-counts", "1", "--max-batch-sizes", "32"),
        *("--queue-delays-us", "0", "--intra-op-threads", "2", "--concurrency", "1"),
        *("--requests-per-window", "8", "--ensemble-concurrency", "1"),
        *("--latency-budget-ms", "60000", "--step-budget", "classifier=5000"),
        *("--tuned-repository", str(tuned), "--scratch", str(tmp_path / "scratch")),
        *("--output-dir", str(tmp_path / "results"), "--name", "tune_test"),
    ]
    done = subprocess.run(command, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]

    result = json.loads((tmp_path / "results" / "tune_test.json").read_text())
    assert result["model_analyzer"] == analyzer_tool.VERSION
    assert result["budgets_ms"] == {"classifier": 5000.0}
    for step in ("classifier",):
        rows = [row for row in result["measured"] if row["step"] == step]
        assert len({row["variant"] for row in rows}) == 2  # one swept, and the step as it is
        chosen = next(row for row in rows if row["variant"] == result["chosen"][step])
        config = StepConfig.of(parse_config(tuned / step / "config.pbtxt"))
        if chosen["variant"].endswith("_config_default"):
            assert config == StepConfig.of(parse_config(model_repository / step / "config.pbtxt"))
        else:
            for field, values in SWEPT.items():
                assert chosen[field] in values and getattr(config, field) == chosen[field], (step, field)
            assert config.instance_kind == "KIND_CPU"
    assert validate_repository(tuned).ok
    assert (tuned / "captioner" / "1").is_dir() and not (tuned / "captioner" / "1").is_symlink()

    report = (tmp_path / "results" / "tune_test.md").read_text()
    assert report.startswith("# Tuning each step with Model Analyzer") and "Measured on " in report
    assert result["command"].startswith("food11-tune --repository") and result["machine"]
    assert f"Triton Model Analyzer {analyzer_tool.VERSION}" in report and "**yes**" in report
    ensemble = result["ensemble"]["rows"]
    assert [(row["repository"], row["concurrency"]) for row in ensemble] == [("untuned", 1), ("tuned", 1)]
    assert all("error" not in row and row["throughput"] > 0 for row in ensemble), ensemble
    assert "BLS" in result["ensemble"]["why"]


def test_each_steps_sweep_leaves_out_what_its_callers_or_settings_rule_out(model_repository):
    sweep = Sweep(instance_counts=(1, 2), max_batch_sizes=(8, 32), queue_delays_us=(0,), intra_op_threads=(1, 2))
    plans = {plan.step: plan for plan in plan_steps(model_repository, ["preprocess", "captioner"], sweep)}
    # The ensemble sends up to 32 photos; caption_with_label forwards its whole batch to the captioner.
    assert plans["preprocess"].max_batch_sizes == plans["captioner"].max_batch_sizes == (32,)
    assert any("caption_with_label sends it batches of up to 32" in note for note in plans["captioner"].notes)
    assert plans["preprocess"].intra_op_threads == () and plans["captioner"].intra_op_threads == (1, 2)
    parameters = plans["captioner"].model_config_parameters()
    assert parameters["instance_group"] == [[{"kind": "KIND_CPU", "count": 1}], [{"kind": "KIND_CPU", "count": 2}]]
    assert parameters["parameters"] == {"intra_op_threads": {"string_value": ["1", "2"]}}
    assert "parameters" not in plans["preprocess"].model_config_parameters()
    assert plans["captioner"].variants == 4


def test_model_analyzer_starts_the_server_as_the_launcher_does_without_the_admin_key(tmp_path):
    launch = local_launch(tmp_path)
    assert launch.server_path.endswith("tritonserver")
    assert (tmp_path / "backends" / "python").is_dir() and launch.flags["backend-directory"] == str(
        tmp_path / "backends"
    )
    assert not {"model-repository", "http-port", "http-restricted-api", "grpc-restricted-protocol"} & set(launch.flags)
    assert launch.flags["http-address"] == "127.0.0.1"
    assert "nvidia_pytriton.libs" in launch.environment["LD_LIBRARY_PATH"]
    assert launch.environment["PATH"].split(os.pathsep)[0] == str(Path(sys.executable).parent)  # the steps' Python


def test_a_choice_changes_only_the_swept_fields(model_repository):
    config = parse_config(model_repository / "vision_encoder" / "config.pbtxt")
    before = config.__deepcopy__()
    apply_config(config, StepConfig(2, "KIND_CPU", 32, 0, "1"))
    assert StepConfig.of(config) == StepConfig(2, "KIND_CPU", 32, 0, "1")
    assert config.dynamic_batching.default_queue_policy == before.dynamic_batching.default_queue_policy
    # the resource it asks of Triton's rate limiter stays (the vision encoder's config)
    assert config.instance_group[0].rate_limiter == before.instance_group[0].rate_limiter
    assert before.instance_group[0].rate_limiter.resources[0].name == "cpu_cores"
    assert {key: value for key, value in config.parameters.items() if key != "intra_op_threads"} == {
        key: value for key, value in before.parameters.items() if key != "intra_op_threads"
    }


def test_a_run_that_measured_nothing_still_reports_its_choices():
    """Model Analyzer can end without a row (every configuration failed to load): the report says what was kept."""
    from pipeline_src.tuning.measurements import choose
    from pipeline_src.tuning.report import markdown

    sweep = {name: [1] for name in ("instance_counts", "max_batch_sizes", "queue_delays_us", "intra_op_threads")}
    result = {
        "budgets_ms": {"classifier": 50.0},
        "sweep": sweep | {"concurrency": [1]},
        "model_analyzer": analyzer_tool.VERSION,
        "tritonserver": "2.51",
        "measuring": {"requests_per_window": 8, "stability_percentage": 25},
        "photos": 3,
        "analyzer_seconds": 10.0,
        "repository": "model_repository",
        "tuned_repository": "tuned",
        "validation": "OK",
        "notes": [],
    }
    report = markdown(result, [choose("classifier", [])], [])
    assert "| classifier | 50 |" in report and "no configuration within the budget: kept as it is" in report
    assert "## Every configuration measured" in report and "| step | configuration | instances |" in report
