"""What benchmarks/gpu_serve.py reports, as plain functions of what it gathered: the GPU as nvidia-smi names
it, where each step's instances run (Triton's config and log, the steps' own ONNX Runtime providers), the
served captions against Hugging Face fp32 ``generate``, the issue's targets met or missed, and the markdown.
No server, no GPU: tests/benchmarks/test_gpu_serve.py runs them."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from benchmarks.lib.triton_stats import STEPS
from food11_client import CaptionResult
from pipeline_src import PROJECT_ROOT
from pipeline_src.contract import ENSEMBLE, CaptionStatus
from pipeline_src.profiling import perf_analyzer
from pipeline_src.profiling.report import markdown_table
from pipeline_src.repository.loading import parse_config
from pipeline_src.steps.captioning import CAPTIONER_PHASES
from pipeline_src.steps.classification import build_prompt

CUDA = "CUDAExecutionProvider"

# The targets (issue 24).
P50_AT_1_MS = 40.0
IMG_PER_S_AT = {8: 150.0, 32: 250.0}
CLASSIFIER_CONCURRENCY, CLASSIFIER_INFER_PER_S = 16, 2500.0
# The fast mode's (captioner mode fast): its throughput, and how many captions it may change against the exact path's
FAST_IMG_PER_S_AT = {64: 800.0}
FAST_MIN_IDENTICAL = 0.99

# Triton's python backend, per instance: "TRITONBACKEND_ModelInstanceInitialize: captioner_0_0 (GPU device 0)".
_INSTANCE = re.compile(
    r"ModelInstanceInitialize: (?P<instance>[\w.-]+?)_\d+_\d+ \((?P<kind>[A-Z]+) device (?P<id>\d+)\)"
)
# What the steps log at load: OnnxStep "classifier: ONNX Runtime providers [...]", the captioner
# "captioner: text decoder in fp32 (reason), providers [...]".
_PROVIDERS = re.compile(
    r"\b(?P<model>[\w.-]+): (?:ONNX Runtime providers|text decoder in \w+ \([^)]*\), providers) \[(?P<list>[^\]]*)\]"
)


def listed_gpus(listing: str) -> list[str]:
    """The GPUs ``nvidia-smi -L`` lists ("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-...)"), by name."""
    return re.findall(r"^GPU \d+: (.+?)(?: \(UUID: [^)]*\))?\s*$", listing, flags=re.MULTILINE)


def cuda_version(summary: str) -> str | None:
    """The CUDA version the driver supports, from plain ``nvidia-smi``'s header."""
    found = re.search(r"CUDA Version:\s*([\d.]+)", summary)
    return found[1] if found else None


def gpu_rows(query_csv: str, fields: Sequence[str]) -> list[dict[str, str]]:
    """``nvidia-smi --query-gpu=<fields> --format=csv,noheader``, one dict per GPU."""
    return [dict(zip(fields, (cell.strip() for cell in line.split(",")))) for line in query_csv.splitlines() if line]


def gpu_steps(repository: Path) -> tuple[str, ...]:
    """The steps whose config asks for the GPU: every instance group without a kind (Triton's default: the GPU
    when it sees one) or KIND_GPU. The project's are classifier, vision_encoder and captioner; a step a user adds
    is checked alike."""
    steps = []
    for path in sorted(repository.glob("*/config.pbtxt")):
        config = parse_config(path)
        kinds = [group.Kind.Name(group.kind) for group in config.instance_group]
        if config.platform != "ensemble" and kinds and all(kind in ("KIND_AUTO", "KIND_GPU") for kind in kinds):
            steps.append(config.name or path.parent.name)
    return tuple(steps)


def placement(log: str, instance_groups: Mapping[str, Sequence[Mapping]]) -> dict[str, dict]:
    """Per step: the kinds Triton gave its instance groups (``/v2/models/<m>/config``), the device each
    instance started on (its log), the providers each instance's ONNX Runtime sessions run on (the step's own
    log line), and whether all of that says GPU. A step that runs no ONNX model reports no providers."""
    devices: dict[str, list[str]] = {}  # model -> one "GPU 0" or "CPU 0" per instance
    for found in _INSTANCE.finditer(log):
        devices.setdefault(found["instance"], []).append(f"{found['kind']} {found['id']}")
    providers: dict[str, list[list[str]]] = {}  # model -> each instance's providers, first choice first
    for found in _PROVIDERS.finditer(log):
        providers.setdefault(found["model"], []).append(re.findall(r"'([^']+)'", found["list"]))
    steps = {}
    for model, groups in instance_groups.items():
        kinds = [str(group.get("kind", "")) for group in groups]
        started = devices.get(model, [])
        sessions = providers.get(model, [])
        on_gpu = (
            bool(kinds and started)
            and all(kind == "KIND_GPU" for kind in kinds)
            and all(device.startswith("GPU") for device in started)
            and all(names[:1] == [CUDA] for names in sessions)
        )
        first_choices = sorted({name for names in sessions for name in names[:1]})
        steps[model] = dict(config_kinds=kinds, instances=started, providers=first_choices, on_gpu=on_gpu)
    return steps


def reference_prompt(answer: CaptionResult, template: str) -> str | None:
    """The prompt the BLS step captioned ``answer`` with: its served label's above the confidence threshold,
    none below; None where no caption was made (the captioner failed or timed out)."""
    if answer.caption_status == CaptionStatus.OK.value:
        return build_prompt(template, answer.label)
    if answer.caption_status == CaptionStatus.LOW_CONFIDENCE.value:
        return ""
    return None


def compare_captions(
    served: Sequence[CaptionResult], reference: Sequence[str | None], in_process_labels: Sequence[str]
) -> dict:
    """Served captions against the reference (None: none could be made), photo by photo; and any photo whose
    served label is not the one the classifier gives in this process."""
    if not len(served) == len(reference) == len(in_process_labels):
        raise ValueError(f"{len(served)} answers, {len(reference)} references, {len(in_process_labels)} labels")
    differing = [
        {"photo": photo, "label": answer.label, "served": answer.caption, "hf_fp32": expected}
        for photo, (answer, expected) in enumerate(zip(served, reference))
        if answer.caption != expected
    ]
    labels = [
        {"photo": photo, "served": answer.label, "in_process": label}
        for photo, (answer, label) in enumerate(zip(served, in_process_labels))
        if answer.label != label
    ]
    return {
        "identical": len(served) - len(differing),
        "total": len(served),
        "differing": differing,
        "label_differs": labels,
    }


def _figure(rows: Sequence[Mapping], model: str, concurrency: int, figure: str) -> float | None:
    """A figure of the model's measurement at that concurrency; None where it was not measured (or failed)."""
    measured = (r for r in rows if r["model"] == model and r["concurrency"] == concurrency and "throughput" in r)
    return next(measured, {}).get(figure)


def _throughput(rows: Sequence[Mapping], model: str, concurrency: int, goal: float, target: str, unit: str) -> dict:
    value = _figure(rows, model, concurrency, "throughput")
    return _check(target, f">= {goal:g} {unit}", value, None if value is None else value >= goal)


def _identical(captions: Mapping[str, Mapping], target: str, goal: str, share: float) -> dict:
    """How many served captions equal the reference's, against ``share`` of them (1.0: all)."""
    identical = sum(check["identical"] for check in captions.values())
    total = sum(check["total"] for check in captions.values())
    met = (identical >= share * total) if total else None
    return _check(target, goal, f"{identical} of {total}" if total else None, met)


def _check(target: str, goal: str, value, met: bool | None) -> dict:
    verdict = "not measured" if met is None else ("met" if met else "MISSED")
    return {"target": target, "goal": goal, "value": "" if value is None else value, "met": verdict}


def targets(rows: Sequence[Mapping], captions: Mapping[str, Mapping], fast: bool = False) -> list[dict]:
    """Each target met, missed, or not measured (its concurrency not run, or its run failed). ``captions``:
    a ``compare_captions`` result per way the photos were sent. ``fast``: the captioner's fast mode, held to its
    own targets (throughput at 64, and captions identical to the exact path's, which are Hugging Face fp32's)."""
    prefix, levels = ("fast mode: ", FAST_IMG_PER_S_AT) if fast else ("", IMG_PER_S_AT)
    throughput = [
        _throughput(rows, ENSEMBLE, level, goal, f"{prefix}ensemble throughput at concurrency {level}", "img/s")
        for level, goal in levels.items()
    ]
    if fast:
        identical = "fast mode: captions identical to the exact path's (Hugging Face fp32 generate)"
        return [*throughput, _identical(captions, identical, f">= {FAST_MIN_IDENTICAL:.0%}", FAST_MIN_IDENTICAL)]
    p50 = _figure(rows, ENSEMBLE, 1, "p50_ms")
    classifier = f"classifier throughput at concurrency {CLASSIFIER_CONCURRENCY}"
    return [
        _check(
            "ensemble p50 at concurrency 1", f"<= {P50_AT_1_MS:g} ms", p50, None if p50 is None else p50 <= P50_AT_1_MS
        ),
        *throughput,
        _throughput(rows, "classifier", CLASSIFIER_CONCURRENCY, CLASSIFIER_INFER_PER_S, classifier, "infer/s"),
        _identical(captions, "served captions identical to Hugging Face fp32 generate", "all", 1.0),
    ]


PERF_COLUMNS = (
    *perf_analyzer.COLUMNS,
    *(f"{step}_{figure}" for step in STEPS for figure in ("mean_batch", "queue_ms", "compute_ms")),
    "error",
)
# The captioner's own clock (food11_step_phase_* on Triton's /metrics): ms per run of each phase.
CAPTIONER_PHASE_COLUMNS = (
    "model",
    "concurrency",
    "captioner_rows_per_step",
    *(f"captioner_{phase}_ms" for phase in (*CAPTIONER_PHASES, "host") if phase != "row_step"),
)


def _environment_paragraphs(result: Mapping) -> list[str]:
    environment = result.get("environment", {})
    gpus = environment.get("gpus") or []
    if gpus:
        gpu = "GPU: " + "; ".join(
            f"{g.get('name')} (driver {g.get('driver_version')}, {g.get('memory.total')})" for g in gpus
        )
        gpu += f", CUDA {environment.get('cuda_version')} (the driver's)."
    else:
        gpu = "**No GPU**: run with --allow-cpu, so these are the CPU's figures, not a GPU's."
    versions = ", ".join(f"{name} {version}" for name, version in environment.get("versions", {}).items())
    return [
        f"{gpu} {_mps_sentence(result.get('mps', {}))} ONNX Runtime {environment.get('onnxruntime', '?')}, providers "
        f"{environment.get('onnxruntime_providers', [])}; Triton {result.get('triton_version', '?')}; "
        f"{result.get('blip', 'the repository not read')}.",
        f"Python {environment.get('python', '?')}; {versions}.",
    ]


def _mps_sentence(mps: Mapping) -> str:
    """Whether the GPU processes shared one context through NVIDIA MPS, as the control daemon said."""
    if not mps.get("requested"):
        return "NVIDIA MPS off (each GPU step's process its own CUDA context)."
    clients = sum(len(pids) for pids in mps.get("servers", {}).values())
    if clients:
        return f"**NVIDIA MPS on**: one MPS server, {clients} client processes (Triton and its GPU steps)."
    return "**NVIDIA MPS asked for, but no process was its client**: these are not MPS's figures."


def _placement_section(steps: Mapping[str, Mapping], for_gpu: Sequence[str]) -> str:
    rows = [
        {
            "step": model,
            "config kinds": " ".join(figures["config_kinds"]),
            "instances started on": " ".join(figures["instances"]),
            "ONNX Runtime provider": " ".join(figures["providers"]),
            "on the GPU": figures["on_gpu"],
        }
        for model, figures in steps.items()
    ]
    off = [step for step in for_gpu if step in steps and not steps[step]["on_gpu"]]
    summary = (
        f"NOT on the GPU: {', '.join(off)}."
        if off
        else f"{', '.join(for_gpu)}: on the GPU, with {CUDA} first (config, Triton's log and the steps' own log)."
    )
    return markdown_table("Where each step runs", [summary], list(rows[0]), rows, level=2)


def _captions_section(captions: Mapping[str, Mapping], photos: int, reference: Mapping = {}) -> str:
    carried = (
        f" ({reference['carried']} carried, made ahead on another machine; {reference['computed_here']} computed here)"
        if reference.get("carried")
        else ""
    )
    paragraphs = [
        f"{photos} photos sent through the ensemble; the reference: Hugging Face `BlipForConditionalGeneration` "
        f"fp32 `generate` on the CPU{carried}, on the pixels the preprocess step makes and the prompt the BLS step "
        "builds from each served label, with the captioner's max_new_tokens and repetition penalty. Identical to it: "
        + "; ".join(f"{check['identical']} of {check['total']} {how}" for how, check in captions.items())
        + "."
    ]
    for how, check in captions.items():
        paragraphs += [
            f"{how}: photo {row['photo']} served label {row['served']!r}, in-process classifier {row['in_process']!r}"
            for row in check["label_differs"]
        ]
    rows = [{"sent": how, **row} for how, check in captions.items() for row in check["differing"]]
    title = "Served captions vs Hugging Face fp32"
    if not rows:
        return f"## {title}\n\n" + "\n\n".join(paragraphs) + "\n\nEvery served caption is Hugging Face's.\n"
    return markdown_table(title, paragraphs, ["sent", "photo", "label", "served", "hf_fp32"], rows, level=2)


def markdown(result: Mapping) -> str:
    """The report of whatever stages ran (a later stage may have failed: its error is shown instead)."""
    on = "a GPU" if result.get("environment", {}).get("gpus") else "the CPU (--allow-cpu)"
    parts = [
        markdown_table(
            f"Served pipeline on {on}: Triton ensemble, perf_analyzer, captions",
            _environment_paragraphs(result),
            ["target", "goal", "value", "met"],
            result.get("targets", []),
        )
    ]
    if result.get("placement"):
        # the run's repository's GPU steps; a results file from before they were recorded: the project's
        for_gpu = result.get("gpu_steps") or gpu_steps(PROJECT_ROOT / "model_repository")
        parts.append(_placement_section(result["placement"], for_gpu))
    if result.get("perf_analyzer"):
        rows = result["perf_analyzer"]
        columns = [c for c in PERF_COLUMNS if any(c in row for row in rows)]
        title = "perf_analyzer (latency in ms; per step: Triton's mean batch, queue and compute ms per request)"
        parts.append(markdown_table(title, [], columns, rows, level=2))
        timed = [row for row in rows if "captioner_iteration_ms" in row]
        if timed:
            title = (
                "Inside the captioner (its own clock: the captions in progress per decoder step; ms per run: an "
                "iteration of its loop, a joining request's prefill, one decoder step for every row, and what an "
                "iteration spent outside both)"
            )
            parts.append(markdown_table(title, [], CAPTIONER_PHASE_COLUMNS, timed, level=2))
    if result.get("captions"):
        parts.append(_captions_section(result["captions"], result.get("photos", 0), result.get("reference", {})))
    for stage, error in result.get("errors", {}).items():
        parts.append(f"## Stage '{stage}' failed\n\n```\n{error.strip()}\n```\n")
    return "\n".join(parts)
