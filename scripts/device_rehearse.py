#!/usr/bin/env python3
"""The device calls scripts/device_stage.py prints, command for command, here on the CPU: a rehearsal of the GPU
route before a GPU machine is lent (docs/gpu.md, "Rehearsing without a GPU", says how to make the stand-in).

    .venv/bin/python scripts/device_stage.py                  # stage the parts (once per commit)
    .venv/bin/python scripts/device_rehearse.py --image-python /tmp/image-python/bin/python

Each call runs in this checkout as the device runs it, but with ``FOOD11_ALLOW_CPU=1``; prints each call's exit
status, time and files, and exits non-zero if a call failed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from device_calls import CALL_LIMIT_S, FILES_ON_DEVICE, PARTS_ON_DEVICE, device_calls
from device_stage import STAGE_DIR

from benchmarks.lib.results import collect_provenance
from pipeline_src import PROJECT_ROOT

DEVICE_SCRATCH = (PARTS_ON_DEVICE, FILES_ON_DEVICE, "/tmp/venv", "/tmp/buildsite")  # device_join.sh's


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--image-python", type=Path, required=True, help="the stand-in for the device's python3")
    parser.add_argument("--out", type=Path, default=Path("/tmp/device_rehearsal"), help="each call's OUT, numbered")
    args = parser.parse_args(argv)
    parts = sorted(STAGE_DIR.glob("part[0-9]*"), key=lambda path: int(path.name.removeprefix("part")))
    if not parts:
        raise SystemExit("device_rehearse: no parts: run scripts/device_stage.py first")
    provenance = collect_provenance()
    staged = STAGE_DIR / "files"
    baseline = next((path.name.removesuffix(".tar.xz") for path in (staged / "baseline").glob("*.tar.xz")), None)
    reference = (staged / "reference" / "reference.json").is_file()
    calls = device_calls(len(parts), provenance.commit, not provenance.clean, baseline, reference)
    for folder in (*DEVICE_SCRATCH, str(args.out)):
        shutil.rmtree(folder, ignore_errors=True)
    image_bin = str(args.image_python.parent)
    failed = 0
    for number, call in enumerate(calls, start=1):
        out = args.out / f"call{number}"
        out.mkdir(parents=True)
        env = dict(os.environ, OUT=str(out), FOOD11_ALLOW_CPU="1", PATH=f"{image_bin}{os.pathsep}{os.environ['PATH']}")
        env.pop("VIRTUAL_ENV", None)
        started = time.monotonic()
        done = subprocess.run(["bash", "-c", call["command"]], cwd=PROJECT_ROOT, env=env, timeout=CALL_LIMIT_S)
        seconds = time.monotonic() - started
        files = ", ".join(sorted(path.name for path in out.iterdir())) or "none"
        print(f"device_rehearse: call {number}: exit {done.returncode} in {seconds:.0f} s; files: {files}", flush=True)
        failed += done.returncode != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
