"""A Python step's ``parameters`` pass the typed settings class its ``settings`` parameter names."""

from __future__ import annotations

import sys
from contextlib import contextmanager

from pipeline_src.repository.loading import ModelEntry
from pipeline_src.repository.report import Report
from pipeline_src.steps.settings import SETTINGS_PARAMETER, StepSettings, declared_settings_class


@contextmanager
def stub_import_path(entry: ModelEntry):
    """sys.path as the Python backend's stub extends it for this model (python_backend r24.10,
    src/pb_stub.cc ModelContext::StubSetup): its version folders and its folder, appended, so a
    step whose logic lives beside its model.py (food11-new-step --self-contained) imports here too."""
    added = [str(path) for path in [*entry.versions, entry.directory]]
    sys.path.extend(added)
    try:
        yield
    finally:
        for path in added:
            sys.path.remove(path)


def check_settings(entry: ModelEntry, report: Report) -> StepSettings | None:
    """The step's settings, or None when they cannot be checked (an error or a warning says why)."""
    parameters = {key: value.string_value for key, value in entry.parsed_config.parameters.items()}
    try:
        with stub_import_path(entry):
            cls = declared_settings_class(parameters)
    except Exception as exc:  # a user's settings module may fail to import in any way
        report.error(entry.name, f"parameter {SETTINGS_PARAMETER}: {exc}")
        return None
    if cls is None:
        report.warning(
            entry.name,
            f"no '{SETTINGS_PARAMETER}' parameter names its settings class "
            f"(e.g. 'pipeline_src.steps.settings:PreprocessSettings'): its parameters, "
            "files and BLS calls are unchecked",
        )
        return None
    try:
        return cls.from_parameters(parameters)
    except Exception as exc:  # SettingsError, or whatever a user's validate() raises
        report.error(entry.name, f"parameters do not pass {cls.__name__}: {exc}")
        return None
