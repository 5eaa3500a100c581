"""How closely the captioner's ONNX graphs follow Hugging Face's fp32 BLIP, measured by the build on its
check photos: greedy captions (identical or not) and teacher-forced agreement (the graphs fed the
reference's own tokens: does each next-token choice agree, and how far apart are the logits).

Teacher forcing measures every token on the same history, so one early difference does not hide how
the rest would have gone, as comparing final strings alone would.
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import tokenizers
import torch
from PIL import Image, ImageOps

from pipeline_src import PROJECT_ROOT
from pipeline_src.model_build.hf_captioner import HuggingFaceCaptioner
from pipeline_src.steps.captioning import TOKENIZER_FILE, GreedyCaptioner
from pipeline_src.steps.imaging import image_tensors, normalise_captioner
from pipeline_src.steps.onnx_runtime import OnnxModel
from pipeline_src.steps.text_decoder import TextDecoder

CHECK_PHOTOS = PROJECT_ROOT / "tests" / "photos"
CHECK_PROMPTS = ("a photo of vegetable/fruit,", "", "a photo of bread,", "a photo of noodles/pasta,")
# fp32 graphs must reproduce generate: same tokens, and logits within this relative error (measured ~1e-6).
FP32_MAX_RELATIVE_ERROR = 1e-4


class FidelityError(RuntimeError):
    """The fp32 graphs do not reproduce Hugging Face's fp32 generate."""


def check_pixels(count: int = 8) -> np.ndarray:
    """``count`` captioner inputs [count, 3, 384, 384] (uint8) from the repository's photos, their mirror images and
    centre crops, through the pipeline's own preprocessing."""
    originals = [Image.open(path).convert("RGB") for path in sorted(CHECK_PHOTOS.glob("*.jpg"))]
    images = [
        *originals,
        *(ImageOps.mirror(image) for image in originals),
        *(ImageOps.crop(image, (image.width // 6, image.height // 6)) for image in originals),
    ]
    tensors = []
    for image in images[:count]:
        buffer = io.BytesIO()
        image.save(buffer, "PNG")  # lossless: the pixels above, decoded as the server decodes an upload
        tensors.append(image_tensors(buffer.getvalue(), 40_000_000).captioner)
    return np.stack(tensors)


def check_prompts(count: int = 8) -> list[str]:
    return [CHECK_PROMPTS[index % len(CHECK_PROMPTS)] for index in range(count)]


@dataclass
class Reference:
    """Hugging Face fp32 on the check inputs: generate's new tokens, and the logits that chose them."""

    prompt_ids: list[list[int]]
    tokens: list[list[int]]
    logits: list[np.ndarray]  # per row: [len(tokens), vocab]


@torch.inference_mode()
def hf_reference(blip, prompt_ids: Sequence[Sequence[int]], pixels: np.ndarray, max_new_tokens: int) -> Reference:
    """One image at a time, as the course runs it: ``generate`` (greedy), then one forward pass over prompt
    and caption for the logits at each chosen token."""
    course = HuggingFaceCaptioner(blip, tokenizer=None, max_new_tokens=max_new_tokens)
    tokens, logits = [], []
    for row, ids in enumerate(prompt_ids):
        new = course.new_tokens(pixels[row], ids)
        embeds = course.model.vision_model(pixel_values=torch.from_numpy(normalise_captioner(pixels[row : row + 1])))[0]
        scores = course.model.text_decoder(
            input_ids=torch.tensor([[*ids, *new]]), encoder_hidden_states=embeds, is_decoder=True
        ).logits[0]
        tokens.append(new)
        logits.append(scores[len(ids) - 1 : len(ids) - 1 + len(new)].numpy())
    return Reference([list(ids) for ids in prompt_ids], tokens, logits)


def measure(
    reference: Reference, vision: OnnxModel, decoder: TextDecoder, pixels: np.ndarray, max_new_tokens: int
) -> dict:
    """The graphs against the reference: greedy captions generated as one batch (so batching is part of
    what is checked), and teacher-forced top-1 agreement and relative logit error, row by row."""
    embeds = vision(pixels)
    greedy = GreedyCaptioner(decoder, tokenizer=None, max_new_tokens=max_new_tokens).generate(
        embeds, reference.prompt_ids
    )
    agree = total = 0
    worst = 0.0
    for ours, _, theirs in teacher_forced(reference, decoder, embeds, max_new_tokens):
        agree += int(ours.argmax() == theirs.argmax())
        total += 1
        worst = max(worst, float(np.abs(ours - theirs).max() / np.abs(theirs).max()))
    return {
        "captions_identical": sum(ours == theirs for ours, theirs in zip(greedy, reference.tokens)),
        "captions": len(reference.tokens),
        "teacher_forced_top1": agree / total,
        "teacher_forced_tokens": total,
        "max_relative_logit_error": worst,
    }


def teacher_forced(
    reference: Reference, decoder: TextDecoder, embeds: np.ndarray, max_new_tokens: int
) -> Iterator[tuple[np.ndarray, int, np.ndarray]]:
    """At each position of each reference caption, the decoder fed the reference's own tokens before it: its logits
    there, the token the reference chose, and the reference's logits."""
    for row, (ids, tokens, expected) in enumerate(zip(reference.prompt_ids, reference.tokens, reference.logits)):
        logits, state = decoder.prefill(embeds[row : row + 1], [ids], max_new_tokens)
        for position, token in enumerate(tokens):
            yield logits[0], token, expected[position]
            if position + 1 < len(tokens):
                logits = decoder.advance(state, np.array([token]))


def require_same_tokenizer(
    written: tokenizers.Tokenizer,
    snapshot_tokenizer,
    prompts: Sequence[str],
    generations: Sequence[Sequence[int]],
    what: str,
) -> None:
    """The tokenizer file the step reads encodes ``prompts`` and decodes ``generations`` as the snapshot's
    transformers tokenizer does, or the build stops with the first difference."""
    for prompt in prompts:
        ours, theirs = written.encode(prompt).ids, snapshot_tokenizer(prompt).input_ids
        if ours != theirs:
            raise FidelityError(f"{what}: {TOKENIZER_FILE} encodes {prompt!r} as {ours}, transformers as {theirs}")
    our_texts = written.decode_batch([list(tokens) for tokens in generations], skip_special_tokens=True)
    their_texts = snapshot_tokenizer.batch_decode(generations, skip_special_tokens=True)
    for tokens, mine, expected in zip(generations, our_texts, their_texts):
        if mine != expected:
            raise FidelityError(
                f"{what}: {TOKENIZER_FILE} decodes {list(tokens)} as {mine!r}, transformers as {expected!r}"
            )


def require_exact(figures: dict, what: str) -> None:
    """The fp32 graphs reproduce generate, or the build stops with the figures."""
    if (
        figures["captions_identical"] != figures["captions"]
        or figures["teacher_forced_top1"] != 1.0
        or figures["max_relative_logit_error"] > FP32_MAX_RELATIVE_ERROR
    ):
        raise FidelityError(
            f"{what}: the fp32 ONNX graphs do not reproduce Hugging Face's fp32 generate: "
            f"{figures['captions_identical']} of {figures['captions']} captions identical, teacher-forced top-1 "
            f"agreement {figures['teacher_forced_top1']:.4f}, max relative logit error "
            f"{figures['max_relative_logit_error']:.2e} (allowed {FP32_MAX_RELATIVE_ERROR:.0e})"
        )
