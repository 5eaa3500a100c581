"""The photos every benchmark uses: real photos, plus crops and rescalings of them when more are asked
for, so each has its own pixels (and its own probability)."""

from __future__ import annotations

import io

from PIL import Image

from pipeline_src import PROJECT_ROOT

TEST_PHOTOS = PROJECT_ROOT / "tests" / "photos"
FRUIT_PHOTOS = ("apple.jpg", "orange.jpg", "fruits.jpg")
SKIMAGE_PHOTOS = ("coffee", "chelsea", "astronaut")


def _jpeg(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.convert("RGB").save(buffer, "JPEG", quality=90)
    return buffer.getvalue()


def base_photos() -> list[bytes]:
    """OpenCV's three fruit photos (JPEG files in tests/photos) and scikit-image's three photos as JPEG."""
    import skimage.data  # a test and bench dependency only

    photos = [(TEST_PHOTOS / name).read_bytes() for name in FRUIT_PHOTOS]
    photos += [_jpeg(Image.fromarray(getattr(skimage.data, name)())) for name in SKIMAGE_PHOTOS]
    return photos


def varied_photos(count: int) -> list[bytes]:
    """``count`` distinct JPEGs: the base photos first, then crops of a shrinking centre at several scales."""
    originals = base_photos()
    photos = list(originals[:count])
    variant = 0
    while len(photos) < count:
        source = Image.open(io.BytesIO(originals[variant % len(originals)]))
        keep = 0.9 - 0.05 * (variant // len(originals) % 8)  # 90 %, 85 %, ... of each side
        width, height = source.size
        left, top = int(width * (1 - keep) / 2), int(height * (1 - keep) / 2)
        crop = source.crop((left, top, width - left, height - top))
        scale = (1.0, 0.75, 0.5)[variant % 3]
        photos.append(_jpeg(crop.resize((max(32, int(crop.width * scale)), max(32, int(crop.height * scale))))))
        variant += 1
    return photos
