"""perf_analyzer, as the ``tritonclient==2.50.0`` wheel ships it, made runnable here.

2.50.0 is the last tritonclient wheel with a perf_analyzer binary, and it caps protobuf below 5, which has a
known advisory; the product's client runs a current tritonclient. So perf_analyzer is a tool installed
apart: ``food11-perf-analyzer --install`` unpacks that wheel and PyPI's ``nvidia-cuda-runtime-cu12`` (its
``libcudart.so.12``, loaded but not used without a GPU) into ``TOOL_DIR`` without their Python dependencies,
and Debian's ``libb64-0d`` (``apt-get install`` as root, else ``apt-get download`` unpacked there too,
leaving the system alone). ``food11-perf-analyzer ARGS`` runs it with those libraries on the library path.

It measures the pipeline, not Triton's response cache: perf_analyzer sends the same few inputs again and again,
which a cached model answers from the cache without running a step. So a model served with its response cache on
(``make serve``'s ``CACHE_MIB``) is refused with how to profile it; ``--include-cache-hits`` measures it as served,
and perf_analyzer's "Cache hit count" then says how much of it was the cache.
"""

from __future__ import annotations

import csv
import ctypes.util
import itertools
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

TOOL_DIR = Path(sys.prefix) / "opt" / "perf_analyzer"  # in the virtualenv, apart from its site-packages
TOOL_WHEELS = ("tritonclient==2.50.0", "nvidia-cuda-runtime-cu12==12.9.79")
LOCAL_LIBB64 = TOOL_DIR / "libb64"  # where a non-root install unpacks the Debian package
LIBB64_PACKAGE = "libb64-0d"
BINARY = TOOL_DIR / "bin" / "perf_analyzer"
CUDART = TOOL_DIR / "nvidia" / "cuda_runtime" / "lib"


INCLUDE_CACHE_HITS = "--include-cache-hits"


class PerfAnalyzerMissing(RuntimeError):
    """perf_analyzer or a library it needs is not installed; the message says how to install it."""


def _installed(path: Path) -> Path:
    if not path.exists():
        raise PerfAnalyzerMissing(f"{path} is missing: food11-perf-analyzer --install (or make perf-analyzer)")
    return path


def _local_libb64_dirs() -> list[Path]:
    return sorted(path.parent for path in LOCAL_LIBB64.glob("usr/lib/*/libb64.so.0d"))


def library_path() -> str:
    """LD_LIBRARY_PATH for perf_analyzer: cudart from the tool folder, libb64 from the system or the tool folder."""
    dirs = [_installed(CUDART), *_local_libb64_dirs()]
    if not _local_libb64_dirs() and not ctypes.util.find_library("b64"):
        raise PerfAnalyzerMissing(f"libb64.so.0d is missing: apt-get install {LIBB64_PACKAGE} (or make perf-analyzer)")
    return os.pathsep.join(filter(None, [*map(str, dirs), os.environ.get("LD_LIBRARY_PATH")]))


def environment() -> dict[str, str]:
    return dict(os.environ, LD_LIBRARY_PATH=library_path())


def command(*args: str) -> list[str]:
    return [str(_installed(BINARY)), *args]


def install_tool() -> None:
    """The two wheels unpacked into TOOL_DIR, without dependencies (only their binaries run)."""
    if BINARY.exists() and CUDART.is_dir():
        return
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--upgrade", "--target", str(TOOL_DIR)]
    subprocess.run([*pip, *TOOL_WHEELS], check=True)


def install_libb64() -> None:
    """Debian's libb64-0d: installed system-wide as root, else unpacked into the virtualenv."""
    if ctypes.util.find_library("b64") or _local_libb64_dirs():
        return
    if shutil.which("apt-get") is None:
        raise PerfAnalyzerMissing(f"no apt-get here: install {LIBB64_PACKAGE} (libb64.so.0d) by hand")
    if os.geteuid() == 0:
        subprocess.run(["apt-get", "update", "-qq"], check=True)
        subprocess.run(
            ["apt-get", "install", "-y", "-qq", LIBB64_PACKAGE],
            check=True,
            env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"),
        )
        return
    with tempfile.TemporaryDirectory() as scratch:
        subprocess.run(["apt-get", "download", LIBB64_PACKAGE], cwd=scratch, check=True)
        (package,) = Path(scratch).glob("*.deb")
        subprocess.run(["dpkg-deb", "-x", str(package), str(LOCAL_LIBB64)], check=True)


@dataclass(frozen=True)
class Measurement:
    """One perf_analyzer run at one concurrency: its CSV row, latencies in milliseconds."""

    model: str
    concurrency: int
    throughput: float  # inferences per second
    p50_ms: float
    p95_ms: float
    p99_ms: float
    mean_ms: float

    @classmethod
    def from_csv(cls, model: str, path: Path) -> Measurement:
        with open(path, newline="") as handle:
            row = next(csv.DictReader(handle))
        columns = {"p50_ms": "p50 latency", "p95_ms": "p95 latency", "p99_ms": "p99 latency", "mean_ms": "Avg latency"}
        ms = {key: float(row[column]) / 1000.0 for key, column in columns.items()}
        return cls(model, int(row["Concurrency"]), float(row["Inferences/Second"]), **ms)


# A sweep's table: each Measurement's columns, with the stability a run settled at.
COLUMNS = ("model", "concurrency", "throughput", "p50_ms", "p95_ms", "p99_ms", "stability_percentage")


class PerfAnalyzerFailed(RuntimeError):
    """perf_analyzer exited non-zero; the message carries the end of its output."""


class PerfAnalyzerTimedOut(PerfAnalyzerFailed):
    """perf_analyzer gave no result within the caller's time and was killed."""


def served_config(model: str, url: str, protocol: str = "grpc") -> dict:
    """The served ``model``'s config (config.pbtxt's field names), over gRPC or HTTP as perf_analyzer is told."""
    if protocol == "http":
        import tritonclient.http as httpclient

        with httpclient.InferenceServerClient(url) as client:
            return client.get_model_config(model)
    import tritonclient.grpc as grpcclient

    with grpcclient.InferenceServerClient(url) as client:
        return client.get_model_config(model, as_json=True)["config"]


def cache_refusal(args: Sequence[str]) -> str | None:
    """Why perf_analyzer with ``args`` would measure Triton's response cache rather than the model (None: it would
    not, or the server cannot be asked, which perf_analyzer then reports itself)."""
    options = dict(itertools.pairwise(args))  # each flag with the word after it
    model = options.get("-m") or next((arg.split("=", 1)[1] for arg in args if arg.startswith("--model-name=")), None)
    url = options.get("-u") or options.get("--url") or "localhost:8001"
    protocol = options.get("-i") or options.get("--protocol") or "http"  # perf_analyzer's default
    if model is None:
        return None
    if protocol == "http" and url == "localhost:8001":
        url = "localhost:8000"
    try:
        config = served_config(model, url, protocol)
    except Exception:  # no server, no model: perf_analyzer says so in its own words
        return None
    return cached_model_refusal(model, config)


def cached_model_refusal(model: str, config: dict) -> str | None:
    if not config.get("response_cache", {}).get("enable"):
        return None
    return (
        f"{model} is served with Triton's response cache on (make serve's CACHE_MIB): perf_analyzer repeats its "
        "inputs, so nearly every request would be a cache hit and the figures would measure the cache, not the "
        f"pipeline. Profile a server without it (make serve CACHE_MIB=0), or pass {INCLUDE_CACHE_HITS} to measure "
        'it as served (perf_analyzer\'s "Cache hit count" then says how much of it was the cache).'
    )


def measure(
    model: str,
    grpc_url: str,
    input_data: Path,
    concurrency: int,
    csv_path: Path,
    requests_per_window: int = 16,
    stability_percentage: int = 10,
    bls_composing: Sequence[str] = (),
    timeout_s: float | None = None,
) -> Measurement:
    """perf_analyzer at one concurrency over gRPC, in count windows: a slow model (seconds per
    request) finishes too few requests in a time window for its measurements to stabilise.
    ``bls_composing``: models a BLS step of ``model`` calls, reported with the ensemble's composing models.
    ``timeout_s``: a run that has not finished by then is killed and reported as failed. A model served with the
    response cache on is refused (``cache_refusal``): these figures are the pipeline's."""
    config = served_config(model, grpc_url)
    if refusal := cached_model_refusal(model, config):
        raise PerfAnalyzerFailed(refusal)
    args = ["-m", model, "-u", grpc_url, "-i", "grpc", "--input-data", str(input_data), "-f", str(csv_path)]
    args += ["--concurrency-range", f"{concurrency}:{concurrency}", "--measurement-mode", "count_windows"]
    args += ["--measurement-request-count", str(requests_per_window), "--max-trials", "10", "--verbose-csv"]
    args += ["--stability-percentage", str(stability_percentage)]
    if bls_composing:
        args.append(f"--bls-composing-models={','.join(bls_composing)}")
    if config.get("model_transaction_policy", {}).get("decoupled"):
        args.append("--streaming")  # a decoupled model answers over gRPC streams only
    csv_path.unlink(missing_ok=True)  # a file left by an earlier run must not pass for this one's
    try:
        done = subprocess.run(command(*args), env=environment(), capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        raise PerfAnalyzerTimedOut(
            f"perf_analyzer on {model} at concurrency {concurrency}: no result in {timeout_s:g} s"
        ) from exc
    if done.returncode != 0 or not csv_path.exists():
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise PerfAnalyzerFailed(
            f"perf_analyzer on {model} at concurrency {concurrency} exited {done.returncode}:\n{tail}"
        )
    return Measurement.from_csv(model, csv_path)


def measure_stably(
    model: str,
    grpc_url: str,
    input_data: Path,
    concurrency: int,
    csv_path: Path,
    window: int,
    bls_composing: Sequence[str] = (),
    timeout_s: float | None = None,
) -> tuple[Measurement, int]:
    """perf_analyzer's default stability (three windows within 10 %), loosened once if a slow, batching
    model does not settle; the bound that held is reported with the figures."""
    where = (model, grpc_url, input_data, concurrency, csv_path, window)
    try:
        return measure(*where, 10, bls_composing, timeout_s), 10
    except PerfAnalyzerFailed as exc:
        if "stable measurement" not in str(exc):
            raise
    print(f"{model} at concurrency {concurrency}: not stable within 10 %, retrying within 25 %", flush=True)
    return measure(*where, 25, bls_composing, timeout_s), 25


def main(argv=None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if args == ["--install"]:
            install_tool()
            install_libb64()
            args = ["--version"]
        elif INCLUDE_CACHE_HITS in args:
            args.remove(INCLUDE_CACHE_HITS)
            print("food11-perf-analyzer: cache hits included: see perf_analyzer's Cache hit count", file=sys.stderr)
        elif refusal := cache_refusal(args):
            sys.exit(f"food11-perf-analyzer: {refusal}")
        os.execve(str(_installed(BINARY)), command(*args), environment())
    except PerfAnalyzerMissing as exc:
        sys.exit(f"food11-perf-analyzer: {exc}")


if __name__ == "__main__":
    main()
