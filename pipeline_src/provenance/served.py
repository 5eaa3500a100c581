"""The identity of the models a repository serves, as every answer carries it (the ``MODELS`` output), and
their whole manifests (the ``model_manifests`` step, the API's ``/models``): for each model with a manifest,
the version that answers (the highest Triton loads under the config's ``version_policy``: what the
ensembles' and BLS calls' ``model_version: -1`` reaches), what it is, and its hash.

Runs inside Triton, so the standard library only: the steps' environment has no tritonclient (whose
``model_config_pb2`` the validator parses configs with). The one thing read from a config is a
``specific`` version policy, the only policy under which the highest version folder is not served;
tests hold this reading to the validator's ``loaded_versions``."""

from __future__ import annotations

import json
import re
from pathlib import Path

from pipeline_src.provenance.manifest import Manifest, read_manifest

SHORT_HASH = 16  # hex digits of the manifest's sha256 in an answer: enough to tell builds apart
CONFIG_FILE = "config.pbtxt"


def _braced(text: str, opening: int) -> str:
    """The text inside the brace at ``opening`` and its match."""
    depth = 0
    for index in range(opening, len(text)):
        depth += {"{": 1, "}": -1}.get(text[index], 0)
        if depth == 0:
            return text[opening + 1 : index]
    return text[opening + 1 :]


def specific_versions(config_text: str) -> list[int] | None:
    """The versions of a ``version_policy { specific { versions: ... } }``; None under any other policy."""
    text = re.sub(r"#[^\n]*", "", config_text)  # comments
    policy = re.search(r"\bversion_policy\s*:?\s*\{", text)
    if policy is None:
        return None
    block = _braced(text, policy.end() - 1)
    specific = re.search(r"\bspecific\s*:?\s*\{", block)
    if specific is None:
        return None
    values = re.findall(r"\bversions\s*:\s*(\[[^\]]*\]|\d+)", _braced(block, specific.end() - 1))
    return [int(number) for value in values for number in re.findall(r"\d+", value)]


def served_version_dir(model_dir: Path) -> Path | None:
    """The version folder that answers ``model_version: -1``: the highest that Triton loads."""
    try:
        wanted = specific_versions((model_dir / CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        return None  # no readable config: Triton loads no version of it (the validator says why)
    versions = [path for path in model_dir.iterdir() if path.is_dir() and path.name.isdigit()]
    if wanted is not None:
        versions = [path for path in versions if int(path.name) in wanted]
    return max(versions, key=lambda path: int(path.name), default=None)


def served_manifests(repository: Path) -> list[tuple[str, str, Manifest]]:
    """(model, version, manifest) for each model of ``repository`` whose served version has a manifest."""
    served = []
    for model_dir in sorted(path for path in Path(repository).iterdir() if path.is_dir() and path.name[0] != "."):
        version_dir = served_version_dir(model_dir)
        if version_dir is not None and (manifest := read_manifest(version_dir)) is not None:
            served.append((model_dir.name, version_dir.name, manifest))
    return served


def served_identity(repository: Path) -> list[dict]:
    """One short entry per served manifest, by model name: what an answer carries (its warning where it has one)."""
    return [
        {
            "model": model,
            "version": version,
            "kind": manifest.kind,
            "sha256": manifest.sha256[:SHORT_HASH],
            "source": manifest.source,
            **({"warning": manifest.warning} if manifest.warning else {}),
        }
        for model, version, manifest in served_manifests(repository)
    ]


def identity_json(repository: Path) -> str:
    """Compact, for a BYTES tensor: the same string in every row of every answer."""
    return json.dumps(served_identity(repository), separators=(",", ":"))


def manifests_json(repository: Path) -> str:
    """Every served manifest, whole (files and fidelity included), with the version served."""
    return json.dumps(
        [{"version": version, **manifest.to_dict()} for _, version, manifest in served_manifests(repository)]
    )
