"""perf_analyzer ``--input-data`` files for the ensembles and for each step, from a folder of photos.

Each model gets one JSON file with one entry per photo (perf_analyzer sends them in turn). The step
tensors are what the pipeline itself would pass that step: made by the real preprocessing, the real
ONNX classifier and vision encoder and the real prompt logic, from the same photos. Encodings, as perf_analyzer's
docs/input_data.md gives them: FP32 tensors as base64 of their little-endian bytes; BYTES elements as
base64 of a 4-byte little-endian length followed by the bytes (the form Triton serialises them in).
A model is covered when every one of its inputs is a tensor named here, so an ensemble or a step of
your own that takes ``IMAGE``, ``PROBABILITIES``, ... gets its file too.
"""

from __future__ import annotations

import argparse
import base64
import json
import struct
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from pipeline_src import PROJECT_ROOT
from pipeline_src.profiling.in_process import InProcessPipeline
from pipeline_src.repository.loading import parse_config

PHOTO_SUFFIXES = {".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif"}
DEFAULT_OUTPUT = PROJECT_ROOT / "build" / "perf_input"


def bytes_element(data: bytes) -> dict:
    return {"b64": base64.b64encode(struct.pack("<I", len(data)) + data).decode("ascii")}


def fp32_tensor(array: np.ndarray) -> dict:
    return {"b64": base64.b64encode(np.ascontiguousarray(array, dtype="<f4").tobytes()).decode("ascii")}


def pipeline_tensors(repository: Path, photos: Sequence[bytes]) -> dict[str, list[dict]]:
    """Every tensor the pipeline passes, per photo, in perf_analyzer's encoding, by tensor name."""
    pipeline = InProcessPipeline(repository)
    classifier_pixels, captioner_pixels = pipeline.preprocess(photos)
    logits = pipeline.classifier(classifier_pixels)
    predictions, prompts = pipeline.prompts(logits)
    image_embeds = pipeline.captioner.vision(captioner_pixels)
    per_photo = {
        "IMAGE": [{"content": bytes_element(photo), "shape": [1]} for photo in photos],
        "input": [{"content": fp32_tensor(pixels), "shape": list(pixels.shape)} for pixels in classifier_pixels],
        "LOGITS": [{"content": fp32_tensor(row), "shape": list(row.shape)} for row in logits],
        "PROBABILITIES": [
            {"content": fp32_tensor(p.probabilities), "shape": [len(p.probabilities)]} for p in predictions
        ],
        "pixel_values": [{"content": fp32_tensor(pixels), "shape": list(pixels.shape)} for pixels in captioner_pixels],
        "IMAGE_EMBEDS": [{"content": fp32_tensor(embeds), "shape": list(embeds.shape)} for embeds in image_embeds],
        "PROMPT": [{"content": bytes_element(prompt.encode("utf-8")), "shape": [1]} for prompt in prompts],
    }
    return per_photo


def model_inputs(repository: Path) -> dict[str, list[str]]:
    """Each model of the repository and the names of its inputs."""
    inputs = {}
    for config_file in sorted(repository.glob("*/config.pbtxt")):
        config = parse_config(config_file)
        inputs[config.name] = [tensor.name for tensor in config.input]
    return inputs


def write_input_data(repository: Path, photos: Sequence[bytes], output_dir: Path) -> dict[str, Path]:
    """One ``<model>.json`` per model whose inputs are all pipeline tensors; returns model -> file."""
    tensors = pipeline_tensors(repository, photos)
    output_dir.mkdir(parents=True, exist_ok=True)
    written = {}
    for model, names in model_inputs(repository).items():
        if not names or not set(names) <= set(tensors):
            continue
        entries = [{name: tensors[name][index] for name in names} for index in range(len(photos))]
        path = output_dir / f"{model}.json"
        path.write_text(json.dumps({"data": entries}))
        written[model] = path
    return written


def read_photos(folder: Path) -> list[bytes]:
    files = sorted(path for path in folder.iterdir() if path.suffix.lower() in PHOTO_SUFFIXES)
    if not files:
        raise SystemExit(f"no photos ({', '.join(sorted(PHOTO_SUFFIXES))}) in {folder}")
    return [path.read_bytes() for path in files]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "photos",
        type=Path,
        nargs="?",
        default=PROJECT_ROOT / "tests" / "photos",
        help="a folder of photos (default: %(default)s)",
    )
    parser.add_argument(
        "--repository",
        type=Path,
        default=PROJECT_ROOT / "model_repository",
        help="a built model repository: its configs and classifier (default: %(default)s)",
    )
    parser.add_argument("--output-dir", type=Path, default=DEFAULT_OUTPUT, help="default: %(default)s")
    args = parser.parse_args(argv)
    written = write_input_data(args.repository, read_photos(args.photos), args.output_dir)
    for model, path in written.items():
        print(f"{model}: {path}")


if __name__ == "__main__":
    main()
