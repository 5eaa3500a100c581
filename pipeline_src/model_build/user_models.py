"""Model files of yours (steps added by ``food11-new-step NAME --onnx FILE``): each model folder with a
``model_source.json`` names the file its version folder serves and where it came from. The file itself is
git-ignored, so ``make models`` copies it from there again (a fresh clone, a changed source) and rewrites its
manifest, through which every answer's ``MODELS`` names it."""

from __future__ import annotations

import shutil
from pathlib import Path

from pipeline_src.provenance.manifest import file_sha256, read_manifest, verify, write_manifest
from pipeline_src.provenance.model_source import SOURCE_RECORD, USER_KIND, ModelSource, source_path


def copy_user_models(repository: Path, force: bool = False) -> list[str]:
    """Copy each recorded model file from its source where it is missing, differs or ``force``, and write its
    manifest (kind ``user``); a missing source keeps a copy its manifest still describes. One line each, to print."""
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
