"""How ``make serve`` and the Triton container run tritonserver's model control: explicit, every model loaded at
start, unless the flags given choose a mode. Explicit control lets a model be unloaded and loaded while serving
(the reload watcher, the stub watchdog); loading every model at start keeps what Triton's default mode did:
all served, ready only once all loaded, a failed load ends the start."""

from __future__ import annotations

import re
from collections.abc import Sequence

MODEL_CONTROL_FLAG = "--model-control-mode"
EXPLICIT_MODEL_CONTROL = (f"{MODEL_CONTROL_FLAG}=explicit", "--load-model=*")


def chosen_model_control(extra: Sequence[str]) -> str | None:
    """The model control mode the extra tritonserver flags choose, if they do."""
    found = re.search(rf"(?:^| ){MODEL_CONTROL_FLAG}[= ](\S+)", " ".join(extra))
    return found.group(1) if found else None


def model_control_args(extra: Sequence[str]) -> tuple[str, ...]:
    """Explicit model control with every model loaded, unless the extra tritonserver flags choose a mode."""
    return () if chosen_model_control(extra) else EXPLICIT_MODEL_CONTROL
