"""The serving settings: how ``make serve`` (scripts/serve.py, food11-serve) runs Triton and the API
(``ServeSettings``), and how the Triton image's command runs Triton alone (``ContainerSettings``: the same fields,
with the container's defaults). Each field is a flag (``--http-port``) and an environment variable
(``FOOD11_HTTP_PORT``; in the image also the older names a field lists); a flag wins over the variable.
docs/configuration.md lists them all (a test holds it to this file).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Annotated, Any, ClassVar, TypeVar

from pydantic import AliasChoices, Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from pipeline_src import PROJECT_ROOT
from pipeline_src.serving import admin
from pipeline_src.serving.ports import LOOPBACK

ENV_PREFIX = "FOOD11_"
EXIT_BAD_SETTING = 64  # EX_USAGE: a setting this cannot run with
# make serve's own: the Triton image runs Triton alone (the API is Dockerfile.api's container), validates nothing
# at start (the image has no validator's packages) and keeps its files as they are (a new image is a new container).
SERVE_ONLY = frozenset({"api_port", "no_api", "admin_key_file", "reload", "reload_package", "skip_validation"})
# The Triton image's own: make serve builds what BLIP and CLASSIFIER name (make models) before serve.py starts.
CONTAINER_ONLY = frozenset({"blip", "classifier"})


class ServeSettings(BaseSettings):
    # The fields this process does not read, and why: setting one is refused, rather than ignored.
    not_read: ClassVar[frozenset[str]] = CONTAINER_ONLY
    not_read_because: ClassVar[str] = "the Triton image's setting: make models builds what BLIP and CLASSIFIER name"
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, validate_by_name=True, validate_by_alias=True, str_strip_whitespace=True
    )

    # What is served
    model_repository: Path = Field(PROJECT_ROOT / "model_repository", description="the model repository Triton serves")
    blip: str = Field(
        "",
        description="the BLIP weights to serve, as make models' BLIP (a Hugging Face id, a snapshot directory, "
        "stand-in): checked against the repository's manifests at start, built there when they differ; "
        "empty: what the repository holds",
    )
    classifier: str = Field(
        "",
        description="the Food-11 checkpoint to serve, as make models' CLASSIFIER: checked and built as BLIP's; "
        "empty: what the repository holds",
    )
    # Where
    host: str = Field(
        LOOPBACK,
        description="bind address of every server (Triton's HTTP, gRPC and metrics, and the API): 127.0.0.1 is "
        "this machine only, 0.0.0.0 serves the network",
    )
    http_port: int = Field(8000, description="Triton's HTTP port")
    grpc_port: int = Field(8001, description="Triton's gRPC port")
    metrics_port: int = Field(8002, description="Triton's Prometheus metrics port")
    api_port: int = Field(8080, description="the API's port")
    no_api: bool = Field(False, description="start Triton only")
    # tritonserver
    tritonserver: Path | None = Field(
        None, description="this tritonserver binary; unset: the nvidia-pytriton wheel's (in the Triton image: NVIDIA's)"
    )
    work_dir: Path | None = Field(
        PROJECT_ROOT / ".triton",
        description="where the wheel's backend directory is assembled and the admin key written; "
        "empty: a new temporary folder",
    )
    log_file: Path | None = Field(
        PROJECT_ROOT / "logs" / "tritonserver.log", description="Triton's log; empty: this process's output"
    )
    ready_timeout: float = Field(
        600.0,
        gt=0,
        description="seconds to wait for Triton to be ready (every model loaded)",
    )
    triton_config: str = Field(
        "",
        description="the ONNX steps' config name (--model-config-name): onnxruntime, onnxruntime_tensorrt; "
        "empty: the Python-backend config.pbtxt (all the wheel's tritonserver can load)",
    )
    triton_args: Annotated[tuple[str, ...], NoDecode] = Field(
        (),
        description="more tritonserver flags, last, so they win (an --http-address binds HTTP, gRPC and metrics "
        "alike): after -- on the command line, split on spaces in the variable",
    )
    response_cache_mib: int = Field(
        64,  # a pipeline answer is about 1.5 KB: tens of thousands of photos
        ge=0,
        description="Triton's local response cache for every ensemble, MiB: a photo asked again is answered from "
        "it (docs/api.md, 'Answers from the cache'); 0: off; a --cache-config among the tritonserver flags "
        "(Redis, in NVIDIA's image) replaces it",
    )
    # Never a flag: a command line is visible to every user of the machine (ps).
    triton_admin_key: SecretStr = Field(
        SecretStr(""),
        description="the key of Triton's admin APIs (loading models, shared memory, trace and log settings), from "
        "the environment only; empty: a new random one at each start. Never passed on to the steps",
    )
    admin_key_file: Path | None = Field(
        None,
        description="where the admin key is written for this machine's tools, readable by this user only; "
        "unset: admin-key in the work dir",
    )
    # Keeping it serving
    reload: bool = Field(
        True,
        description="reload a step when its model folder or the pipeline_src code it imports changes, as a web "
        "framework's development server does (--no-reload for a steady server)",
    )
    reload_package: Annotated[tuple[Path, ...], NoDecode] = Field(
        (),
        description="one more package folder whose modules the steps import (food11-new-step's --source-dir), "
        "watched like pipeline_src: repeat the flag; in the variable, separated by ':'",
    )
    skip_validation: bool = Field(
        False, description="start Triton without validating the model repository first (for experts)"
    )
    restart_limit: int = Field(
        5,
        ge=0,
        description="restarts in a row of tritonserver (and of the API), each within a minute of the last, before "
        "a crash loop ends this; 0: a server that dies ends this at once, for whoever started it to restart it",
    )
    heal_limit: int = Field(
        3,
        ge=0,
        description="heals in a row of one step whose stub died, each within a minute of the last, before its "
        "next death ends this",
    )

    @field_validator("triton_args", mode="before")
    @classmethod
    def _split_on_spaces(cls, value: Any) -> Any:
        return value.split() if isinstance(value, str) else value

    @field_validator("reload_package", mode="before")
    @classmethod
    def _split_on_path_separators(cls, value: Any) -> Any:
        return [part for part in value.split(os.pathsep) if part] if isinstance(value, str) else value

    @field_validator("tritonserver", "work_dir", "log_file", "admin_key_file", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        return None if value == "" else value

    @field_validator("triton_admin_key")
    @classmethod
    def _triton_takes_the_key(cls, key: SecretStr) -> SecretStr:
        if key.get_secret_value() and not admin.is_valid_key(key.get_secret_value()):
            raise ValueError(admin.KEY_RULE)
        return key

    @model_validator(mode="after")
    def _refuse_what_is_not_read(self) -> ServeSettings:
        refused = sorted(self.model_fields_set & self.not_read)
        if refused:
            names = ", ".join(environment_names(type(self), name)[0] for name in refused)
            raise ValueError(f"{names}: {self.not_read_because}")
        return self

    def admin_key(self) -> str:
        return self.triton_admin_key.get_secret_value() or admin.new_key()


def in_the_image(name: str, also_read: tuple[str, ...] = (), **default: Any) -> Any:
    """``ServeSettings``' field ``name`` as the Triton image reads it: another ``default``, or older variable names
    read as well (those its compose files and manifests set); its description and checks kept."""
    changes = dict(default)
    if also_read:
        changes["validation_alias"] = AliasChoices(f"{ENV_PREFIX}{name.upper()}", *also_read)
    return FieldInfo.merge_field_infos(ServeSettings.model_fields[name], **changes)


class ContainerSettings(ServeSettings):
    """The Triton image's command (``triton_container``): ``ServeSettings`` with the container's defaults, and the
    unprefixed names its compose files and manifests set (read there only: a shell's TRITON_CONFIG, set for
    compose, must not reach make serve's tritonserver, which cannot load those configs)."""

    not_read: ClassVar[frozenset[str]] = SERVE_ONLY
    not_read_because: ClassVar[str] = "make serve's setting: the Triton image runs Triton alone"
    model_repository: Path = in_the_image("model_repository", default=Path("/models"))  # baked in, or a volume
    host: str = in_the_image("host", default="0.0.0.0")  # the container's network: compose and Kubernetes publish it
    work_dir: Path | None = in_the_image("work_dir", default=None)  # /tmp, the one writable place
    log_file: Path | None = in_the_image("log_file", default=None)  # a container's log is its output
    # BLIP from a cold volume, or a build at start
    ready_timeout: float = in_the_image("ready_timeout", default=1800.0, also_read=("FOOD11_READY_TIMEOUT_S",))
    triton_config: str = in_the_image("triton_config", also_read=("TRITON_CONFIG",))
    triton_args: Annotated[tuple[str, ...], NoDecode] = in_the_image("triton_args", also_read=("TRITON_ARGS",))
    # A dead tritonserver ends the container: Compose's restart: or Kubernetes restarts it, with their backoff.
    restart_limit: int = in_the_image("restart_limit", default=0)


# Flags and variables -------------------------------------------------------------------------------------------

S = TypeVar("S", bound=ServeSettings)


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def environment_names(settings: type[ServeSettings], name: str) -> list[str]:
    """The variables a field is read from, the first its own."""
    alias = settings.model_fields[name].validation_alias
    if isinstance(alias, AliasChoices):
        return [str(choice) for choice in alias.choices]
    return [f"{ENV_PREFIX}{name.upper()}"]


def described_default(settings: type[ServeSettings], name: str) -> str:
    """A field's default as the docs and --help show it."""
    value = settings.model_fields[name].default
    if isinstance(value, SecretStr):
        value = value.get_secret_value()
    if isinstance(value, bool):
        return "on" if value else "off"
    if value is None or value in ("", ()):
        return "unset"
    if isinstance(value, Path) and value.is_relative_to(PROJECT_ROOT):
        return str(value.relative_to(PROJECT_ROOT))
    return str(value)


def command_line_fields(settings: type[ServeSettings]) -> list[str]:
    """Every field the process reads, but the secret."""
    return [
        name
        for name, field in settings.model_fields.items()
        if field.annotation is not SecretStr and name not in settings.not_read
    ]


def parser_for(settings: type[ServeSettings], description: str | None) -> argparse.ArgumentParser:
    """One flag per field, the values left for the settings to check; a flag not given is absent, so the
    variable or the default applies."""
    parser = argparse.ArgumentParser(description=description, argument_default=argparse.SUPPRESS)
    for name in command_line_fields(settings):
        field = settings.model_fields[name]
        help_text = (
            f"{field.description} (default: {described_default(settings, name)}; "
            f"{', '.join(environment_names(settings, name))})"
        )
        if name == "triton_args":
            parser.add_argument(name, nargs="*", metavar="TRITONSERVER_FLAG", help=f"after --: {help_text}")
        elif field.annotation is bool:
            action = argparse.BooleanOptionalAction if field.default else "store_true"
            parser.add_argument(flag(name), action=action, help=help_text)
        elif name == "reload_package":
            parser.add_argument(flag(name), action="append", metavar="DIR", help=help_text)
        else:
            parser.add_argument(flag(name), help=help_text)
    return parser


def settings_from(settings: type[S], argv: list[str] | None, description: str | None) -> S:
    """The settings from the command line (``argv``, else this process's), the environment and the defaults;
    a bad value ends the process with status 64, naming its flag and variable (never the value: it may be the key)."""
    given = {
        name: value
        for name, value in vars(parser_for(settings, description).parse_args(argv)).items()
        if value is not argparse.SUPPRESS
    }
    try:
        return settings(**given)
    except ValidationError as exc:
        for error in exc.errors():
            message = str(error["ctx"]["error"]) if error["type"] == "value_error" else error["msg"]
            print(f"error: {named(settings, error['loc'])}{message}", file=sys.stderr, flush=True)
        sys.exit(EXIT_BAD_SETTING)


def named(settings: type[ServeSettings], location: tuple) -> str:
    """``--flag, VARIABLE: `` for the field a validation error is about; nothing for the whole."""
    where = str(location[0]) if location else ""
    for name in settings.model_fields:
        if where == name or where in environment_names(settings, name):
            flags = [flag(name)] if name in command_line_fields(settings) else []
            return ", ".join([*flags, *environment_names(settings, name)]) + ": "
    return f"{where}: " if where else ""
