"""Decode raw image bytes once and build both model tensors from the one decoded image."""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

ACCEPTED_FORMATS = frozenset({"JPEG", "PNG", "WEBP", "BMP", "GIF", "MPO"})  # MPO: multi-picture JPEG
# The only parsers Image.open may run on an upload. Without this it tries every plugin Pillow has (EPS,
# PSD, FITS, ...) before the format check, and their bugs are reachable: Pillow 12.0.0's EPS parser loops
# forever on a 96-byte header (tests/integration/test_bad_input.py). MPO opens through the JPEG plugin.
OPENED_FORMATS = sorted(ACCEPTED_FORMATS - {"MPO"})

CLASSIFIER_SIZE = 224
IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)

# BLIP's image processor: 384x384 bicubic resize (no crop), CLIP mean/std.
CAPTIONER_SIZE = 384
CLIP_MEAN = np.array([0.48145466, 0.4578275, 0.40821073], dtype=np.float32)
CLIP_STD = np.array([0.26862954, 0.26130258, 0.27577711], dtype=np.float32)


class ImageRejected(ValueError):
    """The bytes are not an image this pipeline accepts; the message says why."""


@dataclass(frozen=True)
class ImageTensors:
    classifier: np.ndarray  # float32 [3, 224, 224], ImageNet-normalised
    # uint8 [3, 384, 384]: resized, not normalised. The vision encoder's graph normalises it (CLIP mean/std), bit
    # for bit as normalise_captioner does: a quarter of the bytes through the steps' shared memory.
    captioner: np.ndarray


def decode_rgb(data: bytes, max_pixels: int) -> Image.Image:
    """Decode ``data`` into an upright RGB image, refusing oversized images before decoding pixels."""
    if not data:
        raise ImageRejected("empty image: the request carried zero bytes")
    try:
        image = Image.open(io.BytesIO(data), formats=OPENED_FORMATS)  # reads the header only
    except Image.DecompressionBombError as exc:
        raise ImageRejected(f"image refused as a decompression bomb: {exc}") from exc
    except UnidentifiedImageError as exc:
        raise ImageRejected("cannot decode: not a JPEG, PNG, WebP, BMP or GIF image") from exc
    except (OSError, SyntaxError, ValueError) as exc:  # Pillow's errors for a damaged header
        raise ImageRejected(f"cannot decode the image header: {exc}") from exc
    if image.format not in ACCEPTED_FORMATS:
        raise ImageRejected(f"unsupported image format {image.format}; send JPEG, PNG, WebP, BMP or GIF")
    width, height = image.size
    if width * height > max_pixels:
        raise ImageRejected(f"image of {width}x{height} pixels exceeds the cap of {max_pixels} pixels")
    # JPEG only: let libjpeg decode at a reduced scale that still covers the captioner's size.
    image.draft("RGB", (CAPTIONER_SIZE, CAPTIONER_SIZE))
    try:
        image.load()  # GIF and WebP: the first frame
    except (OSError, SyntaxError, ValueError) as exc:
        raise ImageRejected(f"cannot decode {image.format} image: {exc}") from exc
    try:
        upright = ImageOps.exif_transpose(image)
    except (OSError, SyntaxError, ValueError) as exc:  # a damaged EXIF block: its orientation is unknowable
        raise ImageRejected(f"cannot read the image's EXIF orientation: {exc}") from exc
    return _to_rgb(upright)


def _to_rgb(image: Image.Image) -> Image.Image:
    if image.mode == "RGB":
        return image
    if image.mode.startswith("I;16") or image.mode in ("I", "F"):
        # 16/32-bit greyscale: scale to 8 bits instead of clipping everything above 255 to white.
        pixels = np.asarray(image, dtype=np.float32)
        peak = float(pixels.max()) or 1.0
        image = Image.fromarray((pixels * (255.0 / peak)).astype(np.uint8), mode="L")
    if image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info):
        # Transparent pixels become white, as an image viewer shows them, not black.
        rgba = image.convert("RGBA")
        background = Image.new("RGB", rgba.size, (255, 255, 255))
        background.paste(rgba, mask=rgba.getchannel("A"))
        return background
    return image.convert("RGB")


def classifier_tensor(image: Image.Image, size: int = CLASSIFIER_SIZE) -> np.ndarray:
    """torchvision's Resize(size) + CenterCrop(size) + ImageNet Normalize, as float32 CHW."""
    width, height = image.size
    new_size = (size, int(size * height / width)) if width <= height else (int(size * width / height), size)
    resized = image.resize(new_size, Image.Resampling.BILINEAR)
    left = round((new_size[0] - size) / 2.0)
    top = round((new_size[1] - size) / 2.0)
    cropped = resized.crop((left, top, left + size, top + size))
    pixels = _normalise(np.asarray(cropped, dtype=np.float32), IMAGENET_MEAN, IMAGENET_STD)  # HWC
    return np.ascontiguousarray(pixels.transpose(2, 0, 1))


def captioner_tensor(image: Image.Image, size: int = CAPTIONER_SIZE) -> np.ndarray:
    """BLIP's preprocessing up to its normalisation: bicubic resize to size x size, uint8 CHW (the vision encoder
    rescales and normalises: ``normalise_captioner``)."""
    resized = image.resize((size, size), Image.Resampling.BICUBIC)
    return np.ascontiguousarray(np.asarray(resized, dtype=np.uint8).transpose(2, 0, 1))


def normalise_captioner(pixels: np.ndarray) -> np.ndarray:
    """uint8 ``[..., 3, H, W]`` -> BLIP's float32 input: rescale, CLIP Normalize. What the vision encoder's graph
    computes first, operation for operation (its bits: tests/unit/test_captioning.py); for Hugging Face's BLIP,
    which takes normalised pixels."""
    return _normalise(pixels.astype(np.float32), CLIP_MEAN[:, None, None], CLIP_STD[:, None, None])


def _normalise(pixels: np.ndarray, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    """The one formula, in float32: rescale to [0, 1], subtract the mean, divide by the std."""
    return (pixels * np.float32(1.0 / 255.0) - mean) / std


def image_tensors(data: bytes, max_pixels: int) -> ImageTensors:
    """Decode once, then derive both tensors from the same decoded image."""
    image = decode_rgb(data, max_pixels)
    return ImageTensors(classifier=classifier_tensor(image), captioner=captioner_tensor(image))
