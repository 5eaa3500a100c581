"""Small builders of image bytes for tests."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
from PIL import Image


def encode(image: Image.Image, fmt: str, **options) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return buffer.getvalue()


def gradient(width: int = 64, height: int = 48) -> Image.Image:
    """An RGB image whose content is not symmetric, so rotations and crops are detectable."""
    x = np.linspace(0, 255, width, dtype=np.float32)[None, :]
    y = np.linspace(0, 255, height, dtype=np.float32)[:, None]
    red = np.broadcast_to(x, (height, width))
    green = np.broadcast_to(y, (height, width))
    blue = np.full((height, width), 64, dtype=np.float32)
    return Image.fromarray(np.stack([red, green, blue], axis=-1).astype(np.uint8))


def png_header_only(width: int, height: int) -> bytes:
    """A PNG whose header claims width x height but carries almost no pixel data (a decompression-bomb
    shape): refusing it must not need decoding it."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\x00" * 64)) + chunk(b"IEND", b"")
