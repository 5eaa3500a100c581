#!/usr/bin/env python3
"""Hugging Face fp32 ``generate``, the reference benchmarks/gpu_serve.py checks served captions against, in a
process of its own:

    python -m benchmarks.hf_reference REQUEST.json ANSWER.json

REQUEST: ``{"snapshot": DIR, "pixels": FILE.npy, "prompts": [[ROW, PROMPT], ...], "max_new_tokens": N,
"repetition_penalty": X}``: the captioner's BLIP snapshot and settings, and the captioner's pixels as the
preprocess step's own code made them (the runner makes them). ANSWER: ``{"captions": [...]}``, one per
(row, prompt), from ``BlipForConditionalGeneration`` fp32 on the CPU, one photo at a time.

Its own process, on ``REFERENCE_PYTHON``, because its packages must agree with each other (docs/gpu.md): it
imports torch, transformers and the project's captioning code only (no tritonclient, no ONNX Runtime session).
"""

from __future__ import annotations

import importlib.metadata as metadata
import json
import sys
from pathlib import Path

import numpy as np

PROJECT_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT_ROOT))  # run as a script, by an interpreter that may not have the checkout on its path

from pipeline_src.model_build.hf_captioner import HuggingFaceCaptioner  # noqa: E402


def reference(request: dict) -> dict:
    captioner = HuggingFaceCaptioner.load(request["snapshot"], request["max_new_tokens"], request["repetition_penalty"])
    pixels = np.load(request["pixels"])
    captions = [captioner.caption(pixels[row : row + 1], [prompt])[0] for row, prompt in request["prompts"]]
    versions = {name: metadata.version(name) for name in ("numpy", "torch", "transformers")}
    return {"captions": captions, "python": sys.executable, "versions": versions}


def main(argv: list[str] | None = None) -> None:
    request_file, answer_file = map(Path, argv if argv is not None else sys.argv[1:])
    answer_file.write_text(json.dumps(reference(json.loads(request_file.read_text()))))


if __name__ == "__main__":
    main()
