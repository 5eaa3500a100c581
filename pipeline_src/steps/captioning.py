"""BLIP conditional captioning: one batched ``generate`` for many images, each with its own prompt."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from transformers import BlipForConditionalGeneration, BlipProcessor

STANDIN_MARKER = "STAND_IN.json"  # present only in a stand-in snapshot built by scripts/build_models.py


def standin_info(model_dir: str | Path) -> dict | None:
    """The stand-in's description if ``model_dir`` holds a random-weights stand-in, else None."""
    marker = Path(model_dir) / STANDIN_MARKER
    return json.loads(marker.read_text()) if marker.exists() else None


class BlipCaptioner:
    """Wraps a local BLIP snapshot (``save_pretrained`` layout: model + processor files)."""

    def __init__(self, model_dir: str, device: str = "cpu", fp16: bool = False, **generation):
        self.device = torch.device(device)
        self.dtype = torch.float16 if fp16 and self.device.type == "cuda" else torch.float32
        self.tokenizer = BlipProcessor.from_pretrained(model_dir).tokenizer
        # Left padding: BLIP's generate drops each row's last token ([SEP]), so the prompts must end
        # in the same column; generate derives position ids from the attention mask.
        self.tokenizer.padding_side = "left"
        self.model = BlipForConditionalGeneration.from_pretrained(model_dir, dtype=self.dtype)
        self.model.to(self.device).eval()
        self.generation = {"do_sample": False, **generation}

    @torch.inference_mode()
    def caption(self, pixel_values: np.ndarray, prompts: Sequence[str]) -> list[str]:
        """Captions for a batch of preprocessed images ``[n, 3, 384, 384]``; ``""`` means no prompt."""
        if len(prompts) != len(pixel_values):
            raise ValueError(f"{len(pixel_values)} images but {len(prompts)} prompts")
        text = self.tokenizer(list(prompts), padding=True, return_tensors="pt")
        input_ids = text.input_ids
        # BLIP's decoder starts from [DEC], not [CLS]; generate() would overwrite column 0 only,
        # which for a left-padded row is padding.
        input_ids[input_ids == self.tokenizer.cls_token_id] = self.model.config.text_config.bos_token_id
        pixels = torch.from_numpy(np.ascontiguousarray(pixel_values)).to(self.device, self.dtype)
        output_ids = self.model.generate(
            pixel_values=pixels,
            input_ids=input_ids.to(self.device),
            attention_mask=text.attention_mask.to(self.device),
            **self.generation,
        )
        # generate() returns the prompt (less its [SEP]) followed by the new tokens.
        continuations = self.tokenizer.batch_decode(output_ids[:, input_ids.shape[1] - 1 :], skip_special_tokens=True)
        return [_join(prompt, continuation) for prompt, continuation in zip(prompts, continuations)]


def _join(prompt: str, continuation: str) -> str:
    continuation = continuation.strip()
    if not prompt:
        return continuation
    return f"{prompt} {continuation}" if continuation else prompt
