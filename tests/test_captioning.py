"""BLIP captioning on the tiny stand-in: real classes, real processor, random weights."""

import numpy as np
import pytest
import torch
from transformers import BlipForConditionalGeneration

from pipeline_src.model_build.blip_snapshot import STANDIN_SIZES, standin_config, standin_processor
from pipeline_src.steps.captioning import BlipCaptioner, cpu_has_native_bf16, resolve_cpu_precision, standin_info

PROMPTS = ["a photo of noodles/pasta,", "", "a photo of bread,"]


@pytest.fixture(scope="module")
def blip_dir(model_repository):
    return model_repository / "captioner" / "1" / "blip"


@pytest.fixture(scope="module")
def captioner(blip_dir):
    return BlipCaptioner(str(blip_dir), max_new_tokens=8)


@pytest.fixture(scope="module")
def pixels():
    return np.random.default_rng(0).standard_normal((3, 3, 384, 384)).astype(np.float32)


def test_standin_is_marked_as_such(blip_dir):
    assert standin_info(blip_dir)["size"] == "tiny"


def test_standin_uses_blips_real_tokenizer_layout(captioner):
    tokenizer = captioner.tokenizer
    assert len(tokenizer) == 30524  # bert-base-uncased + [DEC] + [ENC], as blip-image-captioning-base
    assert tokenizer.bos_token == "[DEC]"
    assert tokenizer.bos_token_id == captioner.model.config.text_config.bos_token_id
    assert tokenizer.tokenize("Noodles") == ["noodles"]


def test_base_standin_has_the_architecture_of_blip_image_captioning_base():
    tokenizer = standin_processor().tokenizer
    model = BlipForConditionalGeneration(standin_config("base", len(tokenizer), tokenizer.bos_token_id))
    millions = sum(p.numel() for p in model.parameters()) / 1e6
    # 224M: the LM head shares the word embeddings; the hub checkpoint stores both (~247M), same compute.
    assert 220 < millions < 260, millions
    assert STANDIN_SIZES["base"]["layers"] == 12


def test_each_caption_begins_with_its_prompt(captioner, pixels):
    captions = captioner.caption(pixels, PROMPTS)
    for prompt, caption in zip(PROMPTS, captions):
        assert caption.startswith(prompt)
    assert not captions[1].startswith("a photo of")


def test_one_batched_generate_equals_one_call_per_image(captioner, pixels):
    """Prompts of different lengths in one batch: left padding and masks must change nothing."""
    batched = captioner.caption(pixels, PROMPTS)
    single = [captioner.caption(pixels[i : i + 1], [prompt])[0] for i, prompt in enumerate(PROMPTS)]
    assert batched == single


def test_prompt_count_must_match_image_count(captioner, pixels):
    with pytest.raises(ValueError, match="3 images but 2 prompts"):
        captioner.caption(pixels, PROMPTS[:2])


@pytest.mark.parametrize("precision, dtype", [("bf16", torch.bfloat16), ("int8", torch.float32)])
def test_reduced_cpu_precisions_load_and_caption_every_image_with_its_prompt(blip_dir, pixels, precision, dtype):
    captioner = BlipCaptioner(str(blip_dir), cpu_precision=precision, max_new_tokens=8)
    assert captioner.precision == precision and captioner.dtype == dtype
    if precision == "int8":  # every Linear layer quantised, its weights stored as int8
        linears = [m for m in captioner.model.modules() if isinstance(m, torch.nn.Linear)]
        assert not linears, f"{len(linears)} Linear layers left in fp32"
    captions = captioner.caption(pixels, PROMPTS)
    assert len(captions) == 3 and all(c.startswith(p) for p, c in zip(PROMPTS, captions))
    # A caption never depends on its batch mates, int8's per-batch activation scales included.
    assert captions == [captioner.caption(pixels[i : i + 1], [prompt])[0] for i, prompt in enumerate(PROMPTS)]


def test_auto_precision_is_bf16_where_the_cpu_computes_bf16_natively_else_int8(tmp_path):
    expected = "bf16" if cpu_has_native_bf16() else "int8"
    assert resolve_cpu_precision("auto") == expected
    assert resolve_cpu_precision("int8") == "int8"
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("flags\t\t: fpu avx2 avx512f\n")
    assert not cpu_has_native_bf16(cpuinfo)
    cpuinfo.write_text("flags\t\t: fpu avx2 avx512f avx512_bf16\n")
    assert cpu_has_native_bf16(cpuinfo)
