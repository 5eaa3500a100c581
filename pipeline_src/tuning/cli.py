"""``food11-tune`` (``make tune``): Triton Model Analyzer picks each step's configuration for this machine, under a
latency budget.

1. Model Analyzer (pinned, its own virtualenv: ``pipeline_src/tuning/analyzer_tool.py``) sweeps each step it can
   profile alone (instance count, max batch size, queue delay, ONNX Runtime's ``intra_op_threads``; CPU
   only) on the project's tritonserver and perf_analyzer, fed with perf_input's data for a folder of photos.
2. Per step, the highest throughput whose p99 is within the budget is chosen and written into a copy of the
   repository (default build/tuned_repository/), which food11-validate must accept.
3. The ensemble, which Model Analyzer cannot profile (an ensemble of 5 steps with a BLS step), is measured with
   perf_analyzer on the untuned and the tuned repository in the same run.
The report (markdown and JSON, headed by the machine, the date and the command) goes to build/tune/<name>.md.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import fields
from pathlib import Path

from pipeline_src import PROJECT_ROOT
from pipeline_src.contract import ENSEMBLE
from pipeline_src.profiling import perf_analyzer
from pipeline_src.profiling.perf_input import read_photos, write_input_data
from pipeline_src.profiling.report import machine_description
from pipeline_src.tuning import analyzer_tool
from pipeline_src.tuning.analyzer_config import Measuring, RunPaths, profile_config, write_profile_config
from pipeline_src.tuning.ensemble_check import analyzer_limits, measure_repository
from pipeline_src.tuning.measurements import choose, read_measurements
from pipeline_src.tuning.report import markdown
from pipeline_src.tuning.server_launch import local_launch
from pipeline_src.tuning.sweep import Sweep, plan_steps
from pipeline_src.tuning.tuned_repository import write_tuned_repository

# The steps Model Analyzer can profile alone: not the ensembles, not the BLS step (caption_with_label, whose
# captions come from the captioner), not label (microseconds of work), not the captioner (it batches in
# flight in its own loop, which Model Analyzer's knobs, instances and Triton's batching, do not reach; its own are
# rows_in_flight and max_prompt_tokens, measured through the ensemble).
STEPS = ("preprocess", "classifier", "vision_encoder")
DEFAULTS = Sweep()


def _budget(text: str) -> tuple[str, float]:
    step, equals, ms = text.partition("=")
    if not equals:
        raise argparse.ArgumentTypeError(f"{text!r}: STEP=MILLISECONDS")
    return step, float(ms)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--install", action="store_true", help="install Model Analyzer's virtualenv and stop")
    parser.add_argument("--repository", type=Path, default=PROJECT_ROOT / "model_repository")
    parser.add_argument("--steps", nargs="+", default=list(STEPS), help="default: %(default)s")
    parser.add_argument(
        "--latency-budget-ms", type=float, help="p99 budget of every step, in ms (default: none, highest throughput)"
    )
    parser.add_argument("--step-budget", type=_budget, action="append", default=[], metavar="STEP=MS")
    for swept in fields(Sweep):  # --instance-counts, --max-batch-sizes, --queue-delays-us, ..., --concurrency
        flag, default = f"--{swept.name.replace('_', '-')}", list(getattr(DEFAULTS, swept.name))
        parser.add_argument(flag, type=int, nargs="+", default=default)
    parser.add_argument("--requests-per-window", type=int, default=Measuring.requests_per_window)
    parser.add_argument("--stability-percentage", type=int, default=Measuring.stability_percentage)
    parser.add_argument(
        "--photos",
        type=Path,
        default=PROJECT_ROOT / "tests" / "photos",
        help="a folder of photos (default: %(default)s)",
    )
    parser.add_argument("--ensemble", default=ENSEMBLE)
    parser.add_argument(
        "--ensemble-concurrency", type=int, nargs="*", default=[1, 4], help="none: the ensemble is not measured"
    )
    parser.add_argument("--tuned-repository", type=Path, default=PROJECT_ROOT / "build" / "tuned_repository")
    parser.add_argument("--scratch", type=Path, default=PROJECT_ROOT / "build" / "tune")
    parser.add_argument("--output-dir", type=Path, default=PROJECT_ROOT / "build" / "tune")
    parser.add_argument("--name", default="tune", help="report file names, without extension")
    return parser.parse_args(argv)


def run_analyzer(paths: RunPaths) -> float:
    """``model-analyzer profile``, its output shown and kept in its log; returns the seconds it took."""
    started = time.monotonic()
    with open(paths.log, "w", buffering=1) as log:  # line-buffered: the log can be followed while it runs
        process = subprocess.Popen(
            [str(analyzer_tool.BINARY), "profile", "-f", str(paths.config)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert process.stdout is not None
        for line in process.stdout:
            log.write(line)
            if line.startswith("[Model Analyzer] Profiling") or "Error" in line or "ERROR" in line:
                print(line, end="", flush=True)
        code = process.wait()
    if code != 0:
        tail = "\n".join(paths.log.read_text().splitlines()[-25:])
        raise SystemExit(f"model-analyzer exited {code}; the end of {paths.log}:\n{tail}")
    return time.monotonic() - started


def prune_variant_copies(variants: Path) -> None:
    """Model Analyzer copies each step's folder once (the captioner's: gigabytes); only the configs are read."""
    for folder in variants.iterdir():
        for item in folder.iterdir():
            if item.name != "config.pbtxt":
                if item.is_dir() and not item.is_symlink():
                    shutil.rmtree(item)
                else:
                    item.unlink()


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.install:
        print(f"Model Analyzer {analyzer_tool.install()} in {analyzer_tool.TOOL_DIR}")
        return
    version = analyzer_tool.install()
    perf_analyzer.library_path()  # raises, saying how to install it, when perf_analyzer is missing
    repository = args.repository.resolve()
    sweep = Sweep(**{swept.name: tuple(getattr(args, swept.name)) for swept in fields(Sweep)})
    plans = plan_steps(repository, args.steps, sweep)
    for plan in plans:
        print(f"{plan.step}: {plan.variants} configuration(s) to measure, and the current one", flush=True)
        for note in plan.notes:
            print(f"  {note}", flush=True)
    photos = read_photos(args.photos)
    inputs = write_input_data(repository, photos, args.scratch / "perf_input")
    if unfed := [plan.step for plan in plans if plan.step not in inputs]:
        raise SystemExit(f"no perf_analyzer input data for {unfed}: scripts/perf_input.py says why")
    paths = RunPaths(args.scratch / "model_analyzer")
    shutil.rmtree(paths.root, ignore_errors=True)  # a checkpoint left there would be resumed, not measured anew
    measuring = Measuring(args.requests_per_window, args.stability_percentage)
    every_step = {step: args.latency_budget_ms for step in args.steps if args.latency_budget_ms is not None}
    budgets = every_step | dict(args.step_budget)
    launch = local_launch(args.scratch / "triton")
    config = profile_config(repository, plans, inputs, launch, paths, sweep.concurrency, budgets, measuring)
    write_profile_config(config, paths)
    print(f"model-analyzer profile -f {paths.config} (log: {paths.log})", flush=True)
    seconds = run_analyzer(paths)
    measured = read_measurements(paths.inference_csv, paths.variants)
    prune_variant_copies(paths.variants)
    choices = [choose(plan.step, measured) for plan in plans]
    report = write_tuned_repository(repository, args.tuned_repository.resolve(), choices)
    print(report.summary(), flush=True)

    result = {
        "model_analyzer": version,
        "tritonserver": f"2.51 from nvidia-pytriton {importlib.metadata.version('nvidia-pytriton')}",
        "repository": str(repository),
        "tuned_repository": str(args.tuned_repository.resolve()),
        "validation": report.summary(),
        "photos": len(photos),
        "budgets_ms": budgets,
        "sweep": {key: list(value) for key, value in sweep.__dict__.items()},
        "measuring": measuring.__dict__,
        "analyzer_seconds": seconds,
        "notes": [f"{plan.step}: {note}." for plan in plans for note in plan.notes],
        "steps": {plan.step: plan.model_config_parameters() for plan in plans},
        # each row's configuration flattened into it
        "measured": [
            {**{k: v for k, v in row.__dict__.items() if k != "config"}, **row.config.__dict__} for row in measured
        ],
        "chosen": {c.step: (c.chosen.variant if c.chosen else None) for c in choices},
    }
    if args.ensemble_concurrency:
        rows = []
        for label, path in (("untuned", repository), ("tuned", args.tuned_repository.resolve())):
            rows += measure_repository(
                label,
                path,
                args.ensemble,
                inputs[args.ensemble],
                args.ensemble_concurrency,
                args.requests_per_window,
                args.scratch / "ensemble",
            )
        result["ensemble"] = {"name": args.ensemble, "why": analyzer_limits(repository, args.ensemble), "rows": rows}
    written = write_report(args.output_dir, args.name, result, markdown(result, choices, measured), argv)
    print(written.read_text())


def write_report(directory: Path, name: str, result: dict, text: str, argv=None) -> Path:
    """``name.json`` and ``name.md`` in ``directory``, each headed by the machine, the date and the command."""
    arguments = sys.argv[1:] if argv is None else argv
    header = {
        "machine": machine_description(),
        "date": datetime.date.today().isoformat(),
        "command": shlex.join(["food11-tune", *arguments]),
    }
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{name}.json").write_text(json.dumps({**header, **result}, indent=2) + "\n")
    title, _, body = text.partition("\n")
    written = directory / f"{name}.md"
    written.write_text(
        f"{title}\n\nMeasured on {header['machine']}, {header['date']}. Command: `{header['command']}`.\n{body}"
    )
    return written


if __name__ == "__main__":
    main()
