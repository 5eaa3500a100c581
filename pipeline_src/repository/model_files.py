"""The files a model's version folder must hold: its backend's model file, the files its settings name, and
the files its manifest describes."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from pipeline_src.provenance.manifest import verify as verify_manifest
from pipeline_src.repository.loading import ModelEntry
from pipeline_src.repository.report import Report
from pipeline_src.steps.settings import StepSettings

PYTHON_BACKEND = "python"
BUILD_HINT = "if it is a built model file (model.onnx, blip/), run `make models` (scripts/build_models.py)"


def runs_onnx_runtime(entry: ModelEntry) -> bool:
    return entry.parsed_config.platform == "onnxruntime_onnx" or entry.parsed_config.backend == "onnxruntime"


def check_local_backend(entry: ModelEntry, report: Report) -> None:
    """A config.pbtxt (not a configs/ variant) on Triton's onnxruntime backend serves only in NVIDIA's image: the
    local server (tritonserver from the nvidia-pytriton wheel) has the Python backend alone and fails to load it."""
    if runs_onnx_runtime(entry) and entry.config_path is not None and entry.config_path.parent == entry.directory:
        report.warning(
            entry.name,
            f"{entry.config_path.name} runs on Triton's onnxruntime backend, which the local server (make serve: the "
            "Python backend only) does not have: it would fail to load there. Serve the file through the Python "
            "backend (`food11-new-step NAME --onnx FILE` writes that config, and this one as configs/onnxruntime.pbtxt "
            "for NVIDIA's image: docs/EXTENDING.md, 'A step that is a model file')",
        )


def check_backend_files(entry: ModelEntry, report: Report) -> list[Path]:
    """Each version folder holds the file its backend loads (default_model_filename respected); returns the ones
    present."""
    config = entry.parsed_config
    default = "model.py" if config.backend == PYTHON_BACKEND else "model.onnx" if runs_onnx_runtime(entry) else None
    if default is None:  # a backend this validator does not know
        if entry.versions:  # none: reported already
            kind = config.backend or config.platform
            report.warning(entry.name, f"backend/platform '{kind}': its model files are not checked")
        return []
    present: list[Path] = []
    for version_dir in entry.versions:
        path = version_dir / (config.default_model_filename or default)
        if path.exists():
            present.append(path)
        elif path.suffix == ".py":
            report.error(entry.name, f"version {version_dir.name}: {path} is missing (the Python backend runs it)")
        else:
            report.error(entry.name, f"version {version_dir.name}: model file {path} is missing; {BUILD_HINT}")
    return present


def check_declared_files(entry: ModelEntry, settings: StepSettings, report: Report) -> list[Path]:
    """The files and directories the step's settings class declares exist in every version folder;
    returns the ONNX files present (for the ONNX check)."""
    cls = type(settings)
    field_names = {field.name for field in dataclasses.fields(settings)}
    for name in dict.fromkeys([*cls.FILE_FIELDS, *cls.ONNX_FILE_FIELDS, *cls.DIRECTORY_FIELDS]):
        if name not in field_names:
            report.error(entry.name, f"{cls.__name__} declares '{name}' as a file field, but has no such field")
    files = [name for name in dict.fromkeys([*cls.FILE_FIELDS, *cls.ONNX_FILE_FIELDS]) if name in field_names]
    directories = {name: required for name, required in cls.DIRECTORY_FIELDS.items() if name in field_names}
    onnx_files = []
    for version_dir in entry.versions:
        for name in files:
            path = version_dir / str(getattr(settings, name))
            if not path.is_file():
                report.error(
                    entry.name,
                    f"version {version_dir.name}: parameter {name}={getattr(settings, name)!r}: "
                    f"file {path} is missing; {BUILD_HINT}",
                )
            elif name in cls.ONNX_FILE_FIELDS:
                onnx_files.append(path)
        for name, required in directories.items():
            directory = version_dir / str(getattr(settings, name))
            where = f"version {version_dir.name}: parameter {name}={getattr(settings, name)!r}"
            if not directory.is_dir():
                report.error(entry.name, f"{where}: directory {directory} is missing; {BUILD_HINT}")
                continue
            for file_name in required:
                if not (directory / file_name).is_file():
                    report.error(entry.name, f"{where}: {directory} has no {file_name}; {BUILD_HINT}")
    return onnx_files


def check_manifests(entry: ModelEntry, report: Report) -> None:
    """A version folder's manifest.json (what the build wrote of its files) still describes them: the
    identity every answer carries is read from it."""
    for version_dir in entry.versions:
        for problem in verify_manifest(version_dir):
            report.error(entry.name, f"version {version_dir.name}: {problem}")
