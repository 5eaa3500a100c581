"""Build every model file the repository needs: ``python scripts/build_models.py --help``."""

from __future__ import annotations

import argparse
import logging
import shutil
import time
from collections.abc import Sequence
from pathlib import Path

from pipeline_src import PROJECT_ROOT
from pipeline_src.provenance import staleness
from pipeline_src.provenance.manifest import MANIFEST_FILE, file_sha256, read_manifest, verify, write_manifest
from pipeline_src.provenance.model_source import SOURCE_RECORD, USER_KIND, ModelSource, source_path
from pipeline_src.provenance.origins import classifier_origin

log = logging.getLogger("build_models")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--repository",
        type=Path,
        default=PROJECT_ROOT / "model_repository",
        help="the model repository to fill (default: %(default)s)",
    )
    parser.add_argument(
        "--classifier-checkpoint",
        metavar="FILE",
        help="the course's MobileNetV2 Food-11 checkpoint (a state dict), or 'stand-in' for the offline ImageNet "
        "EfficientNet-Lite0 with a Food-11 head (docs/models.md). Unset: keep what is built (the offline default the "
        "first time); a checkpoint other than the one built rebuilds",
    )
    parser.add_argument(
        "--trust-pickled-checkpoint",
        action="store_true",
        help="accept a whole pickled model as checkpoint. Loading it RUNS CODE from the file: only for files you trust",
    )
    parser.add_argument(
        "--blip",
        metavar="HUB_ID_OR_DIR",
        help="a real BLIP captioning model: Hugging Face id (e.g. Salesforce/blip-image-captioning-base) or a local "
        "snapshot directory; or 'stand-in' for the random-weights stand-in. Unset: keep what is built (the stand-in "
        "the first time); a source other than the one built rebuilds",
    )
    parser.add_argument(
        "--blip-standin",
        choices=("base", "tiny"),
        default="base",
        help="the size of the random-weights stand-in (MEANINGLESS captions), when one is built; "
        "base has blip-image-captioning-base's architecture and cost (default: %(default)s)",
    )
    parser.add_argument(
        "--int8",
        action="store_true",
        help="also build the BLIP graphs' int8-weight twins and measure their fidelity against fp32 (several "
        "minutes more with the base stand-in), for cpu_precision int8 or auto; serving's default is fp32",
    )
    parser.add_argument(
        "--fast",
        action="store_true",
        help="also build the fp16 twins of the BLIP graphs for the captioner's mode fast, calibrate its guard and "
        "measure its fidelity against fp32 (serving's default is the exact mode)",
    )
    parser.add_argument(
        "--force", action="store_true", help="rebuild files that already exist, whatever they were built from"
    )
    return parser.parse_args(argv)


def build_classifier(args: argparse.Namespace, decision: staleness.Decision) -> None:
    from pipeline_src.model_build import classifier_export, manifests

    target = args.repository / "classifier" / "1" / "model.onnx"
    if not decision.build:
        manifests.write_classifier_manifest(target.parent, None, None)
        return
    asked = args.classifier_checkpoint  # None, or 'stand-in': the offline default
    checkpoint = Path(asked).expanduser() if asked and asked != staleness.STANDIN else None
    if checkpoint:
        log.info("classifier: exporting %s (course MobileNetV2)", checkpoint)
        model = classifier_export.load_checkpoint(checkpoint, args.trust_pickled_checkpoint)
    else:
        log.info("classifier: offline default, ImageNet EfficientNet-Lite0 with the ImageNet->Food-11 head")
        model = classifier_export.imagenet_lite0_food11()
    difference = classifier_export.export_onnx(model, target)
    manifest = manifests.write_classifier_manifest(target.parent, classifier_origin(checkpoint), difference)
    print(f"classifier: wrote {target} ({manifest.kind}); max abs difference ONNX Runtime vs PyTorch: {difference:.3g}")


def build_captioner(args: argparse.Namespace, decision: staleness.Decision) -> None:
    from pipeline_src.model_build import blip_graphs, manifests

    target = args.repository / "captioner" / "1" / "blip"
    real = bool(args.blip) and args.blip != staleness.STANDIN
    if decision.build:
        replace_snapshot(args.repository, target, args.blip if real else None, args.blip_standin)
    # The snapshot's ONNX graphs (int8, fp16 twins when asked), checked against Hugging Face fp32 (blip_graphs). A new
    # snapshot makes every graph of the old one stale; kept, the build only fills in missing graphs.
    paths = blip_graphs.GraphPaths.in_repository(args.repository)
    if paths.complete(args.int8, args.fast) and not decision.build:
        log.info("captioner: graphs in %s and %s exist (--force rebuilds them)", paths.vision.parent, paths.text_dir)
    else:
        started = time.monotonic()
        twins = " and ".join(name for name, wanted in (("int8", args.int8), ("fp16", args.fast)) if wanted)
        print(
            f"captioner: exporting the ONNX graphs{f' and their {twins} twins' if twins else ''} and checking them ..."
        )
        for line in blip_graphs.build(target, paths, args.int8, args.fast):
            print(f"captioner: {line} ({time.monotonic() - started:.0f} s)", flush=True)
    origin = manifests.blip_origin(target, args.blip if real and decision.build else None)
    for manifest in manifests.write_captioner_manifests(args.repository, target, origin):
        print(f"{manifest.model}: manifest {manifest.kind}, sha256 {manifest.sha256[:16]}")


def replace_snapshot(repository: Path, target: Path, blip: str | None, standin_size: str) -> None:
    """The BLIP snapshot from ``blip`` (a stand-in without) at ``target``, written beside the old one and swapped in
    whole: no file of the old one stays behind, and a download that fails leaves the old one in place."""
    from pipeline_src.model_build import blip_snapshot

    staging = target.with_name("blip.partial")
    shutil.rmtree(staging, ignore_errors=True)
    if blip:
        blip_snapshot.save_real(blip, staging)
    else:
        blip_snapshot.save_standin(staging, standin_size)
    # The old manifests describe the old snapshot: gone with it, so that nothing claims its origin if the graphs fail.
    for version_dir in (repository / "captioner" / "1", repository / "vision_encoder" / "1"):
        (version_dir / MANIFEST_FILE).unlink(missing_ok=True)
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    if blip:
        print(f"captioner: wrote {target} from {blip}")
    else:
        print(
            f"captioner: wrote a {standin_size} BLIP STAND-IN with RANDOM WEIGHTS to {target}: "
            "its captions are MEANINGLESS (use --blip for a real model)"
        )


def build(args: argparse.Namespace) -> None:
    # Both decided first, from the manifests alone: what is kept or built, or a wrong checkpoint, said at once.
    classifier = staleness.classifier_decision(args.repository, args.classifier_checkpoint, args.force)
    captioner = staleness.captioner_decision(args.repository, args.blip, args.blip_standin, args.force)
    for decision in (classifier, captioner):
        print(decision.describe(), flush=True)
    build_classifier(args, classifier)
    build_captioner(args, captioner)
    # Model files of yours (food11-new-step --onnx): git-ignored, so copied again from their recorded source.
    for line in copy_user_models(args.repository, args.force):
        print(line)


def copy_user_models(repository: Path, force: bool = False) -> list[str]:
    """Model files of yours (``food11-new-step NAME --onnx FILE``): each model folder with a ``model_source.json``
    names the file its version folder serves and where it came from. The file is git-ignored, so it is copied from
    there again where it is missing, differs or ``force``, and its manifest (kind ``user``) written, through which
    every answer's ``MODELS`` names it; a missing source keeps a copy its manifest still describes. One line each,
    to print."""
    lines = []
    for record in sorted(Path(repository).glob(f"*/{SOURCE_RECORD}")):
        model, recorded = record.parent.name, ModelSource.read(record)
        version_dir = record.parent / recorded.version
        target, source = version_dir / recorded.file, source_path(recorded.source, Path(repository))
        if not source.is_file():
            kept = target.is_file() and read_manifest(version_dir) is not None and not verify(version_dir)
            lines.append(
                f"{model}: kept {target}, its source {source} is missing"
                if kept
                else f"{model}: MISSING {target}: its source {source} is missing (put the file there, or record "
                f"another in {record})"
            )
            continue
        if force or not target.is_file() or file_sha256(target) != file_sha256(source):
            version_dir.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
        manifest = write_manifest(version_dir, model, USER_KIND, recorded.source, [target])
        lines.append(f"{model}: {target} from {recorded.source}, manifest {manifest.kind} {manifest.sha256[:16]}")
    return lines


def main(argv=None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    try:
        build(parse_args(argv))
    except staleness.CheckpointNotFound as missing:  # a checkpoint named wrongly: the reason, not a traceback
        raise SystemExit(f"build_models: error: {missing}") from None


def build_repository_copy(destination: Path, blip_standin: str = "tiny", models: Sequence[str] = ()) -> Path:
    """A copy of this project's model_repository/ (configs, model.py files) at ``destination`` with its
    model files built: the offline-default classifier and a BLIP stand-in, or what ``models`` (build
    options such as ``--blip DIR``, ``--classifier-checkpoint FILE``) names. For tests and benchmarks."""
    shutil.copytree(
        PROJECT_ROOT / "model_repository",
        destination,
        ignore=shutil.ignore_patterns("*.onnx", "blip", "text_decoder", "fidelity.json", MANIFEST_FILE, "__pycache__"),
    )
    build(parse_args(["--repository", str(destination), *(models or ["--blip-standin", blip_standin])]))
    return destination


def tiny_repository(destination: Path) -> Path:
    """A copy with the tiny BLIP stand-in at ``destination``, built the first time only (about a minute):
    the benchmarks' fast pipeline."""
    if not (destination / "captioner" / "1" / "blip" / "config.json").exists():
        build_repository_copy(destination, blip_standin="tiny")
    return destination


if __name__ == "__main__":
    main()
