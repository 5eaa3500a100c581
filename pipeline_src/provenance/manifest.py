"""A built model's manifest, ``manifest.json`` in its version folder: what the model is (real weights or a
stand-in), where its weights came from, a content hash of each file its step loads, and what the build
measured of it. The build writes it (scripts/build_models.py); food11-validate checks it against the files;
the served identity (served.py) is read from it."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

MANIFEST_FILE = "manifest.json"
# unknown: built before manifests existed, source not recorded; user: a model file of yours, copied from its source
# (a step added by ``food11-new-step NAME --onnx FILE``)
KINDS = ("real", "stand-in", "unknown", "user")


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()  # read in blocks: hashlib.file_digest is Python 3.11+, and graphs are large
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class Manifest:
    model: str
    kind: str  # one of KINDS
    source: str  # where the weights came from, in words a user can act on
    files: dict[str, str]  # path relative to the version folder -> sha256 of its bytes
    warning: str = ""  # shown beside every answer this model takes part in (a stand-in's says so)
    precisions: tuple[str, ...] = ("fp32",)  # the graphs built; the step's settings choose among them
    fidelity: dict = field(default_factory=dict)  # what the build measured (blip_graphs: fidelity.json)

    @property
    def sha256(self) -> str:
        """One hash of all the files, names included: the model's identity."""
        listing = "".join(f"{name}\0{digest}\n" for name, digest in sorted(self.files.items()))
        return hashlib.sha256(listing.encode()).hexdigest()

    def to_dict(self) -> dict:
        return {**asdict(self), "sha256": self.sha256}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"

    @classmethod
    def from_dict(cls, data: dict) -> Manifest:
        data = {key: value for key, value in data.items() if key != "sha256"}  # derived; verify() compares it
        data["precisions"] = tuple(data.get("precisions", ("fp32",)))
        return cls(**data)


def write_manifest(
    version_dir: Path,
    model: str,
    kind: str,
    source: str,
    files: Iterable[Path],
    *,
    warning: str = "",
    precisions: tuple[str, ...] = ("fp32",),
    fidelity: dict | None = None,
) -> Manifest:
    """Hash ``files`` (inside ``version_dir``) and write the manifest beside them."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
    version_dir = Path(version_dir)
    digests = {path.relative_to(version_dir).as_posix(): file_sha256(path) for path in sorted(files)}
    manifest = Manifest(model, kind, source, digests, warning, tuple(precisions), fidelity or {})
    (version_dir / MANIFEST_FILE).write_text(manifest.to_json())
    return manifest


def read_manifest(version_dir: Path) -> Manifest | None:
    path = Path(version_dir) / MANIFEST_FILE
    return Manifest.from_dict(json.loads(path.read_text())) if path.is_file() else None


def verify(version_dir: Path) -> list[str]:
    """What does not match between the manifest and the files beside it (empty: all match)."""
    version_dir = Path(version_dir)
    path = version_dir / MANIFEST_FILE
    if not path.is_file():
        return []
    try:
        document = json.loads(path.read_text())
        manifest = Manifest.from_dict(document)
    except (ValueError, TypeError) as exc:
        return [f"{MANIFEST_FILE} does not parse: {exc}"]
    problems = []
    if document.get("sha256") != manifest.sha256:
        problems.append(f"{MANIFEST_FILE}: its sha256 is not the hash of its file list (edited by hand?)")
    for name, digest in manifest.files.items():
        path = version_dir / name
        if not path.is_file():
            problems.append(f"{MANIFEST_FILE} lists {name}, which is missing")
        elif file_sha256(path) != digest:
            problems.append(
                f"{name} is not the file {MANIFEST_FILE} describes (replaced since it was built: "
                "`make models` records what it is now, `make models BUILD_ARGS=--force` rebuilds it)"
            )
    return problems
