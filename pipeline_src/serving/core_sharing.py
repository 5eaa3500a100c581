"""How the steps share a CPU's cores: Triton's rate limiter, on where there is no GPU.

On the CPU, ONNX Runtime runs the vision encoder and the captioner each on every core. Run at once (the ensemble
pipelines requests: one photo's captioning beside the next one's encoding) they thrash the same cores: measured
on the base stand-in, the vision encoder took 1064 ms a photo at concurrency 8 against 634 ms alone. Their
configs each ask for the resource ``cpu_cores``, of which there is 1 in all, so with ``--rate-limit=
execution_count`` Triton lets one of them run at a time, each on every core, as the in-process pipeline runs
them (docs/performance.md, "Sharing the CPU's cores"). The small steps (preprocess, the classifier) ask for
nothing and go on beside them, so a classify-only call never waits for a caption. On a GPU the two steps run on
the GPU and overlap well: the rate limiter stays off there.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from collections.abc import Sequence

RATE_LIMIT_FLAG = "--rate-limit"
SHARE_CORES = (f"{RATE_LIMIT_FLAG}=execution_count",)


@functools.cache
def gpu_present() -> bool:
    """Whether nvidia-smi lists a GPU here (as the Makefile decides which ONNX Runtime to install)."""
    if shutil.which("nvidia-smi") is None:
        return False
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return listed.returncode == 0 and "GPU" in listed.stdout


def core_sharing_args(extra: Sequence[str], has_gpu: bool | None = None) -> tuple[str, ...]:
    """The rate limiter on, unless there is a GPU or the tritonserver flags choose a rate-limit mode."""
    if any(argument.split("=", 1)[0] == RATE_LIMIT_FLAG for argument in extra):
        return ()
    return () if (gpu_present() if has_gpu is None else has_gpu) else SHARE_CORES
