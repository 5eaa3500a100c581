"""What a step sends to another model by BLS and reads back, declared once (in its settings' ``BLS_CALLS``): its
``model.py`` builds the request from it, and ``food11-validate`` checks it against the callee's ``config.pbtxt``, so
a renamed tensor or callee is caught before the server starts. Imports nothing heavy: the validator reads it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class BlsTensor:
    """One tensor of a BLS call. Sent and read with a leading batch dimension: the caller's request rows."""

    name: str
    data_type: str  # spelled as in config.pbtxt: "TYPE_FP32", "TYPE_STRING" (Triton's BYTES), ...
    dims: tuple[int, ...]  # one row's shape, without the batch dimension; -1: any size
    # True: the caller forwards its own input of this name as is (same name, type and dims, no copy).
    forwarded: bool = False
    # True: sent only when the caller has it (a forwarded optional input); the callee's input must be optional too.
    optional: bool = False


@dataclass(frozen=True)
class BlsCall:
    """A call from a step to another model: which settings field names the callee, what goes in and out."""

    callee_field: str  # the settings field whose value is the callee model's name
    inputs: tuple[BlsTensor, ...]  # every tensor sent
    outputs: tuple[BlsTensor, ...]  # every output requested and read

    def callee(self, settings: Any) -> str:
        """The callee model's name under these settings."""
        return getattr(settings, self.callee_field)

    @property
    def output_names(self) -> list[str]:
        return [tensor.name for tensor in self.outputs]
