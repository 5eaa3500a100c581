"""The identity of the models a repository serves, as every answer carries it (the ``MODELS`` output), and
their whole manifests (the ``model_manifests`` step, the API's ``/models``): for each model with a manifest,
the version Triton serves (its latest numbered folder: Triton's default version policy, and what the
ensembles' ``model_version: -1`` asks for), what it is, and its hash."""

from __future__ import annotations

import json
from pathlib import Path

from pipeline_src.provenance.manifest import Manifest, read_manifest

SHORT_HASH = 16  # hex digits of the manifest's sha256 in an answer: enough to tell builds apart


def served_version_dir(model_dir: Path) -> Path | None:
    versions = [path for path in model_dir.iterdir() if path.is_dir() and path.name.isdigit()]
    return max(versions, key=lambda path: int(path.name), default=None)


def served_manifests(repository: Path) -> list[tuple[str, str, Manifest]]:
    """(model, version, manifest) for each model of ``repository`` whose served version has a manifest."""
    served = []
    for model_dir in sorted(path for path in Path(repository).iterdir() if path.is_dir()):
        version_dir = served_version_dir(model_dir)
        manifest = read_manifest(version_dir) if version_dir else None
        if manifest is not None:
            served.append((model_dir.name, version_dir.name, manifest))
    return served


def served_identity(repository: Path) -> list[dict]:
    """One short entry per served manifest, by model name: what an answer carries."""
    identity = []
    for model, version, manifest in served_manifests(repository):
        entry = {"model": model, "version": version, "kind": manifest.kind,
                 "sha256": manifest.sha256[:SHORT_HASH], "source": manifest.source}
        if manifest.warning:
            entry["warning"] = manifest.warning
        identity.append(entry)
    return identity


def identity_json(repository: Path) -> str:
    """Compact, for a BYTES tensor: the same string in every row of every answer."""
    return json.dumps(served_identity(repository), separators=(",", ":"))


def manifests_json(repository: Path) -> str:
    """Every served manifest, whole (files and fidelity included), with the version served."""
    return json.dumps([{"version": version, **manifest.to_dict()}
                       for _, version, manifest in served_manifests(repository)])
