#!/usr/bin/env python3
"""ONNX Runtime on CUDA, without torch, in the environment the steps run in, as a step's process does it
(docs/gpu.md):

    python scripts/device_cuda_smoke.py

Exits 1 at the first failure, saying which: a missing library is named, not swallowed into a CPU fallback.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np
import onnxruntime as ort

CUDA = "CUDAExecutionProvider"


def tiny_model() -> bytes:
    """y = x + x, float32 [n, 4], opset 17, written with the onnx package's helpers."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "x"], ["y"])],
        "smoke",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()


def smoke() -> str:
    """What ran, or SystemExit naming the step that failed."""
    print(f"cuda smoke: onnxruntime {ort.__version__} from {Path(ort.__file__).parent}", flush=True)
    if CUDA not in ort.get_available_providers():
        raise SystemExit(f"cuda smoke: FAIL: this onnxruntime has no {CUDA} ({ort.get_available_providers()})")
    try:
        ort.preload_dlls(directory="")
    except Exception as exc:  # said; the provider library's own load below names what is missing
        print(f"cuda smoke: preload_dlls failed: {exc!r}", flush=True)
    provider = Path(ort.__file__).parent / "capi" / "libonnxruntime_providers_cuda.so"
    try:
        ctypes.CDLL(str(provider))
    except OSError as exc:
        raise SystemExit(f"cuda smoke: FAIL: loading {provider.name}: {exc}") from None
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(tiny_model(), options, providers=[(CUDA, {"use_tf32": 0}), "CPUExecutionProvider"])
    if session.get_providers()[:1] != [CUDA]:
        raise SystemExit(f"cuda smoke: FAIL: the session fell back to {session.get_providers()}")
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    (y,) = session.run(None, {"x": x})
    if not np.array_equal(y, x + x):
        raise SystemExit(f"cuda smoke: FAIL: CUDA answered {y.tolist()}, not {(x + x).tolist()}")
    return f"a session on {session.get_providers()} gave the CPU's answer"


if __name__ == "__main__":
    print(f"cuda smoke: ok: {smoke()}", flush=True)
