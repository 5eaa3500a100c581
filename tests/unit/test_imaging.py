"""Decoding once, refusing bad images, and both tensors as the models expect them."""

import io

import numpy as np
import pytest
from helpers import APPLE, encode, gradient, png_header_only
from PIL import Image

from pipeline_src.steps.imaging import (
    ImageRejected,
    captioner_tensor,
    classifier_tensor,
    decode_rgb,
    image_tensors,
    normalise_captioner,
)

CAP = 40_000_000


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "WEBP", "BMP", "GIF"])
def test_every_accepted_format_decodes_to_rgb(fmt):
    image = decode_rgb(encode(gradient(64, 48), fmt), CAP)
    assert image.mode == "RGB"
    assert image.size == (64, 48)


def test_gif_uses_its_first_frame():
    frames = [Image.new("RGB", (16, 16), color) for color in ((255, 0, 0), (0, 0, 255))]
    buffer = io.BytesIO()
    frames[0].save(buffer, "GIF", save_all=True, append_images=frames[1:])
    red, _green, blue = decode_rgb(buffer.getvalue(), CAP).getpixel((8, 8))
    assert red > 200 and blue < 50


def test_exif_orientation_is_applied():
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90 CW to display"
    data = encode(gradient(64, 48), "JPEG", exif=exif.tobytes())
    assert decode_rgb(data, CAP).size == (48, 64)


@pytest.mark.parametrize("mode", ["L", "LA", "P", "RGBA", "CMYK", "I;16", "1"])
def test_any_mode_becomes_rgb(mode):
    source = (
        gradient().convert(mode)
        if mode != "I;16"
        else Image.fromarray(np.arange(64 * 48, dtype=np.uint16).reshape(48, 64) * 20)
    )
    fmt = "JPEG" if mode == "CMYK" else "PNG"
    image = decode_rgb(encode(source, fmt), CAP)
    assert image.mode == "RGB" and image.size == (64, 48)


def test_sixteen_bit_greyscale_is_scaled_not_clipped():
    pixels = np.linspace(0, 60000, 64 * 48).astype(np.uint16).reshape(48, 64)
    image = decode_rgb(encode(Image.fromarray(pixels), "PNG"), CAP)
    values = np.asarray(image)[..., 0]
    assert values.max() == 255 and values.min() == 0
    assert len(np.unique(values)) > 200  # clipping would leave almost everything at 255


def test_transparent_pixels_become_white():
    rgba = Image.new("RGBA", (8, 8), (255, 0, 0, 0))
    assert decode_rgb(encode(rgba, "PNG"), CAP).getpixel((4, 4)) == (255, 255, 255)


@pytest.mark.parametrize(
    "data, reason",
    [
        (b"", "empty image"),
        (b"this is not an image at all", "cannot decode"),
        (encode(gradient(), "JPEG")[:200], "cannot decode the image header"),
        (APPLE[: len(APPLE) // 2], "cannot decode JPEG image"),
        (encode(gradient(), "TIFF"), "cannot decode: not a JPEG"),  # Pillow's TIFF parser never runs
    ],
)
def test_bad_bytes_are_rejected_with_the_reason(data, reason):
    with pytest.raises(ImageRejected, match=reason):
        decode_rgb(data, CAP)


def test_damaged_exif_is_refused_with_the_reason_not_a_crash():
    """Found by the decode fuzz: a flipped byte in the EXIF block's TIFF header made Pillow raise
    SyntaxError from inside exif_transpose, past the step's own rejection."""
    magic = APPLE.index(b"MM\x00*")  # the EXIF block's big-endian TIFF header
    damaged = APPLE[:magic] + b"\x00M" + APPLE[magic + 2 :]
    with pytest.raises(ImageRejected, match="cannot read the image's EXIF orientation: not a TIFF file"):
        decode_rgb(damaged, CAP)


def test_pixel_cap_refuses_before_decoding():
    # 8000 x 8000 = 64 MP claims more than the 40 MP cap; the file itself holds almost nothing.
    with pytest.raises(ImageRejected, match="8000x8000 pixels exceeds the cap of 40000000"):
        decode_rgb(png_header_only(8000, 8000), CAP)


def test_decompression_bomb_beyond_pillows_own_limit_is_rejected():
    with pytest.raises(ImageRejected, match="decompression bomb"):
        decode_rgb(png_header_only(100_000, 100_000), 10**12)


def test_classifier_tensor_equals_torchvision_transforms(photos):
    from torchvision import transforms

    image = decode_rgb(photos["coffee.png"], CAP)
    reference = transforms.Compose(
        [
            transforms.Resize(224),
            transforms.CenterCrop(224),
            transforms.ToTensor(),
            transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
        ]
    )(image).numpy()
    np.testing.assert_allclose(classifier_tensor(image), reference, atol=1e-5)


def test_captioner_tensor_matches_blips_image_processor(photos):
    from transformers import BlipImageProcessor

    image = decode_rgb(photos["astronaut.webp"], CAP)
    reference = BlipImageProcessor()(image, return_tensors="np")["pixel_values"][0]
    ours = normalise_captioner(captioner_tensor(image))  # uint8 from the step; the vision graph normalises
    assert ours.shape == reference.shape == (3, 384, 384)
    # Both resize bicubically; they differ by rounding to 8 bits (one level is ~0.015 here).
    assert np.abs(ours - reference).max() < 0.035
    assert np.abs(ours - reference).mean() < 1e-3


def test_large_jpeg_is_decoded_at_reduced_scale_but_still_covers_both_sizes():
    data = encode(gradient(4000, 3000), "JPEG")
    image = decode_rgb(data, CAP)
    assert image.size[1] >= 384 and image.size[0] < 4000  # libjpeg's DCT scaling did the downsizing
    tensors = image_tensors(data, CAP)
    assert tensors.classifier.shape == (3, 224, 224) and tensors.classifier.dtype == np.float32
    assert tensors.captioner.shape == (3, 384, 384) and tensors.captioner.dtype == np.uint8
