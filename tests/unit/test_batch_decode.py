"""The preprocess step's batch decoder: threads change nothing but speed; a bad photo refuses its request alone."""

import numpy as np
import pytest
from helpers import encode, gradient

from pipeline_src.steps.batch_decode import BatchDecoder
from pipeline_src.steps.imaging import image_tensors

CAP = 40_000_000


@pytest.fixture
def photos():
    return [encode(gradient(64 + 16 * index, 48), fmt) for index, fmt in enumerate(["JPEG", "PNG", "WEBP", "JPEG"])]


@pytest.mark.parametrize("threads", [1, 3])
def test_each_request_gets_its_own_photos_tensors_in_order(photos, threads):
    decoder = BatchDecoder(CAP, threads)
    try:
        first, second = decoder.decode([photos[:1], photos[1:]])
    finally:
        decoder.close()
    assert first.error is None and second.error is None
    assert first.classifier.shape == (1, 3, 224, 224) and second.captioner.shape == (3, 3, 384, 384)
    for row, photo in enumerate(photos[1:]):
        expected = image_tensors(photo, CAP)
        np.testing.assert_array_equal(second.classifier[row], expected.classifier)
        np.testing.assert_array_equal(second.captioner[row], expected.captioner)


def test_a_bad_photo_refuses_its_request_and_names_it(photos):
    decoder = BatchDecoder(CAP, 2)
    try:
        good, bad = decoder.decode([photos[:2], [photos[0], b"not an image"]])
    finally:
        decoder.close()
    assert good.error is None and good.classifier.shape[0] == 2
    assert bad.classifier is None
    assert bad.error.startswith("image 2 of 2: cannot decode")


def test_zero_threads_means_one_per_available_core():
    decoder = BatchDecoder(CAP, 0)
    decoder.close()
    assert decoder.threads >= 1
