"""The course's way of captioning, and the reference the captioner's graphs are checked against:
Hugging Face BLIP in PyTorch fp32, greedy ``generate``, one photo at a time."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from transformers import AutoTokenizer, BlipForConditionalGeneration

from pipeline_src.model_build.blip_onnx import DecoderShape
from pipeline_src.steps.captioning import blip_prompt_ids, join_caption
from pipeline_src.steps.imaging import normalise_captioner


class HuggingFaceCaptioner:
    def __init__(
        self, model: BlipForConditionalGeneration, tokenizer, max_new_tokens: int = 20, repetition_penalty: float = 1.0
    ):
        self.model = model.float().eval()
        self.tokenizer = tokenizer
        self.max_new_tokens = max_new_tokens
        self.repetition_penalty = repetition_penalty
        self.shape = DecoderShape.of(model)

    @classmethod
    def load(
        cls, snapshot_dir: str | Path, max_new_tokens: int = 20, repetition_penalty: float = 1.0
    ) -> HuggingFaceCaptioner:
        return cls(
            BlipForConditionalGeneration.from_pretrained(str(snapshot_dir)),
            AutoTokenizer.from_pretrained(str(snapshot_dir)),
            max_new_tokens,
            repetition_penalty,
        )

    @torch.inference_mode()
    def new_tokens(self, pixel_values: np.ndarray, prompt_ids: Sequence[int]) -> list[int]:
        """``generate``'s new tokens for one image ``[3, 384, 384]`` (uint8, as the preprocess step makes it; BLIP's
        normalisation applied here), up to and including [SEP]. ``prompt_ids`` as the captioner feeds them ([DEC]
        first, no [SEP])."""
        # generate() takes the tokenizer's layout, [CLS] ... [SEP]: it puts [DEC] first and drops [SEP] itself.
        given = torch.tensor([[*prompt_ids, self.shape.sep_token_id]])
        output = self.model.generate(
            pixel_values=torch.from_numpy(np.ascontiguousarray(normalise_captioner(pixel_values[None]))),
            input_ids=given,
            max_new_tokens=self.max_new_tokens,
            # passed, not set on the model's generation config: BLIP's generate hands its kwargs to the text
            # decoder's generate, which reads the text decoder's own config
            repetition_penalty=self.repetition_penalty,
            do_sample=False,
            num_beams=1,
        )
        return output[0, len(prompt_ids) :].tolist()

    def caption(self, pixel_values: np.ndarray, prompts: Sequence[str]) -> list[str]:
        """Captions for ``pixel_values [n, 3, 384, 384]`` (uint8, as the preprocess step makes them), one
        ``generate`` per photo."""
        captions = []
        for pixels, prompt in zip(pixel_values, prompts):
            ids = blip_prompt_ids(self.tokenizer(prompt).input_ids, self.shape.bos_token_id)
            new = self.new_tokens(pixels, ids)
            captions.append(join_caption(prompt, self.tokenizer.decode(new, skip_special_tokens=True)))
        return captions
