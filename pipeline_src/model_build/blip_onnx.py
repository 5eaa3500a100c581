"""BLIP captioning as three ONNX graphs, each computed once per image or per token:

- ``vision_encoder.onnx``: ``pixel_values [b, 3, 384, 384]`` (uint8, resized, not normalised: the graph
  rescales and normalises first, as ``pipeline_src.steps.imaging.normalise_captioner`` does) -> ``image_embeds
  [b, 577, H]`` (a Triton step of its own, batched by the dynamic batcher);
- ``cross_kv.onnx``: ``image_embeds`` -> ``cross_key.N, cross_value.N [b, heads, 577, d]`` for each layer
  N, the keys and values its cross-attention reads at every token, computed once per image;
- ``decoder_step.onnx``: one step of greedy decoding over the new tokens, their positions and the KV cache, a
  fixed number of slots per row (prompt plus every token it may feed back): ``input_ids, position_ids [b, t]``,
  ``attention_bias [b, 1, t, slots]`` (0 where a new token may look, the smallest float elsewhere: later slots,
  left padding), ``cache_positions [b, t]`` (the slot each new token's keys and values go to, per row),
  ``seen [b, vocab]`` (bool: the tokens the row holds so far, for the repetition penalty),
  ``repetition_penalty [1]``, ``slot_ids [slots]`` (0, 1, ...), ``past_key.N, past_value.N [b, heads, slots,
  d]``, ``cross_key.N, cross_value.N`` -> ``logits [b, vocab]`` (last position), the next step's inputs
  (``next_ids, next_position_ids, next_cache_positions [b, 1]``, ``next_attention_bias [b, 1, 1, slots]``,
  ``next_seen``: the greedy choice after Hugging Face's repetition penalty, fed back), and ``present_key.N,
  present_value.N`` (the past with the new tokens written in, same shape).

Why so (docs/performance.md, "How the captioner is built and checked" and "Memory and the stand-ins", with the
figures): the greedy loop stays on the device, so the host reads only ``next_ids``, never the logits (only the
build's fidelity check binds them); fixed slots give every step of a caption the same shapes, for CUDA graphs, and
slots per row let rows at different points of their captions share a step; the caller gives the slots' ids and the
first step's bias, so that nothing in the graph derives values from shapes (on a GPU: CPU nodes, copies); one cache
tensor per layer, as a stacked one would be sliced (copied) by each layer at every token.

The modules below reuse Hugging Face's layers (embeddings, projections, layer norms, feed-forward, LM
head) and spell out only the attention over the cache, with the same operations in the same order as
``BlipTextSelfAttention``: the graphs compute what ``generate`` computes (checked by ``blip_fidelity``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from transformers import BlipForConditionalGeneration, BlipTextConfig, BlipVisionConfig

from pipeline_src.steps.imaging import CLIP_MEAN, CLIP_STD

# Where and under which names the captioner reads them.
from pipeline_src.steps.text_decoder import (
    CACHE_LAYOUT,
    CROSS_KV_FILE,
    DECODER_STEP_FILE,
    IMAGE_EMBEDS,
    MARGIN_OUTPUT,
    NEXT_OUTPUTS,
    STEP_INPUTS,
    cache_names,
)

OPSET = 17

VISION_INPUT, VISION_OUTPUT = "pixel_values", IMAGE_EMBEDS
# The decoder step's outputs beside the caches, in order; its inputs are STEP_INPUTS (text_decoder binds both).
TOKEN_OUTPUTS = ["logits", *NEXT_OUTPUTS, MARGIN_OUTPUT]


def _number(config: BlipTextConfig | BlipVisionConfig, name: str) -> int:
    """A size or token id the graphs are built around (a list-valued image size, a missing token id: not a
    BLIP this export knows)."""
    value = getattr(config, name)
    if not isinstance(value, int):
        raise ValueError(f"BLIP's {type(config).__name__}.{name} is {value!r}: a single number is needed")
    return value


@dataclass(frozen=True)
class DecoderShape:
    """What the greedy loop needs to know of the text decoder (written next to the graphs)."""

    layers: int
    heads: int
    head_size: int
    image_tokens: int
    hidden_size: int
    vision_hidden_size: int
    vocab_size: int
    bos_token_id: int  # [DEC]: BLIP's decoder starts from it, not from [CLS]
    sep_token_id: int  # ends a caption
    pad_token_id: int
    cache_layout: str = CACHE_LAYOUT  # the decoder step's cache, as TextDecoder checks it

    @classmethod
    def of(cls, blip: BlipForConditionalGeneration) -> DecoderShape:
        text, vision = blip.config.text_config, blip.config.vision_config
        # transformers types them as possibly dicts; a loaded model holds the objects
        assert isinstance(text, BlipTextConfig) and isinstance(vision, BlipVisionConfig), (type(text), type(vision))
        hidden_size, heads = _number(text, "hidden_size"), _number(text, "num_attention_heads")
        return cls(
            layers=_number(text, "num_hidden_layers"),
            heads=heads,
            head_size=hidden_size // heads,
            image_tokens=(_number(vision, "image_size") // _number(vision, "patch_size")) ** 2 + 1,
            hidden_size=hidden_size,
            vision_hidden_size=_number(vision, "hidden_size"),
            vocab_size=_number(text, "vocab_size"),
            bos_token_id=_number(text, "bos_token_id"),
            sep_token_id=_number(text, "sep_token_id"),
            pad_token_id=_number(text, "pad_token_id"),
        )


def _split_heads(states: torch.Tensor, heads: int) -> torch.Tensor:
    """[b, s, heads * d] -> [b, heads, s, d], as BLIP's attention views and transposes them."""
    batch, length, _ = states.shape
    return states.view(batch, length, heads, -1).transpose(1, 2)


def _attend(query, keys, values, additive_mask, head_size: int) -> torch.Tensor:
    """BlipTextSelfAttention's arithmetic, in its order; -> [b, t, heads * d]."""
    scores = torch.matmul(query, keys.transpose(-1, -2)) / math.sqrt(head_size)
    if additive_mask is not None:
        scores = scores + additive_mask
    context = torch.matmul(nn.functional.softmax(scores, dim=-1), values)
    batch, _, length, _ = context.shape
    return context.permute(0, 2, 1, 3).reshape(batch, length, -1)


class VisionEncoder(nn.Module):
    """BLIP's vision model after its image processor's rescale and CLIP normalisation, in the operations (and so
    the float32 bits) of ``normalise_captioner``: the preprocess step sends uint8 pixels, a quarter of the bytes."""

    def __init__(self, blip: BlipForConditionalGeneration):
        super().__init__()
        self.vision = blip.vision_model
        self.register_buffer("rescale", torch.tensor(1.0 / 255.0, dtype=torch.float32))
        self.register_buffer("mean", torch.from_numpy(CLIP_MEAN.copy())[:, None, None])
        self.register_buffer("std", torch.from_numpy(CLIP_STD.copy())[:, None, None])

    def forward(self, pixel_values):
        normalised = (pixel_values.to(torch.float32) * self.rescale - self.mean) / self.std
        return self.vision(pixel_values=normalised)[0]


class CrossKeysValues(nn.Module):
    def __init__(self, blip: BlipForConditionalGeneration):
        super().__init__()
        self.attentions = nn.ModuleList(layer.crossattention.self for layer in blip.text_decoder.bert.encoder.layer)
        self.heads = DecoderShape.of(blip).heads

    def forward(self, image_embeds):
        """Layer by layer, its keys then its values (``cache_names`` order)."""
        return tuple(
            _split_heads(projection(image_embeds), self.heads)
            for attention in self.attentions
            for projection in (attention.key, attention.value)
        )


class DecoderStep(nn.Module):
    def __init__(self, blip: BlipForConditionalGeneration):
        super().__init__()
        decoder = blip.text_decoder
        self.embeddings = decoder.bert.embeddings
        self.layers = decoder.bert.encoder.layer
        self.lm_head = decoder.cls
        shape = DecoderShape.of(blip)
        self.heads, self.head_size = shape.heads, shape.head_size

    def forward(
        self, input_ids, position_ids, attention_bias, cache_positions, seen, repetition_penalty, slot_ids, *caches
    ):
        """``caches``: the past keys and values, then the cross-attention's, each in ``cache_names`` order."""
        past, cross = caches[: 2 * len(self.layers)], caches[2 * len(self.layers) :]
        hidden = self.embeddings(input_ids=input_ids, position_ids=position_ids)
        present = []
        for index, layer in enumerate(self.layers):
            own = layer.attention.self
            new_keys = _split_heads(own.key(hidden), self.heads)
            slots = cache_positions[:, None, :, None].expand_as(new_keys)
            keys = past[2 * index].scatter(2, slots, new_keys)
            values = past[2 * index + 1].scatter(2, slots, _split_heads(own.value(hidden), self.heads))
            present += [keys, values]
            context = _attend(_split_heads(own.query(hidden), self.heads), keys, values, attention_bias, self.head_size)
            attended = layer.attention.output(context, hidden)
            crossing = layer.crossattention  # no mask: every image token is attended
            query = _split_heads(crossing.self.query(attended), self.heads)
            context = _attend(query, cross[2 * index], cross[2 * index + 1], None, self.head_size)
            attended = crossing.output(context, attended)
            hidden = layer.output(layer.intermediate(attended), attended)
        # [b, 1, H] rather than [b, H]: exported as MatMul (not Gemm), which the int8 build quantises too.
        logits = self.lm_head(hidden[:, -1:, :])[:, 0, :]
        inputs = (position_ids, attention_bias, cache_positions, seen, repetition_penalty, slot_ids)
        return (logits, *greedy_next(logits, *inputs), *present)


def greedy_next(logits, position_ids, attention_bias, cache_positions, seen, repetition_penalty, slot_ids) -> tuple:
    """The next step's inputs, on the device: the greedy token after Hugging Face's repetition penalty (its
    RepetitionPenaltyLogitsProcessor: a seen token's score divided by the penalty when positive, multiplied when
    negative; argmax takes the first of equal scores, as torch's does), one position and one slot further, the
    new slot made visible, the token marked seen. A row whose slots are full stays on its last slot (a row that
    has finished and waits to leave a shared step; its answers are not read). Then how sure the choice is: the
    winning score's lead over the runner-up (the fast mode's guard redoes a step on the exact path under a bound)."""
    penalised = torch.where(logits < 0, logits * repetition_penalty, logits / repetition_penalty)
    scores = torch.where(seen, penalised, logits)
    next_ids = torch.argmax(scores, dim=-1, keepdim=True)
    best_two = torch.topk(scores, 2, dim=-1).values
    margin = best_two[:, :1] - best_two[:, 1:2]
    next_slot = torch.minimum(cache_positions[:, -1:] + 1, slot_ids[-1:])
    visible = slot_ids[None, None, None, :] == next_slot[:, None, :, None]
    next_bias = attention_bias[:, :, -1:, :].masked_fill(visible, 0.0)
    next_seen = seen.scatter(1, next_ids, torch.ones_like(next_ids, dtype=torch.bool))
    return next_ids, position_ids[:, -1:] + 1, next_bias, next_slot, next_seen, margin


def export_graphs(blip: BlipForConditionalGeneration, directory: Path, vision_path: Path) -> DecoderShape:
    """Write the three graphs: the vision encoder to ``vision_path``, the text side into ``directory``."""
    blip = blip.float().eval()
    shape = DecoderShape.of(blip)
    directory.mkdir(parents=True, exist_ok=True)
    vision_path.parent.mkdir(parents=True, exist_ok=True)
    with torch.inference_mode():
        export_vision_encoder(VisionEncoder(blip), vision_path)
        export_cross_kv(CrossKeysValues(blip), shape, directory / CROSS_KV_FILE)
        export_decoder_step(DecoderStep(blip), shape, directory / DECODER_STEP_FILE)
    return shape


# Sample sizes for the exports; every one of them is a dynamic axis.
BATCH, SLOTS, NEW = 2, 5, 2


def export_vision_encoder(module: nn.Module, path: Path) -> None:
    _export(module, (torch.zeros(BATCH, 3, 384, 384, dtype=torch.uint8),), path, [VISION_INPUT], [VISION_OUTPUT])


def export_cross_kv(module: nn.Module, shape: DecoderShape, path: Path) -> None:
    sample = torch.zeros(BATCH, shape.image_tokens, shape.vision_hidden_size)
    _export(module, (sample,), path, [VISION_OUTPUT], cache_names("cross", shape.layers))


def export_decoder_step(module: nn.Module, shape: DecoderShape, path: Path) -> None:
    past, cross, present = (cache_names(kind, shape.layers) for kind in ("past", "cross", "present"))
    ids = torch.full((BATCH, NEW), shape.bos_token_id, dtype=torch.long)
    positions = torch.arange(NEW).repeat(BATCH, 1)
    bias = torch.zeros(BATCH, 1, NEW, SLOTS)
    cache_positions = torch.arange(NEW).repeat(BATCH, 1)
    seen = torch.zeros(BATCH, shape.vocab_size, dtype=torch.bool)
    penalty = torch.ones(1)
    slot_ids = torch.arange(SLOTS)
    past_sample = [torch.zeros(BATCH, shape.heads, SLOTS, shape.head_size) for _ in past]
    cross_sample = [torch.zeros(BATCH, shape.heads, shape.image_tokens, shape.head_size) for _ in cross]
    axes = {
        "input_ids": {0: "batch", 1: "new"},
        "position_ids": {0: "batch", 1: "new"},
        "attention_bias": {0: "batch", 2: "new", 3: "slots"},
        "cache_positions": {0: "batch", 1: "new"},
        "seen": {0: "batch"},
        "slot_ids": {0: "slots"},
        "logits": {0: "batch"},
        **{name: {0: "batch"} for name in [*NEXT_OUTPUTS, MARGIN_OUTPUT]},
        "next_attention_bias": {0: "batch", 3: "slots"},
        **{name: {0: "batch", 2: "slots"} for name in [*past, *present]},
        **{name: {0: "batch"} for name in cross},
    }
    _export(
        module,
        (ids, positions, bias, cache_positions, seen, penalty, slot_ids, *past_sample, *cross_sample),
        path,
        [*STEP_INPUTS, *past, *cross],
        [*TOKEN_OUTPUTS, *present],
        axes,
    )


def _export(
    module: nn.Module, args: tuple, path: Path, inputs: list[str], outputs: list[str], axes: dict | None = None
) -> None:
    """``axes``: the dynamic ones; by default, the first (the batch) of every input and output."""
    torch.onnx.export(
        module,
        args,
        str(path),
        input_names=inputs,
        output_names=outputs,
        dynamic_axes=axes or {name: {0: "batch"} for name in [*inputs, *outputs]},
        opset_version=OPSET,
        dynamo=False,
    )
