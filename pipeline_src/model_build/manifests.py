"""The manifest the build writes beside each model it builds (pipeline_src.provenance.manifest): what the
model is, where its weights came from, the hash of each file its step loads, what the build measured."""

from __future__ import annotations

import logging
from dataclasses import asdict
from pathlib import Path

from pipeline_src.model_build.blip_graphs import GraphPaths
from pipeline_src.provenance.manifest import Manifest, read_manifest, verify, write_manifest
from pipeline_src.provenance.origins import Origin, blip_standin_origin, real_blip_origin
from pipeline_src.steps.captioning import standin_info
from pipeline_src.steps.precision import FIDELITY_FILE, precision_file, read_fidelity

log = logging.getLogger(__name__)

# A BLIP snapshot's weights are exported into the ONNX graphs the steps load; the snapshot's own weight
# files (hundreds of MB) are not read when serving, so the manifest hashes the graphs and leaves them out.
SNAPSHOT_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt")
BLIP_PRECISIONS = ("fp32", "int8")  # fp32 always, int8 twins on request (--int8); cpu_precision chooses


def blip_origin(snapshot: Path, blip: str | None) -> Origin | None:
    """``blip``: what --blip named, when this run copied the snapshot from it. None: nothing is known."""
    standin = standin_info(snapshot)
    if standin:
        return blip_standin_origin(standin["size"], standin["seed"])
    return real_blip_origin(blip) if blip else None


def write_classifier_manifest(version_dir: Path, origin: Origin | None, onnx_difference: float | None) -> Manifest:
    fidelity = {} if onnx_difference is None else {"onnx_runtime_vs_pytorch_max_abs_difference": onnx_difference}
    return _write_or_keep(version_dir, "classifier", [version_dir / "model.onnx"], origin, ("fp32",), fidelity)


def write_captioner_manifests(repository: Path, snapshot: Path, origin: Origin | None) -> list[Manifest]:
    """The vision encoder's and the captioner's, both made of ``snapshot``'s weights."""
    paths = GraphPaths.in_repository(repository)
    vision_dir, captioner_dir = paths.vision.parent, paths.text_dir.parent
    # The built files only: model.py beside them is code, which a pull may change without a rebuild.
    precisions = tuple(precision for precision in BLIP_PRECISIONS if precision_file(paths.vision, precision).is_file())
    vision_files = [*(precision_file(paths.vision, precision) for precision in precisions), vision_dir / FIDELITY_FILE]
    text_files = [path for path in paths.text_dir.iterdir() if path.is_file()]
    text_files += [
        path for path in snapshot.rglob("*") if path.is_file() and path.suffix not in SNAPSHOT_WEIGHT_SUFFIXES
    ]
    return [
        _write_or_keep(vision_dir, "vision_encoder", vision_files, origin, precisions, _int8_fidelity(vision_dir)),
        _write_or_keep(captioner_dir, "captioner", text_files, origin, precisions, _int8_fidelity(paths.text_dir)),
    ]


def _int8_fidelity(directory: Path) -> dict:
    """The build's int8 figures (fidelity.json, which the manifest also hashes), for /models to show."""
    measured = (read_fidelity(directory) or {}).get("options", {}).get("int8")
    return {"int8_vs_fp32": measured} if measured else {}


def _write_or_keep(
    version_dir: Path, model: str, files: list[Path], origin: Origin | None, precisions: tuple[str, ...], fidelity: dict
) -> Manifest:
    """With an origin, this build made the files: write their manifest. Without, they were found in place:
    keep a manifest that still matches them, or write one of kind ``unknown``."""
    if origin is None:
        existing = read_manifest(version_dir)
        if existing is not None and not verify(version_dir):
            return existing
        log.warning(
            "%s: files in %s were not built by this run and no manifest matches them: recorded as "
            "kind 'unknown' (build with --force to record their origin)",
            model,
            version_dir,
        )
        origin = Origin(
            "unknown",
            "files found in place; not built by scripts/build_models.py, or built before manifests existed",
            f"{model}: where its weights came from is not recorded (rebuild it with "
            "`make models BUILD_ARGS=--force`, or scripts/build_models.py --force and your weights)",
        )
    return write_manifest(version_dir, model, files=files, precisions=precisions, fidelity=fidelity, **asdict(origin))
