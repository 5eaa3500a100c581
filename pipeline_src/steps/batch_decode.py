"""Decode a batch's photos on several cores at once: Pillow and numpy release the GIL, so one instance's threads
use the cores a batch needs without the memory and start-up of more instances (measured: docs/gpu.md, "Settings
that matter on a GPU")."""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import accumulate

import numpy as np

from pipeline_src.steps.imaging import CAPTIONER_SIZE, CLASSIFIER_SIZE, ImageRejected, ImageTensors, image_tensors


@dataclass(frozen=True)
class RequestPixels:
    """One request's photos as both models' tensors, or why the request is refused."""

    classifier: np.ndarray | None  # float32 [rows, 3, 224, 224]
    captioner: np.ndarray | None  # uint8 [rows, 3, 384, 384]
    error: str | None = None


class BatchDecoder:
    """Decodes every photo of a batch of requests, ``threads`` at a time (0: one per core this process may run on, its
    affinity, as a container's cpuset sets it)."""

    def __init__(self, max_pixels: int, threads: int = 0):
        self.max_pixels = max_pixels
        self.threads = threads or len(os.sched_getaffinity(0))
        self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="decode") if self.threads > 1 else None

    def decode(self, requests: Sequence[Sequence[bytes]]) -> list[RequestPixels]:
        """Each request's photos, decoded in parallel across requests; a bad photo refuses its request alone."""
        photos = [photo for request in requests for photo in request]
        if self._pool is None or len(photos) < 2:
            outcomes = [self._decode_one(photo) for photo in photos]
        else:
            outcomes = list(self._pool.map(self._decode_one, photos))
        ends = accumulate(len(request) for request in requests)  # each request's photos back to it, in order
        return [_assemble(outcomes[end - len(request) : end]) for request, end in zip(requests, ends)]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)

    def _decode_one(self, photo: bytes) -> ImageTensors | ImageRejected:
        try:
            return image_tensors(photo, self.max_pixels)
        except ImageRejected as exc:  # refused per request, after the batch: returned, not raised
            return exc


def _assemble(outcomes: Sequence[ImageTensors | ImageRejected]) -> RequestPixels:
    count = len(outcomes)
    classifier = np.empty((count, 3, CLASSIFIER_SIZE, CLASSIFIER_SIZE), dtype=np.float32)
    captioner = np.empty((count, 3, CAPTIONER_SIZE, CAPTIONER_SIZE), dtype=np.uint8)
    for index, outcome in enumerate(outcomes):
        if isinstance(outcome, ImageRejected):
            return RequestPixels(None, None, f"image {index + 1} of {count}: {outcome}")
        classifier[index], captioner[index] = outcome.classifier, outcome.captioner
    return RequestPixels(classifier, captioner)
