"""Property-based fuzz of the decode step on mutated real photos: it returns both tensors, well formed,
or refuses with its own ImageRejected; never another exception, never slower than a bound."""

import io
import time

import numpy as np
import pytest
from helpers import FRUIT_PHOTOS, PHOTOS_DIR, encode
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from pipeline_src.steps.imaging import ImageRejected, image_tensors

MAX_PIXELS = 40_000_000  # preprocess's default cap
# Decoding a valid photo here takes ~10-60 ms; 2 s leaves room for a loaded CI machine while still
# catching what matters: a mutation that makes the decoder loop or balloon.
DECODE_BOUND_S = 2.0


def seed_files() -> list[bytes]:
    """The real photos as JPEG, and one re-encoded as PNG, GIF and WebP, so every decoder is fuzzed."""
    jpegs = [(PHOTOS_DIR / name).read_bytes() for name in FRUIT_PHOTOS]
    small = Image.open(io.BytesIO(jpegs[0])).convert("RGB").resize((96, 72))
    return jpegs + [encode(small, fmt) for fmt in ("PNG", "GIF", "WEBP")]


SEEDS = seed_files()


@st.composite
def mutated_photos(draw) -> bytes:
    data = bytearray(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "truncate", "splice", "header"]))
        if kind == "flip":  # a few random bytes anywhere
            for _ in range(draw(st.integers(1, 16))):
                data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
        elif kind == "truncate":
            data = data[: draw(st.integers(0, len(data)))]
        elif kind == "splice":  # a piece of another photo pasted in
            other = draw(st.sampled_from(SEEDS))
            start = draw(st.integers(0, len(other) - 1))
            at = draw(st.integers(0, len(data)))
            data[at:at] = other[start : start + draw(st.integers(1, 4096))]
        else:  # the header after the magic bytes, where sizes and chunk lengths live
            for _ in range(draw(st.integers(1, 4))):
                data[draw(st.integers(min(8, len(data) - 1), min(160, len(data) - 1)))] = draw(st.integers(0, 255))
        if not data:
            break
    return bytes(data)


@settings(
    max_examples=300, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(mutated_photos())
def test_decode_returns_two_tensors_or_refuses_never_anything_else(data):
    started = time.perf_counter()
    try:
        tensors = image_tensors(data, MAX_PIXELS)
    except ImageRejected as rejection:
        assert str(rejection)  # a reason, always
    else:
        assert tensors.classifier.shape == (3, 224, 224) and tensors.classifier.dtype == np.float32
        assert np.isfinite(tensors.classifier).all()
        assert tensors.captioner.shape == (3, 384, 384) and tensors.captioner.dtype == np.uint8  # normalised later
    assert time.perf_counter() - started < DECODE_BOUND_S


@pytest.mark.parametrize("seed", range(len(SEEDS)))
def test_every_seed_decodes_unmutated(seed):
    """The fuzz starts from valid files: if a seed were refused, mutations of it would prove little."""
    assert image_tensors(SEEDS[seed], MAX_PIXELS).classifier.shape == (3, 224, 224)
