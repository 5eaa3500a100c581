"""The Triton image's model settings: ``FOOD11_BLIP`` and ``FOOD11_CLASSIFIER`` (``settings.ContainerSettings``), the
values `make serve` takes as BLIP and CLASSIFIER (a Hugging Face id or snapshot directory; a checkpoint file in the
container; ``stand-in``).

Unset (the default), the container serves /models as it is and builds nothing. Set, it compares them with the
manifests in /models before tritonserver starts (pipeline_src.provenance.staleness, no torch): what matches is
served at once; what does not is built there by scripts/build_models.py, when the image carries the build's
packages (built with ``MODEL_BUILD=yes``) and the repository is writable; otherwise the container exits with
the reason rather than serve weights other than those asked for. Hugging Face downloads go to ``HF_HOME``
(``/cache/huggingface`` in a ``MODEL_BUILD=yes`` image: a volume there keeps them across restarts).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

BLIP_ENV = "FOOD11_BLIP"
CLASSIFIER_ENV = "FOOD11_CLASSIFIER"
BUILD_PACKAGES = ("torch", "transformers")  # what building needs and the serving image leaves out


class ModelsNotServable(Exception):
    """/models does not hold what the settings ask for, and this container cannot build it."""


@dataclass(frozen=True)
class RequestedModels:
    blip: str = ""
    classifier: str = ""

    def build_args(self) -> list[str]:
        return [
            *(["--blip", self.blip] if self.blip else []),
            *(["--classifier-checkpoint", self.classifier] if self.classifier else []),
        ]


def ensure_models(repository: Path, requested: RequestedModels, report: Callable[[str], None]) -> None:
    """Return once ``repository`` holds what ``requested`` names; ModelsNotServable when it cannot."""
    if not requested.build_args():
        return  # nothing asked: serve what is there (the offline default, or what the image was built with)
    from pipeline_src.provenance import staleness

    try:
        decisions = [
            staleness.classifier_decision(repository, requested.classifier or None),
            staleness.captioner_decision(repository, requested.blip or None, standin_size="base"),
        ]
    except staleness.CheckpointNotFound as missing:
        raise ModelsNotServable(f"{CLASSIFIER_ENV}: {missing} in the container (mount it)") from None
    for decision in decisions:
        report(f"models: {decision.describe()}")
    stale = [decision.model for decision in decisions if decision.build]
    if not stale:
        return
    obstacle = build_obstacle(repository)
    if obstacle:
        raise ModelsNotServable(
            f"{repository} does not hold the {' and '.join(stale)} that {BLIP_ENV}/{CLASSIFIER_ENV} ask for, and "
            f"this container cannot build {'them' if len(stale) > 1 else 'it'}: {obstacle}"
        )
    report(f"models: building the {' and '.join(stale)} into {repository} (minutes; a download for a hub id)")
    command = [sys.executable, "-m", "pipeline_src.model_build.cli", "--repository", str(repository)]
    if subprocess.run([*command, *requested.build_args()]).returncode != 0:
        raise ModelsNotServable("scripts/build_models.py failed (its output is above)")


def build_obstacle(repository: Path) -> str:
    """Why a build cannot run here, or "" when it can."""
    missing = [package for package in BUILD_PACKAGES if importlib.util.find_spec(package) is None]
    if missing:
        return (
            f"the image has no {', '.join(missing)} (build it with --build-arg MODEL_BUILD=yes; compose: "
            "FOOD11_MODEL_BUILD=yes), or build the models outside it (make models BLIP=... CLASSIFIER=...)"
        )
    if not os.access(repository, os.W_OK):
        return f"{repository} is read-only (mount it writable by uid {os.getuid()}; compose: FOOD11_MODELS_MODE=rw)"
    return ""
