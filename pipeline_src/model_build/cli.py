"""Build every model file the repository needs: ``python scripts/build_models.py --help``."""

from __future__ import annotations

import argparse
import logging
import shutil
import time
from collections.abc import Sequence
from pathlib import Path

from pipeline_src import PROJECT_ROOT
from pipeline_src.provenance.manifest import MANIFEST_FILE

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
        type=Path,
        help="the course's MobileNetV2 Food-11 checkpoint (a state dict). Default: the offline "
        "ImageNet EfficientNet-Lite0 with a Food-11 head (docs/models.md)",
    )
    parser.add_argument(
        "--trust-pickled-checkpoint",
        action="store_true",
        help="accept a whole pickled model as checkpoint. Loading it RUNS CODE from the file: only for files you trust",
    )
    blip = parser.add_mutually_exclusive_group()
    blip.add_argument(
        "--blip",
        metavar="HUB_ID_OR_DIR",
        help="a real BLIP captioning model: Hugging Face id (e.g. "
        "Salesforce/blip-image-captioning-base) or a local snapshot directory",
    )
    blip.add_argument(
        "--blip-standin",
        choices=("base", "tiny"),
        default="base",
        help="without --blip: a random-weights stand-in (MEANINGLESS captions) of this size; "
        "base has blip-image-captioning-base's architecture and cost (default: %(default)s)",
    )
    parser.add_argument(
        "--int8",
        action="store_true",
        help="also build the BLIP graphs' int8-weight twins and measure their fidelity against fp32 (several "
        "minutes more with the base stand-in), for cpu_precision int8 or auto; serving's default is fp32",
    )
    parser.add_argument("--force", action="store_true", help="rebuild files that already exist")
    return parser.parse_args(argv)


def build_classifier(args: argparse.Namespace) -> None:
    from pipeline_src.model_build import classifier_export, manifests

    target = args.repository / "classifier" / "1" / "model.onnx"
    if target.exists() and not args.force:
        log.info("classifier: %s exists (--force rebuilds it)", target)
        manifests.write_classifier_manifest(target.parent, None, None)
        return
    if args.classifier_checkpoint:
        log.info("classifier: exporting %s (course MobileNetV2)", args.classifier_checkpoint)
        model = classifier_export.load_checkpoint(args.classifier_checkpoint, args.trust_pickled_checkpoint)
    else:
        log.info("classifier: offline default, ImageNet EfficientNet-Lite0 with the ImageNet->Food-11 head")
        model = classifier_export.imagenet_lite0_food11()
    difference = classifier_export.export_onnx(model, target)
    manifest = manifests.write_classifier_manifest(
        target.parent, manifests.classifier_origin(args.classifier_checkpoint), difference
    )
    print(f"classifier: wrote {target} ({manifest.kind}); max abs difference ONNX Runtime vs PyTorch: {difference:.3g}")


def build_captioner(args: argparse.Namespace) -> None:
    from pipeline_src.model_build import blip_snapshot, manifests
    from pipeline_src.steps.captioning import standin_info

    target = args.repository / "captioner" / "1" / "blip"
    copied_from = None  # what --blip named, when this run copied the snapshot from it
    if (target / "config.json").exists() and not args.force:
        kind = standin_info(target)
        log.info(
            "captioner: %s exists (%s; --force rebuilds it)",
            target,
            f"stand-in {kind['size']}" if kind else "real weights",
        )
    elif args.blip:
        copied_from = args.blip
        blip_snapshot.save_real(args.blip, target)
        print(f"captioner: wrote {target} from {args.blip}")
    else:
        blip_snapshot.save_standin(target, args.blip_standin)
        print(
            f"captioner: wrote a {args.blip_standin} BLIP STAND-IN with RANDOM WEIGHTS to {target}: "
            "its captions are MEANINGLESS (use --blip for a real model)"
        )
    build_captioner_graphs(args.repository, target, force=args.force, int8=args.int8)
    for manifest in manifests.write_captioner_manifests(
        args.repository, target, manifests.blip_origin(target, copied_from)
    ):
        print(f"{manifest.model}: manifest {manifest.kind}, sha256 {manifest.sha256[:16]}")


def build_captioner_graphs(repository: Path, snapshot: Path, force: bool = False, int8: bool = False) -> None:
    """The ONNX graphs of the snapshot (with their int8 twins when ``int8``) and the fidelity of each, checked
    against Hugging Face fp32 (pipeline_src.model_build.blip_graphs)."""
    from pipeline_src.model_build import blip_graphs

    paths = blip_graphs.GraphPaths.in_repository(repository)
    if paths.complete(int8) and not force:
        log.info("captioner: graphs in %s and %s exist (--force rebuilds them)", paths.vision.parent, paths.text_dir)
        return
    started = time.monotonic()
    print(f"captioner: exporting the ONNX graphs{' and their int8 twins' if int8 else ''} and checking them ...")
    for line in blip_graphs.build(snapshot, paths, int8):
        print(f"captioner: {line} ({time.monotonic() - started:.0f} s)", flush=True)


def build(args: argparse.Namespace) -> None:
    build_classifier(args)
    build_captioner(args)


def main(argv=None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    build(parse_args(argv))


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
