"""Where a model file of yours came from: ``model_source.json``, which ``food11-new-step NAME --onnx FILE``
writes beside the step's config.pbtxt (committed) and ``make models`` reads to copy the file (git-ignored) into
its version folder again (pipeline_src.model_build.cli.copy_user_models)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from pipeline_src import PROJECT_ROOT

SOURCE_RECORD = "model_source.json"
USER_KIND = "user"  # the manifest's kind of a file of yours (pipeline_src.provenance.manifest.KINDS)


@dataclass(frozen=True)
class ModelSource:
    """The file the version folder serves, and its source: a path relative to the folder holding the model
    repository (the project's root) where it lies under it, else absolute."""

    file: str  # relative to the version folder
    source: str
    version: str = "1"

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"

    @classmethod
    def read(cls, path: Path) -> ModelSource:
        return cls(**json.loads(path.read_text(encoding="utf-8")))


def recorded_source(source: Path, repository: Path) -> str:
    """How ``model_source.json`` spells ``source``: relative to the repository's parent where it lies under it,
    so that every clone finds it at the same place; else absolute."""
    resolved, root = source.resolve(), repository.resolve().parent
    return resolved.relative_to(root).as_posix() if resolved.is_relative_to(root) else str(resolved)


def source_path(recorded: str, repository: Path) -> Path:
    """The recorded source on this machine: under the repository's parent, or under this project's root for a
    copy of the repository made elsewhere (the tests' and benchmarks' builds)."""
    path = Path(recorded).expanduser()
    if path.is_absolute():
        return path
    here, project = repository.resolve().parent / path, PROJECT_ROOT / path
    return project if project.is_file() and not here.is_file() else here
