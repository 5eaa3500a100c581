"""The identity of the models a repository serves, as every answer carries it (the ``MODELS`` output), and
their whole manifests (the ``model_manifests`` step, the API's ``/models``): for each model with a manifest,
the version that answers (the highest Triton loads under the config's ``version_policy``: what the
ensembles' and BLS calls' ``model_version: -1`` reaches), what it is, and its hash."""

from __future__ import annotations

import json
from pathlib import Path

from pipeline_src.provenance.manifest import Manifest, read_manifest
from pipeline_src.repository.loading import load_models
from pipeline_src.repository.report import Report

SHORT_HASH = 16  # hex digits of the manifest's sha256 in an answer: enough to tell builds apart


def served_manifests(repository: Path) -> list[tuple[str, str, Manifest]]:
    """(model, version, manifest) for each model of ``repository`` whose served version has a manifest.
    The versions are the validator's (``loaded_versions``); a model whose config it cannot read has none."""
    served = []
    for name, entry in load_models(Path(repository), Report(Path(repository))).items():
        version_dir = max(entry.versions, key=lambda path: int(path.name), default=None)
        manifest = read_manifest(version_dir) if version_dir is not None else None
        if version_dir is not None and manifest is not None:
            served.append((name, version_dir.name, manifest))
    return served


def served_identity(repository: Path) -> list[dict]:
    """One short entry per served manifest, by model name: what an answer carries."""
    identity = []
    for model, version, manifest in served_manifests(repository):
        entry = {
            "model": model,
            "version": version,
            "kind": manifest.kind,
            "sha256": manifest.sha256[:SHORT_HASH],
            "source": manifest.source,
        }
        if manifest.warning:
            entry["warning"] = manifest.warning
        identity.append(entry)
    return identity


def identity_json(repository: Path) -> str:
    """Compact, for a BYTES tensor: the same string in every row of every answer."""
    return json.dumps(served_identity(repository), separators=(",", ":"))


def manifests_json(repository: Path) -> str:
    """Every served manifest, whole (files and fidelity included), with the version served."""
    return json.dumps(
        [{"version": version, **manifest.to_dict()} for _, version, manifest in served_manifests(repository)]
    )
