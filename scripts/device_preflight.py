#!/usr/bin/env python3
"""What the GPU run needs from the machine itself, checked before anything is installed (docs/gpu.md lists the
checks):

    python3 scripts/device_preflight.py        # the image's own Python, standard library only

One line per check, ``ok`` or ``MISSING`` with what it found; exits 1 when a check the run cannot do without
fails, so the calls stop at the first one rather than at a server that never starts.
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import importlib.metadata as metadata
import os
import shutil
import site
import subprocess
import sys
import sysconfig
from dataclasses import dataclass, replace
from pathlib import Path

MIN_DRIVER = 580  # CUDA 13's
MIN_SHM_BYTES = 2**30  # the steps' tensors cross processes through it
MIN_TMP_BYTES = 10 * 2**30  # the staged files, the virtualenv, the base stand-in's model files
LIBPYTHON = f"libpython{sys.version_info.major}.{sys.version_info.minor}.so.1.0"
SYSTEM_LIBRARIES = ("libssl.so.3", "libcrypto.so.3", "libz.so.1")  # perf_analyzer 2.50's, from the system
# ONNX Runtime 1.31's preload_dlls: the CUDA 13 wheels' layout under site-packages/nvidia
CUDA_LIBRARIES = {
    "cu13/lib": ("libcudart.so.13", "libcublas.so.13", "libcublasLt.so.13", "libcufft.so.12", "libcurand.so.10"),
    "cudnn/lib": ("libcudnn.so.9",),
}
VERSIONS = ("numpy", "scipy", "scikit-learn", "torch", "transformers", "onnx", "tokenizers", "pillow")


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    found: str
    needed: bool = True  # False: reported, never fatal

    def line(self) -> str:
        state = "ok" if self.ok else ("MISSING" if self.needed else "note")
        return f"preflight: {state:7} {self.name}: {self.found}"


def run(*command: str) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"({exc})"
    return done.stdout if done.returncode == 0 else f"(exit {done.returncode}) {done.stderr.strip()[-300:]}"


def gpu() -> list[Check]:
    listing = [line for line in run("nvidia-smi", "-L").splitlines() if line.startswith("GPU ")]
    driver = run("nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader").strip().splitlines()[:1]
    major = int(driver[0].split(".")[0]) if driver and driver[0][:1].isdigit() else 0
    return [
        Check("a GPU (nvidia-smi -L)", bool(listing), "; ".join(listing) or "none listed"),
        Check(f"driver {MIN_DRIVER} or later", major >= MIN_DRIVER, driver[0] if driver else "unknown"),
    ]


@functools.cache
def loader_cache() -> str:
    """``ldconfig -p``, read once for every library checked."""
    return run("ldconfig", "-p")


def loadable(name: str) -> str | None:
    """Where the dynamic loader finds ``name`` (ldconfig's cache), or None."""
    for line in loader_cache().splitlines():
        if line.strip().startswith(name + " "):
            return line.split("=>")[-1].strip()
    try:
        ctypes.CDLL(name)
    except OSError:
        return None
    return "(the loader's path)"


def libpython() -> Check:
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    beside = Path(libdir) / LIBPYTHON
    found = str(beside) if beside.exists() else loadable(LIBPYTHON)
    where = found or f"not in {libdir} nor the loader's cache"
    return Check(f"{LIBPYTHON} (the Python backend stub links it)", found is not None, where)


def system_libraries() -> list[Check]:
    return [
        Check(f"{name} (perf_analyzer)", bool(where := loadable(name)), where or "not found")
        for name in SYSTEM_LIBRARIES
    ]


def cuda_libraries() -> list[Check]:
    roots = [Path(path) / "nvidia" for path in site.getsitepackages() if (Path(path) / "nvidia").is_dir()]
    checks = []
    for folder, names in CUDA_LIBRARIES.items():
        for name in names:
            where = next((root / folder / name for root in roots if (root / folder / name).exists()), None)
            # not fatal: ONNX Runtime also looks in the loader's paths; the CUDA smoke test decides
            found = str(where or f"not under {roots}: ONNX Runtime will try the loader's paths")
            checks.append(Check(f"{name} (ONNX Runtime's CUDA provider)", where is not None, found, needed=False))
    return checks


def room() -> list[Check]:
    shm = os.statvfs("/dev/shm") if os.path.isdir("/dev/shm") else None
    shm_bytes = shm.f_frsize * shm.f_blocks if shm else 0
    tmp_bytes = shutil.disk_usage("/tmp").free
    return [
        Check("/dev/shm of 1 GiB or more", shm_bytes >= MIN_SHM_BYTES, f"{shm_bytes / 2**30:.1f} GiB"),
        Check("10 GiB free in /tmp", tmp_bytes >= MIN_TMP_BYTES, f"{tmp_bytes / 2**30:.1f} GiB"),
    ]


def versions() -> Check:
    found = []
    for name in VERSIONS:
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            found.append(f"{name} -")
    return Check(f"the image's packages (Python {sys.version.split()[0]})", True, ", ".join(found), needed=False)


def checks() -> list[Check]:
    return [*gpu(), libpython(), *system_libraries(), *cuda_libraries(), *room(), versions()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--allow-cpu",
        action="store_true",
        default=bool(os.environ.get("FOOD11_ALLOW_CPU")),
        help="a missing GPU is not fatal (a rehearsal: scripts/device_rehearse.py sets FOOD11_ALLOW_CPU=1)",
    )
    args = parser.parse_args(argv)
    results = checks()
    if args.allow_cpu:
        results = [replace(c, needed=False) if c.name.startswith(("a GPU", "driver")) else c for c in results]
    for check in results:
        print(check.line(), flush=True)
    missing = [check.name for check in results if check.needed and not check.ok]
    if missing:
        print(f"preflight: STOP: {len(missing)} missing: {'; '.join(missing)}", flush=True)
        return 1
    print("preflight: everything the run needs is here", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
