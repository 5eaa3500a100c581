"""Check a whole model repository before a server starts: ``food11-validate [REPO]``.

No server needed, and fast (no torch): every config.pbtxt parses as Triton's ModelConfig and is named
after its folder; every model has the version folder and the files its backend and its settings need;
every Python step's parameters pass its typed settings class; every ensemble's graph is wired
consistently (ensembles in ensembles too); every BLS call matches its callee; every ONNX file matches
its model's config; every manifest.json matches the files it describes; the tensor names a step's code
declares (``INPUTS``, ``OUTPUTS`` beside its settings class) are its config's; a config.pbtxt on Triton's
onnxruntime backend, which the local server lacks, is a warning. Lists every problem at once, one line each,
naming model, step and tensor; exit status 1 when there is an error, 0 otherwise (warnings alone: 0).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from pathlib import Path

from tritonclient.grpc import model_config_pb2

from pipeline_src import PROJECT_ROOT, contract
from pipeline_src.repository.bls_calls import check_bls_calls
from pipeline_src.repository.ensembles import check_ensemble, check_ensemble_nesting, quoted_names
from pipeline_src.repository.loading import ModelEntry, load_models
from pipeline_src.repository.model_files import (
    PYTHON_BACKEND,
    check_backend_files,
    check_declared_files,
    check_local_backend,
    check_manifests,
    runs_onnx_runtime,
)
from pipeline_src.repository.onnx_io import check_onnx_io
from pipeline_src.repository.report import Problem, Report, Severity
from pipeline_src.repository.step_settings import check_settings
from pipeline_src.steps.settings import StepSettings

__all__ = ["Problem", "Report", "Severity", "main", "validate_repository"]

REPOSITORY_LABEL = "<repository>"  # Problem.model of problems with the repository as a whole
# What a step's code may declare, in the module of its settings class, for the validator to compare with its
# config: the names of its inputs and of its outputs (a tuple of names, or a dict keyed by them, as
# food11-new-step writes them). answer_stacked refuses an output the config does not declare, at run time.
DECLARED_TENSORS = (("INPUTS", "input"), ("OUTPUTS", "output"))
# The wire contract (pipeline_src/contract.py): by ensemble, the tensors of contract.CONFIG_TYPES that its callers
# send and read, named and typed as every client reads them. Outputs beyond them are the repository's to add.
CONTRACTS = {
    contract.ENSEMBLE: tuple(contract.CONFIG_TYPES),
    contract.CLASSIFY_ENSEMBLE: (contract.IMAGE, *contract.CLASSIFY_OUTPUTS),
}


def validate_repository(path: Path | str, config_name: str | None = None) -> Report:
    """Every problem of the model repository at ``path``; ``report.ok`` says whether Triton can serve it.
    ``config_name``: as tritonserver's ``--model-config-name`` (e.g. ``onnxruntime``, the container's
    classifier on Triton's native backend)."""
    repository = Path(path)
    report = Report(repository)
    if not repository.is_dir():
        report.error(REPOSITORY_LABEL, f"{repository} is not a directory")
        return report
    models = load_models(repository, report, config_name)
    if not models:
        report.error(REPOSITORY_LABEL, f"{repository} holds no model folder")
    for entry in models.values():
        if entry.config is not None:
            _check_model(entry, models, report)
    check_ensemble_nesting(models, report)
    check_wire_contract(models, report)
    return report


def _check_model(entry: ModelEntry, models: dict[str, ModelEntry], report: Report) -> None:
    config = entry.parsed_config
    if entry.is_ensemble:
        if config.backend:
            report.error(entry.name, f"an ensemble has no backend, but the config says '{config.backend}'")
        check_ensemble(entry, models, report)
        return
    if not config.backend and not config.platform:
        report.error(entry.name, "the config names neither a backend nor a platform")
        return
    check_local_backend(entry, report)
    model_files = check_backend_files(entry, report)
    check_manifests(entry, report)
    if runs_onnx_runtime(entry):
        for path in model_files:
            if path.is_file():
                check_onnx_io(entry, path, report)
    if config.backend == PYTHON_BACKEND:
        settings = check_settings(entry, report)
        if settings is not None:
            for path in check_declared_files(entry, settings, report):
                check_onnx_io(entry, path, report)
            check_bls_calls(entry, settings, models, report)
            check_declared_tensors(entry, settings, report)


def check_declared_tensors(entry: ModelEntry, settings: StepSettings, report: Report) -> None:
    """The tensor names the step's code declares (``INPUTS``, ``OUTPUTS`` in its settings class's module) are
    its config's: code and config that disagree load, then fail every request."""
    module = sys.modules.get(type(settings).__module__)
    for constant, kind in DECLARED_TENSORS:
        declared = getattr(module, constant, None)
        if declared is None:
            continue
        where = f"{type(settings).__module__}.{constant}"
        names = None if isinstance(declared, str) or not isinstance(declared, Iterable) else list(declared)
        if names is None or not all(isinstance(name, str) for name in names):
            report.error(entry.name, f"{where} is not a collection of tensor names")
            continue
        configured = [tensor.name for tensor in getattr(entry.parsed_config, kind)]
        extra = sorted(set(names) - set(configured))
        missing = sorted(set(configured) - set(names))
        if extra or missing:
            differences = [f"declares {quoted_names(extra)}, which the config does not"] if extra else []
            differences += [f"lacks the config's {quoted_names(missing)}"] if missing else []
            report.error(
                entry.name,
                f"{where} {' and '.join(differences)}: the step's {kind}s in its code and in config.pbtxt must be "
                f"the same names (the config's: {quoted_names(configured)})",
            )


def check_wire_contract(models: dict[str, ModelEntry], report: Report) -> None:
    for ensemble, names in CONTRACTS.items():
        entry = models.get(ensemble)
        if entry is None or entry.config is None:  # not here (a repository of one's own), or reported
            continue
        config = entry.parsed_config
        declared = {
            tensor.name: (model_config_pb2.DataType.Name(tensor.data_type), tuple(tensor.dims))
            for tensor in (*config.input, *config.output)
        }
        for name in names:
            data_type, dims = contract.CONFIG_TYPES[name]
            if name not in declared:
                report.error(
                    entry.name,
                    f"declares no {name}: it is part of the wire contract every client reads "
                    "(pipeline_src/contract.py); add outputs beside the core ones, but keep these",
                )
            elif declared[name] != (data_type, dims):
                got_type, got_dims = declared[name]
                report.error(
                    entry.name,
                    f"{name} is {got_type} {list(got_dims)}, the wire contract's is {data_type} {list(dims)} "
                    "(pipeline_src/contract.py): every client reads it so",
                )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="food11-validate", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "repository",
        nargs="?",
        type=Path,
        default=PROJECT_ROOT / "model_repository",
        help="the model repository (default: %(default)s)",
    )
    parser.add_argument(
        "--model-config-name",
        help="validate with this configs/<name>.pbtxt variant where a model "
        "has one, as tritonserver --model-config-name does",
    )
    args = parser.parse_args(argv)
    report = validate_repository(args.repository, args.model_config_name)
    print(report.text(), flush=True)
    sys.exit(0 if report.ok else 1)


if __name__ == "__main__":
    main()
