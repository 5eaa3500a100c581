"""What a new step is: its tensors (``Tensor``), its config (``StepSpec``) and where its files go (``Layout``),
each checked before anything is written (``ScaffoldError``)."""

from __future__ import annotations

import keyword
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_PACKAGE = "pipeline_src.steps"
SELF_CONTAINED_SUFFIX = "_step"  # NAME_step.py: a module name unlikely to clash with an installed package

# The element types the example computation supports: config spelling (without TYPE_) -> numpy type (FP32: float32).
NUMERIC_TYPES = {
    name: name.lower().replace("fp", "float")
    for name in ("FP16", "FP32", "FP64", "INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64")
}
# Text: Triton's wire name, which the config spells TYPE_STRING; numpy object arrays of bytes in a step.
BYTES = "BYTES"
DATA_TYPES = (*NUMERIC_TYPES, BYTES)  # every type a tensor of a new step can have
CONFIG_SPELLINGS = {BYTES: "STRING"}  # where the config's TYPE_ name differs from the wire name


class ScaffoldError(ValueError):
    """The step cannot be created as asked; nothing was written."""


def dims_text(dims: Sequence[int]) -> str:
    """Dims as a config shows them: ``[3, 384, 384]``."""
    return f"[{', '.join(map(str, dims))}]"


def wire_type(text: str) -> str:
    """A data type as the scaffold names it: upper case, without TYPE_, the config's STRING as BYTES."""
    name = text.upper().removeprefix("TYPE_")
    return next((wire for wire, config in CONFIG_SPELLINGS.items() if config == name), name)


def parse_dims(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise ScaffoldError(f"dims {text!r} is not a comma-separated list of integers, e.g. 3,-1") from None


@dataclass(frozen=True)
class Tensor:
    """One input or output of the step, as its config declares it."""

    name: str
    data_type: str = "FP32"  # spelled without TYPE_, text as BYTES
    dims: tuple[int, ...] = (4,)  # one row's shape, without the batch dimension; -1: any size

    @classmethod
    def parse(cls, text: str, data_type: str = "FP32", dims: tuple[int, ...] = (4,)) -> Tensor:
        """``NAME``, ``NAME:TYPE`` or ``NAME:TYPE:DIMS`` (e.g. ``PIXELS:UINT8:3,384,384``); what it leaves out
        is ``data_type`` and ``dims``."""
        name, _, rest = text.partition(":")
        type_text, _, dims_part = rest.partition(":")
        return cls(name, wire_type(type_text) if type_text else data_type, parse_dims(dims_part) if dims_part else dims)

    @property
    def config_type(self) -> str:
        return f"TYPE_{CONFIG_SPELLINGS.get(self.data_type, self.data_type)}"

    def describe(self) -> str:
        return f"{self.name} {self.config_type} {dims_text(self.dims)}"

    def check(self, role: str) -> None:
        if not self.name.isidentifier():
            raise ScaffoldError(f"{role} tensor name {self.name!r} is not an identifier (e.g. {role.upper()})")
        if self.data_type not in DATA_TYPES:
            raise ScaffoldError(
                f"{role} {self.name}: data type {self.data_type!r}: the example computation needs one of "
                f"{', '.join(DATA_TYPES)} (BYTES: text, the config's TYPE_STRING)"
            )
        if not self.dims or any(dim == 0 or dim < -1 for dim in self.dims):
            raise ScaffoldError(
                f"{role} {self.name}: dims {list(self.dims)}: each dim is a positive size or -1 (any size)"
            )


@dataclass(frozen=True)
class StepSpec:
    """What the new step declares in its config."""

    name: str
    inputs: tuple[Tensor, ...] = (Tensor("INPUT"),)
    outputs: tuple[Tensor, ...] = (Tensor("OUTPUT"),)
    max_batch_size: int = 32
    instances: int = 1

    @property
    def settings_class(self) -> str:
        return "".join(part.capitalize() for part in self.name.split("_") if part) + "Settings"

    def check(self) -> None:
        if not self.name.isidentifier() or keyword.iskeyword(self.name):
            raise ScaffoldError(f"step name {self.name!r} is not a valid Python identifier (e.g. top_labels)")
        if not self.inputs or not self.outputs:
            raise ScaffoldError("a step needs at least one input and one output")
        for role, tensors in (("input", self.inputs), ("output", self.outputs)):
            for tensor in tensors:
                tensor.check(role)
        names = [tensor.name for tensor in (*self.inputs, *self.outputs)]
        if repeated := sorted({name for name in names if names.count(name) > 1}):
            raise ScaffoldError(f"tensor name(s) {', '.join(map(repr, repeated))} used more than once")
        if self.max_batch_size < 1:
            raise ScaffoldError("max_batch_size must be >= 1: the step stacks requests along the batch dimension")
        if self.instances < 1:
            raise ScaffoldError("instances must be >= 1")


@dataclass(frozen=True)
class Layout:
    """Where the step's files go."""

    repository: Path
    tests_dir: Path
    source_dir: Path | None = None  # the directory of ``package``; None: self-contained (in the model folder)
    package: str = DEFAULT_PACKAGE  # the dotted package of the logic module (unused when self-contained)
    # The docs page whose "Configuration" table gets a row per setting of the new step; None (or no such page):
    # none (``food11-new-step`` passes the docs/configuration.md beside the repository, as this project's).
    configuration_doc: Path | None = field(default=None, kw_only=True)

    @property
    def self_contained(self) -> bool:
        return self.source_dir is None

    def model_dir(self, name: str) -> Path:
        return self.repository / name

    def module(self, name: str) -> str:
        """The logic module's import name."""
        return f"{name}{SELF_CONTAINED_SUFFIX}" if self.self_contained else f"{self.package}.{name}"

    def logic_file(self, name: str) -> Path:
        if self.source_dir is None:  # self-contained
            return self.model_dir(name) / f"{self.module(name)}.py"
        return self.source_dir / f"{name}.py"

    def test_file(self, name: str) -> Path:
        return self.tests_dir / f"test_step_{name}.py"
