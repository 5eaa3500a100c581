"""A model repository read from disk: each model folder, its parsed config.pbtxt, its version folders."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from pipeline_src.repository.report import Report

CONFIG_FILE = "config.pbtxt"
CONFIG_VARIANTS_DIR = "configs"  # Triton's custom model configurations: configs/<name>.pbtxt
ENSEMBLE_PLATFORM = "ensemble"


@dataclass
class ModelEntry:
    name: str  # the folder's name: the name Triton serves it under
    directory: Path
    config: model_config_pb2.ModelConfig | None = None  # None: missing or unparsable (already reported)
    versions: list[Path] = field(default_factory=list)  # the version folders Triton would load
    config_path: Path | None = None  # the file read: config.pbtxt, or a configs/<name>.pbtxt variant

    @property
    def parsed_config(self) -> model_config_pb2.ModelConfig:
        """The config, for the checks that run only on models whose config parsed."""
        if self.config is None:
            raise ValueError(f"{self.name}: its config is missing or did not parse")
        return self.config

    @property
    def is_ensemble(self) -> bool:
        return self.config is not None and self.config.platform == ENSEMBLE_PLATFORM

    @property
    def max_batch_size(self) -> int:
        return self.config.max_batch_size if self.config is not None else 0

    @property
    def batched(self) -> bool:
        return self.max_batch_size > 0


def parse_config(path: Path) -> model_config_pb2.ModelConfig:
    """Parse as Triton does; raises text_format.ParseError (with line and column) or OSError."""
    return text_format.Parse(path.read_text(encoding="utf-8"), model_config_pb2.ModelConfig())


def describe_parse_error(path: Path, exc: text_format.ParseError) -> str:
    line, column = exc.GetLine(), exc.GetColumn()
    message = str(exc)
    if line is not None:
        message = message.split(" : ", 1)[-1]  # str() repeats "line:column : " in front
        return f"{path} line {line}, column {column}: {message}"
    return f"{path}: {message}"


def load_models(repository: Path, report: Report, config_name: str | None = None) -> dict[str, ModelEntry]:
    """Every model folder of ``repository`` with its config (the ``config_name`` variant where there is one)
    and version folders; problems go to ``report``."""
    models: dict[str, ModelEntry] = {}
    for directory in sorted(path for path in repository.iterdir() if path.is_dir() and not path.name.startswith(".")):
        entry = ModelEntry(directory.name, directory)
        models[entry.name] = entry
        # What Triton reads: configs/<name>.pbtxt when started with --model-config-name=<name> and the model has one
        variant = directory / CONFIG_VARIANTS_DIR / f"{config_name}.pbtxt"
        config_path = entry.config_path = variant if config_name and variant.is_file() else directory / CONFIG_FILE
        if not config_path.is_file():
            report.error(entry.name, f"no {CONFIG_FILE} in {directory} (this project gives every model one)")
            continue
        try:
            entry.config = parse_config(config_path)
        except text_format.ParseError as exc:
            report.error(
                entry.name,
                f"{CONFIG_FILE} does not parse as Triton's ModelConfig: {describe_parse_error(config_path, exc)}",
            )
            continue
        except (OSError, UnicodeDecodeError) as exc:
            report.error(entry.name, f"cannot read {config_path}: {exc}")
            continue
        if entry.config.name and entry.config.name != entry.name:
            report.error(
                entry.name,
                f"{CONFIG_FILE} names the model '{entry.config.name}', but its folder is "
                f"'{entry.name}': Triton needs the two equal",
            )
        entry.versions = loaded_versions(entry, report)
    report.models = list(models)
    return models


def loaded_versions(entry: ModelEntry, report: Report) -> list[Path]:
    """The version folders Triton loads under the config's version_policy (default: the latest one)."""
    available = {int(path.name): path for path in entry.directory.iterdir() if path.is_dir() and path.name.isdigit()}
    if not available:
        report.error(entry.name, f"no version folder (e.g. {entry.directory / '1'}): Triton loads no version of it")
        return []
    policy = entry.parsed_config.version_policy
    choice = policy.WhichOneof("policy_choice")
    if choice == "all":
        return [available[number] for number in sorted(available)]
    if choice == "specific":
        missing = [number for number in policy.specific.versions if number not in available]
        if missing:
            report.error(
                entry.name,
                f"version_policy asks for version(s) {missing}, which have no folder (found: {sorted(available)})",
            )
        return [available[number] for number in sorted(policy.specific.versions) if number in available]
    latest = policy.latest.num_versions if choice == "latest" else 1
    return [available[number] for number in sorted(available)[-max(latest, 1) :]]
