#!/usr/bin/env python3
"""``make bench-gpu`` (``python -m benchmarks.gpu_serve``): the served pipeline measured on a GPU, stage by stage
as docs/gpu.md ("Measure it") describes: the machine; where each step runs (Triton's config and log, each step's
own ONNX Runtime providers); the photos through the ensemble, each caption against Hugging Face fp32 ``generate``
(benchmarks/hf_reference.py, on ``REFERENCE_PYTHON``) and each label against the classifier run here;
perf_analyzer on the ensembles and the classifier; the issue's targets, reported met or missed (not asserted).

It refuses a machine without a GPU unless --allow-cpu. Every stage saves what it has so far (<name>.json,
<name>.md and the end of Triton's log, in $OUT or benchmarks/results/): a later stage may crash on a GPU this
has never run on, and --deadline-s or SIGTERM ends the run through every stage's cleanup. FOOD11_COMMIT names
the commit of a copied tree (``abc1234+dirty``: uncommitted changes, which need --allow-dirty).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata as metadata
import json
import os
import platform
import signal
import subprocess
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient

from benchmarks.gpu_serve_report import (
    compare_captions,
    cuda_version,
    gpu_rows,
    gpu_steps,
    listed_gpus,
    markdown,
    placement,
    reference_prompt,
    targets,
)
from benchmarks.lib import carried_reference, mps
from benchmarks.lib.in_process import InProcessPipeline, blip_description, step_settings
from benchmarks.lib.photos import FRUIT_PHOTOS, TEST_PHOTOS, varied_photos
from benchmarks.lib.results import (
    RESULTS_DIR,
    Provenance,
    benchmark_cli,
    collect_provenance,
    parse_benchmark_args,
    portable_path,
    write_results,
)
from benchmarks.lib.triton_stats import STEPS, figures_since, snapshot
from food11_client import CaptionResult, Food11Client
from pipeline_src import PROJECT_ROOT
from pipeline_src.contract import ENSEMBLE
from pipeline_src.profiling import perf_analyzer
from pipeline_src.profiling.perf_input import write_input_data
from pipeline_src.repository.bls_calls import bls_callees
from pipeline_src.serving.launcher import TritonServer
from pipeline_src.serving.ports import free_ports
from pipeline_src.steps.settings import CaptionerSettings

OUT = Path(os.environ["OUT"]) if os.environ.get("OUT") else RESULTS_DIR
SCRATCH = PROJECT_ROOT / "build" / "gpu_serve"
GPU_FIELDS = ("name", "driver_version", "memory.total")
# What the figures depend on, recorded with them. ONNX Runtime: the version of the module imported (the device
# tool's machine has both builds installed, one over the other).
DISTRIBUTIONS = "numpy pillow tokenizers torch transformers tritonclient grpcio protobuf nvidia-pytriton"
MAX_ROWS = 32  # the ensemble's max_batch_size: the photos go in one request
LOG_TAIL_BYTES = 8 * 2**20  # the end of Triton's log comes back with the results (where a failure is)
# Triton's GPU metrics come from the DCGM it bundles, which nothing here reads and which has crashed servers.
SERVER_ARGS = ("--allow-gpu-metrics=false",)
CLIENT_TIMEOUT_S = 120.0  # one request of every photo, on a machine where the steps fell back to the CPU
REFERENCE_TIMEOUT_S = 300.0
WRITE_REFERENCE_TIMEOUT_S = 3600.0  # --write-reference: ahead of a GPU run, on a machine with time to spare
REFERENCE_PYTHON = "REFERENCE_PYTHON"  # the interpreter the reference runs on; default: this one
ALLOW_CPU = "FOOD11_ALLOW_CPU"  # set by scripts/device_rehearse.py: the device calls, unchanged, on a CPU


class OutOfTime(BaseException):
    """The run's deadline passed or it was told to stop (SIGTERM): unwinds every stage's ``finally``."""


def parse_args(argv=None) -> argparse.Namespace:
    parser = benchmark_cli(__doc__, "gpu_serve", repository=True)
    parser.add_argument("--build", action="store_true", help="build its model files first (scripts/build_models.py)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32], help="the ensemble's levels")
    parser.add_argument(
        "--ensembles",
        nargs="+",
        default=[ENSEMBLE],
        help="the ensembles measured, in turn, on the one server (food11_pipeline_merged: the vision encoder inside "
        "the captioner); each one's captions checked. Default: %(default)s",
    )
    parser.add_argument("--classifier-concurrency", type=int, default=16)
    parser.add_argument("--photos", type=int, default=12, help=f"distinct photos, at most {MAX_ROWS}")
    parser.add_argument(
        "--window", type=int, default=32, help="perf_analyzer requests per count window on the ensemble (at least 2x c)"
    )
    parser.add_argument("--classifier-window", type=int, default=1000, help="the same on the classifier alone")
    parser.add_argument(
        "--allow-cpu",
        action="store_true",
        default=bool(os.environ.get(ALLOW_CPU)),
        help=f"run without a GPU (its figures are then the CPU's, and say so); also {ALLOW_CPU}=1",
    )
    parser.add_argument(
        "--reference",
        type=Path,
        help="Hugging Face fp32 captions made ahead (--write-reference) and carried: those whose key matches are not "
        "recomputed here",
    )
    parser.add_argument(
        "--write-reference",
        type=Path,
        metavar="FILE",
        help="only write Hugging Face fp32's caption of each photo with every prompt to FILE, for --reference on "
        "another machine (no server, no GPU needed)",
    )
    parser.add_argument(
        "--mps",
        action="store_true",
        help="run Triton under NVIDIA MPS (its control daemon started first, stopped after; benchmarks/lib/mps.py)",
    )
    parser.add_argument("--deadline-s", type=float, help="stop by then, saving what was measured (default: none)")
    parser.add_argument("--ready-timeout-s", type=float, default=180.0, help="tritonserver's start; %(default)s")
    parser.add_argument(
        "--perf-timeout-s", type=float, default=240.0, help="one perf_analyzer run at one level; %(default)s"
    )
    args = parse_benchmark_args(parser, argv)
    if not 1 <= args.photos <= MAX_ROWS:
        parser.error(f"--photos: 1 to {MAX_ROWS}")
    return args


def nvidia_smi(*args: str) -> str:
    """nvidia-smi's output, "" where it is missing or fails (no GPU, no driver)."""
    try:
        done = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout if done.returncode == 0 else ""


def require_gpu(allow_cpu: bool) -> bool:
    """Whether ``nvidia-smi -L`` lists a GPU; without one, a refusal unless ``allow_cpu``."""
    if listed_gpus(nvidia_smi("-L")):
        return True
    if not allow_cpu:
        raise SystemExit(
            "gpu_serve: no GPU here (`nvidia-smi -L` lists none, or there is no nvidia-smi). This measures the "
            "served pipeline on a GPU; --allow-cpu runs it on the CPU anyway, and its results then say so."
        )
    print("gpu_serve: no GPU: running on the CPU (--allow-cpu)", file=sys.stderr, flush=True)
    return False


def environment(has_gpu: bool) -> dict:
    import onnxruntime as ort

    versions = {}
    for name in DISTRIBUTIONS.split():
        with contextlib.suppress(metadata.PackageNotFoundError):
            versions[name] = metadata.version(name)
    query = nvidia_smi(f"--query-gpu={','.join(GPU_FIELDS)}", "--format=csv,noheader") if has_gpu else ""
    return {
        "gpus": gpu_rows(query, GPU_FIELDS),
        "cuda_version": cuda_version(nvidia_smi()) if has_gpu else None,
        "onnxruntime": ort.__version__,
        "onnxruntime_providers": ort.get_available_providers(),
        "python": platform.python_version(),
        "versions": versions,
    }


class Run:
    """The result so far, written after every stage with the targets it allows."""

    def __init__(self, name: str, provenance: Provenance, log_file: Path):
        self.name = name
        self.provenance = provenance
        self.log_file = log_file
        self.result: dict = {}

    def save(self) -> None:
        """The results so far and the end of Triton's log, in OUT: a run killed later still leaves both."""
        self.result["targets"] = targets(
            self.result.get("perf_analyzer", []), self.result.get("captions", {}), self.result.get("mode") == "fast"
        )
        write_results(self.name, self.result, markdown(self.result), directory=OUT, provenance=self.provenance)
        if self.log_file.exists():  # what the steps said at load, and any failure
            with open(self.log_file, "rb") as log:
                log.seek(max(0, self.log_file.stat().st_size - LOG_TAIL_BYTES))
                (OUT / f"{self.name}_tritonserver.log").write_bytes(log.read())

    def fail(self, what: str, error: str) -> None:
        self.result.setdefault("errors", {})[what] = error[-3000:]
        print(f"gpu_serve: {what} failed:\n{error}", file=sys.stderr, flush=True)

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Runs the block; a failure is recorded (the next stages go on where they can); then saves."""
        print(f"gpu_serve: {name}", flush=True)
        try:
            yield
        except Exception:
            self.fail(name, traceback.format_exc())
        finally:
            self.save()


def server_facts(grpc_url: str) -> tuple[str, dict[str, list]]:
    """Triton's version, and each step's instance groups as Triton completed its config (kinds decided)."""
    with grpcclient.InferenceServerClient(grpc_url) as client:
        version = client.get_server_metadata(as_json=True)["version"]
        groups = {
            step: client.get_model_config(step, as_json=True)["config"].get("instance_group", []) for step in STEPS
        }
    return version, groups


def served_answers(grpc_url: str, photos: list[bytes], ensemble: str = ENSEMBLE) -> dict[str, list[CaptionResult]]:
    """The photos through the ensemble in one request (the steps batch them), then each in a request alone."""
    with Food11Client(grpc_url, model=ensemble, timeout_s=CLIENT_TIMEOUT_S) as client:
        return {
            "in one request": client.caption(photos),
            "each alone": [client.caption([photo])[0] for photo in photos],
        }


def hugging_face_reference(
    pipeline: InProcessPipeline, pixels, prompts: list[tuple[int, str]], timeout_s: float = REFERENCE_TIMEOUT_S
) -> dict:
    """benchmarks/hf_reference.py in a process of its own, on ``REFERENCE_PYTHON`` (or this interpreter):
    Hugging Face fp32 ``generate``'s caption of each (row of ``pixels``, prompt)."""
    folder = SCRATCH / "reference"
    folder.mkdir(parents=True, exist_ok=True)
    request, answer, npy = folder / "request.json", folder / "answer.json", folder / "pixels.npy"
    answer.unlink(missing_ok=True)
    np.save(npy, pixels)
    settings = pipeline.captioner_settings
    job: dict[str, object] = {"snapshot": str(pipeline.captioner_snapshot), "pixels": str(npy), "prompts": prompts}
    job |= {"max_new_tokens": settings.max_new_tokens, "repetition_penalty": settings.repetition_penalty}
    request.write_text(json.dumps(job))
    python = os.environ.get(REFERENCE_PYTHON) or sys.executable
    script = PROJECT_ROOT / "benchmarks" / "hf_reference.py"
    done = subprocess.run(
        [python, str(script), str(request), str(answer)], capture_output=True, text=True, timeout=timeout_s
    )
    if done.returncode != 0:
        raise RuntimeError(f"{python} {script.name} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return json.loads(answer.read_text())


def reference_keys(pipeline: InProcessPipeline, pixels: np.ndarray, asked: list[tuple[int, str]]) -> list[str]:
    """Each (photo, prompt)'s key among carried captions (benchmarks/lib/carried_reference.py)."""
    settings = pipeline.captioner_settings
    weights = carried_reference.weights_sha256(pipeline.captioner_snapshot)
    generation = (settings.max_new_tokens, settings.repetition_penalty)
    return [carried_reference.caption_key(weights, pixels[photo], prompt, *generation) for photo, prompt in asked]


def reference_captions(
    pipeline: InProcessPipeline, pixels: np.ndarray, asked: list[tuple[int, str]], carried: dict[str, str]
) -> tuple[dict[tuple[int, str], str], dict]:
    """Hugging Face fp32's caption of each (photo, prompt): the carried one where its key is there, the others
    computed here (hf_reference.py); and where they came from."""
    keys = reference_keys(pipeline, pixels, asked)
    captions = {pair: carried[key] for pair, key in zip(asked, keys) if key in carried}
    missing = [pair for pair in asked if pair not in captions]
    where: dict = {"carried": len(captions), "computed_here": len(missing)}
    if missing:
        reference = hugging_face_reference(pipeline, pixels, missing)
        captions.update(zip(missing, reference["captions"]))
        where |= {"python": reference["python"], "versions": reference["versions"]}
    return captions, where


def write_reference(repository: Path, photos: list[bytes], path: Path) -> None:
    """Hugging Face fp32's caption of each photo with every prompt the BLS step can send (each label's, and none),
    here, to be carried to a GPU box (``--reference``)."""
    from pipeline_src.steps.classification import build_prompt
    from pipeline_src.steps.labels import FOOD11_CLASSES

    pipeline = InProcessPipeline(repository)
    _, pixels = pipeline.preprocess(photos)
    template = pipeline.labelling.prompt_template
    prompts = ["", *(build_prompt(template, label) for label in FOOD11_CLASSES)]
    asked = [(photo, prompt) for photo in range(len(photos)) for prompt in prompts]
    # every label's prompt for every photo (288 captions for 24): about 8 minutes on 2 cores, made once ahead
    reference = hugging_face_reference(pipeline, pixels, asked, timeout_s=WRITE_REFERENCE_TIMEOUT_S)
    made = {"commit": collect_provenance().commit, "python": reference["python"], **reference["versions"]}
    carried_reference.write(path, dict(zip(reference_keys(pipeline, pixels, asked), reference["captions"])), made)


def compare_with_hugging_face(
    repository: Path, photos: list[bytes], served: dict[str, list[CaptionResult]], carried: dict[str, str] | None = None
) -> tuple[dict, dict]:
    """Each served caption against Hugging Face fp32 generate on the CPU (carried, or in a process of its own), on the
    pixels the preprocess step's own code makes and the prompt the BLS step built from the served label; each served
    label against the classifier run here (ONNX Runtime on the CPU). Also where the reference came from."""
    pipeline = InProcessPipeline(repository)  # its preprocess, classifier and prompts; BLIP is never loaded here
    classifier_pixels, captioner_pixels = pipeline.preprocess(photos)  # the preprocess step's own code
    predictions, _ = pipeline.prompts(pipeline.classifier(classifier_pixels))
    template = pipeline.labelling.prompt_template
    prompts = {how: [reference_prompt(answer, template) for answer in answers] for how, answers in served.items()}
    # each (photo, prompt) asked once: both ways usually share prompts; None: no caption was served to compare
    asked = sorted({(photo, p) for rows in prompts.values() for photo, p in enumerate(rows) if p is not None})
    captions, where = reference_captions(pipeline, captioner_pixels, asked, carried or {})
    comparisons = {
        how: compare_captions(
            served[how],
            [captions.get((photo, prompt)) if prompt is not None else None for photo, prompt in enumerate(rows)],
            [prediction.label for prediction in predictions],
        )
        for how, rows in prompts.items()
    }
    return comparisons, where


def _answer(answer: CaptionResult) -> dict:
    """What the results keep of an answer: with which mode made its caption (CAPTION_MODE: exact, or fast with the
    steps its guard redid exactly), so the fast mode's fidelity is reported per photo."""
    kept = {key: getattr(answer, key) for key in ("label", "probability", "caption", "caption_status")}
    return {**kept, "caption_mode": answer.extra.get("CAPTION_MODE")}


def perf_sweep(run: Run, triton: TritonServer, repository: Path, input_files: dict[str, Path], args) -> None:
    """perf_analyzer on the ensemble at each level and on the classifier alone; each row saved as it comes."""
    plan = [(ensemble, level, max(args.window, 2 * level)) for ensemble in args.ensembles for level in args.concurrency]
    level = args.classifier_concurrency
    plan.append(("classifier", level, max(args.classifier_window, 2 * level)))
    rows = run.result.setdefault("perf_analyzer", [])
    for model, concurrency, window in plan:
        before = snapshot(triton)
        try:
            measurement, stability = perf_analyzer.measure_stably(
                model,
                triton.grpc_url,
                input_files[model],
                concurrency,
                SCRATCH / f"{model}_{concurrency}.csv",
                window,
                bls_composing=bls_callees(repository, model) if model in args.ensembles else (),
                timeout_s=args.perf_timeout_s,
            )
        except perf_analyzer.PerfAnalyzerFailed as exc:
            run.fail(f"perf_analyzer on {model} at concurrency {concurrency}", str(exc))
            rows.append({"model": model, "concurrency": concurrency, "error": str(exc).splitlines()[-1]})
            if isinstance(exc, perf_analyzer.PerfAnalyzerTimedOut):  # a level that hangs: the higher ones would too
                break
        else:
            rows.append({**measurement.__dict__, "stability_percentage": stability, **figures_since(triton, before)})
        print(json.dumps(rows[-1]), flush=True)
        run.save()


def benchmark_photos(run: Run, count: int) -> list[bytes]:
    """The benchmarks' photos; the repository's own three where scikit-image (the rest) does not import."""
    try:
        return varied_photos(count)
    except ImportError:
        run.fail("photos", traceback.format_exc() + "\nso the photos are the three of tests/photos alone")
        return [(TEST_PHOTOS / name).read_bytes() for name in FRUIT_PHOTOS][:count]


def serve_and_measure(run: Run, repository: Path, photos: list[bytes], args) -> None:
    input_files = write_input_data(repository, photos, SCRATCH / "perf_input")
    run.log_file.unlink(missing_ok=True)  # placement is read from this run's log alone
    triton = TritonServer(repository, SCRATCH / "triton", free_ports(), log_file=run.log_file, extra_args=SERVER_ARGS)
    triton.start(ready_timeout_s=args.ready_timeout_s)
    try:
        run.result["triton_version"], groups = server_facts(triton.grpc_url)
        run.result["placement"] = placement(run.log_file.read_text(errors="replace"), groups)
        run.result["gpu_steps"] = list(gpu_steps(repository))  # what the configs ask for, a step a user added too
        run.save()
        served: dict[str, list[CaptionResult]] = {}
        with run.stage("served captions"):
            for ensemble in args.ensembles:  # each way of sending, per ensemble (named but for the first)
                named = "" if ensemble == args.ensembles[0] else f"{ensemble}, "
                for how, answers in served_answers(triton.grpc_url, photos, ensemble).items():
                    served[f"{named}{how}"] = answers
            run.result["served"] = {how: [_answer(a) for a in answers] for how, answers in served.items()}
        if served:
            with run.stage("Hugging Face fp32 reference"):
                carried = carried_reference.load(args.reference)
                run.result["captions"], run.result["reference"] = compare_with_hugging_face(
                    repository, photos, served, carried
                )
        off_gpu = [step for step in run.result["gpu_steps"] if not run.result["placement"][step]["on_gpu"]]
        if off_gpu and not args.allow_cpu:
            run.fail("perf_analyzer", f"not run: {', '.join(off_gpu)} not on the GPU (the figures would be the CPU's)")
            return
        if args.mps and not mps_serves(run):
            run.fail("perf_analyzer", "not run: no process is an MPS client (the figures would not be MPS's)")
            return
        with run.stage("perf_analyzer"):
            perf_sweep(run, triton, repository, input_files, args)
    finally:
        triton.stop()


def mps_serves(run: Run) -> bool:
    """Whether Triton's GPU processes are MPS clients, read from the control daemon and recorded in the run."""
    try:
        servers = mps.state()
    except (mps.MpsUnavailable, subprocess.TimeoutExpired) as exc:
        run.fail("MPS", str(exc))
        return False
    run.result.setdefault("mps", {})["servers"] = servers
    run.save()
    return any(servers.values())


def stop_by(deadline_s: float | None) -> None:
    """SIGTERM, and SIGALRM at the deadline, raise OutOfTime in the main thread: the stages unwind, saving."""

    def out_of_time(signum, _frame) -> None:
        raise OutOfTime(f"{signal.Signals(signum).name}: the run stopped here")

    signal.signal(signal.SIGTERM, out_of_time)
    signal.signal(signal.SIGALRM, out_of_time)
    if deadline_s:
        signal.setitimer(signal.ITIMER_REAL, deadline_s)


def main(argv=None) -> None:
    args = parse_args(argv)
    repository = args.repository.resolve()
    SCRATCH.mkdir(parents=True, exist_ok=True)
    if args.write_reference:
        photos = varied_photos(args.photos)
        write_reference(repository, photos, args.write_reference)
        print(f"gpu_serve: {args.write_reference}: Hugging Face fp32's captions of {len(photos)} photos, every prompt")
        return
    has_gpu = require_gpu(args.allow_cpu)
    run = Run(args.name, collect_provenance(), SCRATCH / "tritonserver.log")
    run.result["repository"] = portable_path(repository)
    stop_by(args.deadline_s)
    try:
        with run.stage("environment"):
            run.result["environment"] = environment(has_gpu)
        if args.build:
            with run.stage("build"):  # make models' build, in a process of its own (its torch memory goes with it)
                script = PROJECT_ROOT / "scripts" / "build_models.py"
                subprocess.run([sys.executable, str(script), "--repository", str(repository)], check=True)
        with run.stage("server"):
            # exact or fast: which targets the run is held to
            run.result["mode"] = step_settings(repository, "captioner", CaptionerSettings).mode
            run.result["blip"] = blip_description(repository)
            photos = benchmark_photos(run, args.photos)
            run.result["photos"] = len(photos)
            with mps.mps_daemon() if args.mps else contextlib.nullcontext() as mps_folder:
                run.result["mps"] = {"requested": bool(args.mps)}
                try:
                    serve_and_measure(run, repository, photos, args)
                finally:
                    if mps_folder:
                        run.result["mps"]["control_log"] = mps.control_log(mps_folder)
    except OutOfTime as stopped:
        run.fail("the run", str(stopped))
        run.save()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    print((OUT / f"{args.name}.md").read_text())


if __name__ == "__main__":
    main()
