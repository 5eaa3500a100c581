"""A fresh clone to its first caption: ``git clone`` of this commit, ``make serve`` (the virtualenv, the
offline-default models, Triton and the API), then one photo through the API, timed as a newcomer meets it.

The clone gets its own virtualenv and builds its own models; only pip's download cache is shared with this
machine (the run records whether it was warm: a machine that never installed the pins downloads them first).
Each line ``make serve`` prints is kept with its time, so the phases (install, build, start) show.

Figures to ``benchmarks/results/first_run.{json,md}``.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from benchmarks.lib.results import parse_benchmark_args, write_results
from pipeline_src import PROJECT_ROOT
from pipeline_src.serving.ports import free_port

READY_LINE = "Ctrl-C stops everything"
PHOTO = PROJECT_ROOT / "tests" / "photos" / "apple.jpg"


def pip_cache_mib() -> float:
    out = subprocess.run([sys.executable, "-m", "pip", "cache", "dir"], capture_output=True, text=True).stdout.strip()
    files = [path for path in Path(out).rglob("*") if path.is_file()] if out and Path(out).is_dir() else []
    return sum(path.stat().st_size for path in files) / 2**20


def timed_lines(process: subprocess.Popen, started: float, lines: list[tuple[float, str]], ready: threading.Event):
    assert process.stdout is not None
    for line in process.stdout:
        lines.append((time.monotonic() - started, line.rstrip()))
        print(f"[{lines[-1][0]:6.1f} s] {line.rstrip()}", flush=True)
        if READY_LINE in line:
            ready.set()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--timeout", type=float, default=1800, help="give up after this many seconds")
    args = parse_benchmark_args(parser, argv)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=PROJECT_ROOT, capture_output=True, text=True).stdout
    cache_mib = pip_cache_mib()
    ports = {name: free_port() for name in ("HTTP_PORT", "GRPC_PORT", "METRICS_PORT", "API_PORT")}
    with tempfile.TemporaryDirectory(prefix="first-run-") as scratch:
        clone = Path(scratch) / "clone"
        subprocess.run(["git", "clone", "--quiet", str(PROJECT_ROOT), str(clone)], check=True)
        subprocess.run(["git", "checkout", "--quiet", commit.strip()], cwd=clone, check=True)
        lines: list[tuple[float, str]] = []
        ready = threading.Event()
        started = time.monotonic()
        make = ["make", "serve", *(f"{name}={port}" for name, port in ports.items())]
        process = subprocess.Popen(
            make, cwd=clone, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
        )
        reader = threading.Thread(target=timed_lines, args=(process, started, lines, ready), daemon=True)
        reader.start()
        try:
            if not ready.wait(args.timeout):
                sys.exit(f"first_run: no '{READY_LINE}' within {args.timeout:.0f} s (make exited {process.poll()})")
            ready_s = time.monotonic() - started
            answer = httpx.post(
                f"http://127.0.0.1:{ports['API_PORT']}/caption",
                files={"photo": ("apple.jpg", PHOTO.read_bytes(), "image/jpeg")},
                timeout=300,
            )
            first_caption_s = time.monotonic() - started
            answer.raise_for_status()
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGINT)  # Ctrl-C, as at a terminal
                process.wait(timeout=180)
            reader.join(timeout=10)
    result = {
        "pip_cache_mib_before": round(cache_mib),
        "ready_s": round(ready_s, 1),
        "first_caption_s": round(first_caption_s, 1),
        "answer": {key: answer.json()[key] for key in ("label", "probability", "caption_status")},
        "lines": [{"at_s": round(at, 1), "line": line} for at, line in lines],
    }
    phases = "\n".join(
        f"| {at:.0f} | `{line[:140]}` |"
        for at, line in lines
        if line.startswith(("make:", "classifier:", "captioner:", "tritonserver", "API ready", READY_LINE))
    )
    markdown = (
        "# A fresh clone to its first caption\n\n"
        f"`git clone` of the commit, `make serve`, then one photo (`tests/photos/apple.jpg`) through `/caption`. "
        f"pip's download cache held {cache_mib:.0f} MiB before the run (shared with this machine; 0 means every "
        "package was downloaded).\n\n"
        f"- `make serve` ready (Triton and the API): **{ready_s:.0f} s**\n"
        f"- first caption answered: **{first_caption_s:.0f} s** ({answer.json()['label']}, "
        f"{answer.json()['caption_status']})\n\n"
        "| seconds | what `make serve` printed |\n| --- | --- |\n" + phases + "\n"
    )
    print(f"wrote {write_results('first_run', result, markdown)}")


if __name__ == "__main__":
    main()
