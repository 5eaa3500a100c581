"""Hugging Face fp32 reference captions made ahead on another machine and carried to the GPU box with the staged
files (docs/gpu.md), so that its scarce minutes measure rather than recompute them. Each is keyed by everything
that makes it (BLIP's weight files, the photo's pixels as the preprocess step made them, the prompt, the
generation settings): where a key differs there, that caption is computed there, so a carried reference can only
save time, never stand for another one.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path

import numpy as np

WEIGHT_SUFFIXES = (".safetensors", ".bin")


def weights_sha256(snapshot: Path) -> str:
    """One hash of the snapshot's weight files, names included."""
    digest = hashlib.sha256()
    for path in sorted(p for p in snapshot.rglob("*") if p.is_file() and p.suffix in WEIGHT_SUFFIXES):
        digest.update(path.relative_to(snapshot).as_posix().encode())
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(2**20), b""):
                digest.update(block)
    return digest.hexdigest()


def caption_key(weights: str, pixels: np.ndarray, prompt: str, max_new_tokens: int, repetition_penalty: float) -> str:
    digest = hashlib.sha256()
    digest.update(weights.encode())
    digest.update(str((pixels.dtype.str, pixels.shape)).encode())
    digest.update(np.ascontiguousarray(pixels).tobytes())
    digest.update(json.dumps([prompt, max_new_tokens, repetition_penalty]).encode())
    return digest.hexdigest()


def write(path: Path, captions: Mapping[str, str], made: Mapping[str, str]) -> None:
    """``captions`` by key, and where and how they were made (``made``: commit, machine, versions)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"made": dict(made), "captions": dict(captions)}, indent=1) + "\n")


def load(path: Path | None) -> dict[str, str]:
    """The captions by key; none where no file is given."""
    return json.loads(path.read_text())["captions"] if path else {}
