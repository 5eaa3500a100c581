"""The pipeline's steps run in this process, with no server: the offline limit a server is measured
against, and the building block of the course-style baseline. Same model files, same settings
(read from the repository's configs), same code as the Triton steps."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TypeVar

import numpy as np

from pipeline_src.repository.loading import parse_config
from pipeline_src.steps.captioning import GreedyCaptioner, standin_info
from pipeline_src.steps.classification import plan_captions, softmax
from pipeline_src.steps.imaging import image_tensors
from pipeline_src.steps.onnx_runtime import OnnxModel
from pipeline_src.steps.precision import PrecisionChoice
from pipeline_src.steps.settings import (
    CaptionerSettings,
    CaptionWithLabelSettings,
    ClassifierSettings,
    PreprocessSettings,
    StepSettings,
    VisionEncoderSettings,
)

Settings = TypeVar("Settings", bound=StepSettings)


def step_settings(repository: Path, model: str, kind: type[Settings]) -> Settings:
    """A step's typed settings, read from its config.pbtxt as the step itself reads them (a config naming
    another settings class is refused)."""
    config = parse_config(repository / model / "config.pbtxt")
    return kind.from_parameters({key: value.string_value for key, value in config.parameters.items()})


def blip_description(repository: Path) -> str:
    """Which BLIP the repository's captioner runs, as the reports name it: a stand-in (its size) or the real one."""
    settings = step_settings(repository, "captioner", CaptionerSettings)
    standin = standin_info(repository / "captioner" / "1" / settings.model_dir)
    return f"BLIP stand-in {standin['size']} (random weights)" if standin else "BLIP (real weights)"


def _precision(choice: PrecisionChoice | None) -> str:
    return choice.precision if choice is not None else "fp32"


@dataclass(frozen=True)
class Answer:
    label: str
    probability: float
    caption: str


class OnnxBlip:
    """The pipeline's captioning in this process: the vision encoder step, then the captioner step."""

    def __init__(self, repository: Path, vision_settings, captioner_settings):
        self.vision = OnnxModel.from_settings(vision_settings, repository / "vision_encoder" / "1")
        self.captioner = GreedyCaptioner.from_settings(captioner_settings, repository / "captioner" / "1")
        self.precision = (
            f"vision encoder {_precision(self.vision.choice)}, text decoder {_precision(self.captioner.choice)}"
        )

    def caption(self, pixel_values: np.ndarray, prompts: Sequence[str]) -> list[str]:
        return self.captioner.caption(self.vision(pixel_values), prompts)


class InProcessPipeline:
    """preprocess -> classifier -> label and prompt -> captioner, as plain function calls. ``course=True``
    captions the course's way instead (Hugging Face BLIP fp32 ``generate``, one photo at a time)."""

    def __init__(self, repository: Path, course: bool = False):
        self.repository = repository
        self.course = course
        self.preprocess_settings = step_settings(repository, "preprocess", PreprocessSettings)
        classifier = step_settings(repository, "classifier", ClassifierSettings)
        self.labelling = step_settings(repository, "caption_with_label", CaptionWithLabelSettings)
        self.vision_settings = step_settings(repository, "vision_encoder", VisionEncoderSettings)
        self.captioner_settings = step_settings(repository, "captioner", CaptionerSettings)
        self.captioner_snapshot = repository / "captioner" / "1" / self.captioner_settings.model_dir  # BLIP's
        self.classifier = OnnxModel.from_settings(classifier, repository / "classifier" / "1")

    @cached_property
    def captioner(self):
        """Loaded on first use: making inputs for the other steps does not need BLIP."""
        if self.course:
            from pipeline_src.model_build.hf_captioner import HuggingFaceCaptioner

            return HuggingFaceCaptioner.load(self.captioner_snapshot, self.captioner_settings.max_new_tokens)
        return OnnxBlip(self.repository, self.vision_settings, self.captioner_settings)

    def preprocess(self, photos: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray]:
        tensors = [image_tensors(photo, self.preprocess_settings.max_pixels) for photo in photos]
        return np.stack([t.classifier for t in tensors]), np.stack([t.captioner for t in tensors])

    def prompts(self, logits: np.ndarray) -> tuple[list, list[str]]:
        plans = plan_captions(softmax(logits), self.labelling.prompt_template, self.labelling.confidence_threshold)
        return plans.predictions, plans.prompts

    def __call__(self, photos: Sequence[bytes]) -> list[Answer]:
        classifier_pixels, captioner_pixels = self.preprocess(photos)
        predictions, prompts = self.prompts(self.classifier(classifier_pixels))
        captions = self.captioner.caption(captioner_pixels, prompts)
        return [Answer(p.label, p.probability, c) for p, c in zip(predictions, captions)]

    def step_seconds(self, photo: bytes, repeats: int = 3) -> dict[str, float]:
        """Each step's compute time for one photo (batch 1), best of ``repeats``."""
        classifier_pixels, captioner_pixels = self.preprocess([photo])
        logits = self.classifier(classifier_pixels)
        _, prompts = self.prompts(logits)
        return {
            "preprocess": best_seconds(lambda: self.preprocess([photo]), repeats),
            "classifier": best_seconds(lambda: self.classifier(classifier_pixels), repeats),
            "label_and_prompt": best_seconds(lambda: self.prompts(logits), repeats),
            "captioner": best_seconds(lambda: self.captioner.caption(captioner_pixels, prompts), repeats),
        }


def best_seconds(work: Callable[[], object], repeats: int) -> float:
    """The fastest of ``repeats`` timed runs, after one untimed warm-up run."""
    work()
    timings = []
    for _ in range(repeats):
        started = time.perf_counter()
        work()
        timings.append(time.perf_counter() - started)
    return min(timings)
