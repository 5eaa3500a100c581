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


CPU_FLAGS_WITH_NATIVE_BF16 = ("avx512_bf16", "amx_bf16")


def cpu_has_native_bf16(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """Whether this CPU computes bf16 natively; without it bf16 matmuls are emulated and slower."""
    try:
        flags = set(cpuinfo.read_text().split())
    except OSError:
        return False
    return any(flag in flags for flag in CPU_FLAGS_WITH_NATIVE_BF16)


def resolve_cpu_precision(requested: str) -> str:
    """``auto`` -> the fastest measured for this kind of CPU (benchmarks/captioner_knobs.py): ``bf16``
    where the CPU computes bf16 natively, else ``int8``. Any other value as is."""
    if requested == "auto":
        return "bf16" if cpu_has_native_bf16() else "int8"
    return requested


class BlipCaptioner:
    """Wraps a local BLIP snapshot (``save_pretrained`` layout: model + processor files).

    On a GPU: fp16 or fp32 weights. On a CPU, ``cpu_precision``: ``fp32`` (exact), ``bf16`` (bf16
    weights), ``int8`` (dynamic int8 quantisation of every Linear layer: weights int8, activations
    quantised per batch), or ``auto`` (the fastest of bf16 and int8 for this CPU).
    """

    def __init__(self, model_dir: str, device: str = "cpu", fp16: bool = False, cpu_precision: str = "fp32",
                 torch_threads: int = 0, **generation):
        self.device = torch.device(device)
        if torch_threads and self.device.type == "cpu":
            torch.set_num_threads(torch_threads)  # process-wide: in Triton, this step's stub is its own process
        if self.device.type == "cuda":
            self.precision = "fp16" if fp16 else "fp32"
        else:
            self.precision = resolve_cpu_precision(cpu_precision)
        self.dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(self.precision, torch.float32)
        self.tokenizer = BlipProcessor.from_pretrained(model_dir).tokenizer
        # Left padding: BLIP's generate drops each row's last token ([SEP]), so the prompts must end
        # in the same column; generate derives position ids from the attention mask.
        self.tokenizer.padding_side = "left"
        model = BlipForConditionalGeneration.from_pretrained(model_dir, dtype=self.dtype)
        if self.precision == "int8":
            model = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
        self.model = model.to(self.device).eval()
        self.generation = {"do_sample": False, **generation}
        # int8 dynamic quantisation scales activations per tensor, that is over the whole batch: a
        # caption would depend on its batch mates. So int8 generates image by image (its whole-batch
        # generate was no faster here); the other precisions batch freely (None: no limit).
        self.rows_per_generate: int | None = 1 if self.precision == "int8" else None

    def caption(self, pixel_values: np.ndarray, prompts: Sequence[str]) -> list[str]:
        """Captions for a batch of preprocessed images ``[n, 3, 384, 384]``; ``""`` means no prompt."""
        if len(prompts) != len(pixel_values):
            raise ValueError(f"{len(pixel_values)} images but {len(prompts)} prompts")
        step = self.rows_per_generate or max(len(prompts), 1)
        return [caption for start in range(0, len(prompts), step)
                for caption in self._generate(pixel_values[start:start + step], prompts[start:start + step])]

    @torch.inference_mode()
    def _generate(self, pixel_values: np.ndarray, prompts: Sequence[str]) -> list[str]:
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
