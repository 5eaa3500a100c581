"""Whether a built model is what the user now asks for, or must be built again (docs/models.md, "What a later run
does", has the table): the source asked against the manifest's kind and source (origins.py spells both the same
way). Decided from those alone, with no model loaded and no torch, so that `make serve` with nothing changed stays a
few seconds and the Triton image can decide without the build's packages. Nothing asked keeps whatever is built:
the offline default must not replace real weights a user paid minutes and a download for.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pipeline_src.provenance.manifest import Manifest, read_manifest
from pipeline_src.provenance.origins import Origin, blip_standin_origin, classifier_origin, real_blip_origin

STANDIN = "stand-in"  # asks for the offline default explicitly: BLIP=stand-in goes back from real weights

# How a user switches, for the line that says what is kept (make, the CLI and the Triton image take the same values).
SWITCH_HINT = {
    "classifier": "CLASSIFIER=<checkpoint> (--classifier-checkpoint, FOOD11_CLASSIFIER) builds the course's "
    f"Food-11 model, CLASSIFIER={STANDIN} the offline default",
    "captioner": "BLIP=<Hugging Face id or snapshot directory> (--blip, FOOD11_BLIP) builds a real BLIP, "
    f"BLIP={STANDIN} the random-weights stand-in",
}


class CheckpointNotFound(FileNotFoundError):
    pass


@dataclass(frozen=True)
class Decision:
    model: str
    build: bool
    reason: str  # one line for the build's output: why it builds, or what it keeps

    def describe(self) -> str:
        return f"{self.model}: {'building: ' if self.build else ''}{self.reason}"


def wanted_classifier(checkpoint: str | Path | None) -> Origin | None:
    """The origin a build from ``checkpoint`` records; None when nothing is asked."""
    if checkpoint is None or str(checkpoint) == "":
        return None
    if str(checkpoint) == STANDIN:
        return classifier_origin(None)
    path = Path(checkpoint).expanduser()
    if not path.is_file():
        raise CheckpointNotFound(f"classifier checkpoint {checkpoint}: no such file")
    return classifier_origin(path)


def wanted_blip(blip: str | None, standin_size: str) -> Origin | None:
    if not blip:
        return None
    return blip_standin_origin(standin_size) if blip == STANDIN else real_blip_origin(blip)


def decide(model: str, built: Manifest | None, present: bool, wanted: Origin | None, force: bool = False) -> Decision:
    """``built``: the manifest beside the model's files; ``present``: whether its files are there at all."""
    if not present:
        return Decision(model, True, "not built yet")
    if force:
        return Decision(model, True, "--force")
    if wanted is None:
        served = f"{built.kind}: {built.source}" if built else "files without a manifest (origin unknown)"
        return Decision(model, False, f"keeping what is built ({served}); {SWITCH_HINT[model]}")
    if built is None:
        return Decision(
            model, True, f"no manifest says what the files on disk were built from; asked for {wanted.source}"
        )
    if (built.kind, built.source) != (wanted.kind, wanted.source):
        return Decision(model, True, f"built from {built.source}, asked for {wanted.source}")
    return Decision(model, False, f"already built from {wanted.source}")


def classifier_decision(repository: Path, checkpoint: str | Path | None, force: bool = False) -> Decision:
    version_dir = repository / "classifier" / "1"
    present = (version_dir / "model.onnx").is_file()
    return decide("classifier", read_manifest(version_dir), present, wanted_classifier(checkpoint), force)


def captioner_decision(repository: Path, blip: str | None, standin_size: str, force: bool = False) -> Decision:
    """The captioner's manifest stands for the vision encoder's too: one build writes both from one snapshot."""
    version_dir = repository / "captioner" / "1"
    present = (version_dir / "blip" / "config.json").is_file()
    return decide("captioner", read_manifest(version_dir), present, wanted_blip(blip, standin_size), force)
