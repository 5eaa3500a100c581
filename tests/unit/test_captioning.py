"""BLIP captioning on ONNX Runtime, on the tiny stand-in built by the project's own build: the graphs
reproduce Hugging Face's fp32 generate, a row's caption does not depend on its batch mates, and a
caption depends on its photo."""

import json
import shutil
import subprocess
import sys

import numpy as np
import onnxruntime as ort
import pytest
import torch
from transformers import BlipForConditionalGeneration

from pipeline_src import PROJECT_ROOT
from pipeline_src.model_build.blip_fidelity import check_pixels
from pipeline_src.model_build.blip_graphs import GraphPaths
from pipeline_src.model_build.blip_snapshot import STANDIN_SIZES, standin_config, standin_processor
from pipeline_src.model_build.hf_captioner import HuggingFaceCaptioner
from pipeline_src.steps.captioning import GreedyCaptioner, penalise_repetition, standin_info
from pipeline_src.steps.fixed_buffers import FixedBufferDecoder
from pipeline_src.steps.onnx_runtime import OnnxModel
from pipeline_src.steps.precision import choose_precision
from pipeline_src.steps.text_decoder import TextDecoder

PROMPTS = ["a photo of noodles/pasta,", "", "a photo of bread,"]


@pytest.fixture(scope="module")
def blip_dir(model_repository):
    return model_repository / "captioner" / "1" / "blip"


@pytest.fixture(scope="module")
def graphs_dir(model_repository):
    return model_repository / "captioner" / "1" / "text_decoder"


@pytest.fixture(scope="module")
def vision(model_repository):
    return OnnxModel(model_repository / "vision_encoder" / "1" / "model.onnx")


@pytest.fixture(scope="module")
def captioner(graphs_dir):
    return GreedyCaptioner.load(graphs_dir, max_new_tokens=12)


@pytest.fixture(scope="module")
def pixels():
    """Six photos through the pipeline's preprocessing: the three fruit photos and crops of them."""
    return check_pixels(9)[[0, 1, 2, 6, 7, 8]]


@pytest.fixture(scope="module")
def hugging_face(blip_dir):
    return HuggingFaceCaptioner.load(blip_dir, max_new_tokens=12)


def test_standin_is_marked_as_such(blip_dir):
    assert standin_info(blip_dir)["size"] == "tiny"


def test_standin_uses_blips_real_tokenizer_layout(captioner):
    tokenizer = captioner.tokenizer
    assert tokenizer.get_vocab_size() == 30524  # bert-base-uncased + [DEC] + [ENC], as blip-image-captioning-base
    assert tokenizer.token_to_id("[DEC]") == captioner.decoder.shape["bos_token_id"]
    assert tokenizer.encode("Noodles", add_special_tokens=False).tokens == ["noodles"]


def test_the_steps_tokenizer_encodes_and_decodes_as_transformers(captioner, blip_dir):
    """The step reads the build's tokenizer.json with `tokenizers` alone; the course's transformers tokenizer
    must agree on every prompt and on any caption's tokens (random ones here, punctuation included)."""
    from transformers import AutoTokenizer

    theirs = AutoTokenizer.from_pretrained(str(blip_dir))
    for prompt in [*PROMPTS, "a photo of dessert, isn't it?", 'Meat "grilled" & rice']:
        assert captioner.prompt_ids(prompt) == [theirs.bos_token_id, *theirs(prompt).input_ids[1:-1]]
    rng = np.random.default_rng(0)
    punctuation = theirs.convert_tokens_to_ids([".", ",", "'", "s", "?", "!", "t", "[SEP]", "[PAD]"])
    sequences = [
        [*rng.integers(0, theirs.vocab_size, 12).tolist(), *rng.choice(punctuation, 4).tolist()] for _ in range(300)
    ]
    assert captioner.tokenizer.decode_batch(sequences, skip_special_tokens=True) == theirs.batch_decode(
        sequences, skip_special_tokens=True
    )


def test_the_captioner_step_runs_without_torch(graphs_dir):
    """Memory: importing torch (through transformers' tokenizer) cost the captioner step 520 MiB."""
    code = (
        f"import sys; from pipeline_src.steps.captioning import GreedyCaptioner; "
        f"captioner = GreedyCaptioner.load(__import__('pathlib').Path({str(graphs_dir)!r}), max_new_tokens=2); "
        f"captioner.warm_up(); assert 'torch' not in sys.modules and 'transformers' not in sys.modules, "
        f"sorted(m for m in sys.modules if m.startswith(('torch', 'transformers')))[:5]"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=PROJECT_ROOT)


def test_base_standin_has_the_architecture_of_blip_image_captioning_base():
    tokenizer = standin_processor().tokenizer
    model = BlipForConditionalGeneration(standin_config("base", len(tokenizer), tokenizer.bos_token_id))
    millions = sum(p.numel() for p in model.parameters()) / 1e6
    # 224M: the LM head shares the word embeddings; the hub checkpoint stores both (~247M), same compute.
    assert 220 < millions < 260, millions
    assert STANDIN_SIZES["base"]["layers"] == 12


def test_standin_vision_weights_have_a_real_scale(blip_dir):
    """BlipVisionConfig's default initialiser (1e-10) made image embeddings inert."""
    model = BlipForConditionalGeneration.from_pretrained(str(blip_dir))
    assert 0.01 < float(model.vision_model.encoder.layers[0].self_attn.qkv.weight.std()) < 0.05


def test_vision_encoder_graph_matches_pytorch(blip_dir, vision, pixels):
    model = BlipForConditionalGeneration.from_pretrained(str(blip_dir)).eval()
    with torch.inference_mode():
        expected = model.vision_model(pixel_values=torch.from_numpy(pixels))[0].numpy()
    assert np.abs(vision(pixels) - expected).max() <= 1e-4 * np.abs(expected).max()


def test_captions_equal_hugging_face_fp32_generate(captioner, hugging_face, vision, pixels):
    prompts = (PROMPTS * 2)[: len(pixels)]
    assert captioner.caption(vision(pixels), prompts) == hugging_face.caption(pixels, prompts)


def test_each_caption_begins_with_its_prompt(captioner, vision, pixels):
    captions = captioner.caption(vision(pixels[:3]), PROMPTS)
    for prompt, caption in zip(PROMPTS, captions):
        assert caption.startswith(prompt)
    assert not captions[1].startswith("a photo of")


def test_a_caption_depends_on_its_photo(captioner, vision, pixels):
    """Same prompt, six different photos: six different captions (the stand-in is not inert)."""
    captions = captioner.caption(vision(pixels), ["a photo of vegetable/fruit,"] * len(pixels))
    assert len(set(captions)) == len(pixels), captions


def test_a_batch_equals_one_call_per_image(captioner, vision, pixels):
    """Prompts of different lengths in one batch: left padding, masks and positions change nothing."""
    embeds = vision(pixels[:3])
    batched = captioner.caption(embeds, PROMPTS)
    single = [captioner.caption(embeds[i : i + 1], [prompt])[0] for i, prompt in enumerate(PROMPTS)]
    assert batched == single


def test_every_step_of_a_caption_has_the_same_shapes(captioner, vision, pixels):
    """Fixed slots: the cache a step reads and the one it writes keep one shape for the whole caption (what a
    CUDA graph needs to replay a step), room for the prompt and every token fed back."""
    decoder, prompt_ids = captioner.decoder, [captioner.prompt_ids(prompt) for prompt in PROMPTS]
    logits, state = decoder.prefill(vision(pixels[:3]), prompt_ids, max_new_tokens=12)
    slots = max(map(len, prompt_ids)) + 11
    expected = [3, decoder.shape["heads"], slots, decoder.shape["head_size"]]
    for _ in range(11):
        assert state.written < state.slots == slots
        assert all(value.shape() == expected for value in state.cache)
        logits = decoder.advance(state, logits.argmax(axis=-1))
    assert all(value.shape() == expected for value in state.cache) and state.written == slots
    with pytest.raises(ValueError, match=f"{slots} slots are full"):
        decoder.advance(state, logits.argmax(axis=-1))


def test_slots_not_yet_written_change_nothing(captioner, vision, pixels):
    """Whatever the cache holds beyond the written slots (a reused buffer's last caption), the logits are those
    of a clean cache: the bias hides those slots."""
    decoder, prompt_ids = captioner.decoder, [captioner.prompt_ids(prompt) for prompt in PROMPTS]
    embeds = vision(pixels[:3])
    runs = []
    for noise in (0.0, 1e3):
        logits, state = decoder.prefill(embeds, prompt_ids, max_new_tokens=6)
        for _ in range(3):
            tokens = logits.argmax(axis=-1)
            dirty = [value.numpy() for value in state.cache]
            for array in dirty:
                array[:, :, state.written :] = noise * np.random.default_rng(0).standard_normal(
                    array[:, :, state.written :].shape
                )
            state.cache = [ort.OrtValue.ortvalue_from_numpy(array) for array in dirty]
            logits = decoder.advance(state, tokens)
        runs.append(logits)
    assert np.array_equal(runs[0], runs[1])


def test_fixed_buffers_caption_as_the_plain_decoder(captioner, graphs_dir, vision, pixels):
    """Batches padded to a few sizes, buffers allocated once per size and reused by the next batch, two caches
    that the steps alternate between (CUDA graphs' addresses): the captions and logits of the plain decoder."""
    fixed = GreedyCaptioner(
        FixedBufferDecoder(graphs_dir, max_prompt_tokens=16, max_new_tokens=12, batch_sizes=(1, 4)),
        captioner.tokenizer,
        max_new_tokens=12,
    )
    embeds = vision(pixels)
    for rows in (3, 1, 4, 3):  # padded to 4, then 1, then 4's buffers again
        prompts = (PROMPTS * 2)[:rows]
        assert fixed.caption(embeds[:rows], prompts) == captioner.caption(embeds[:rows], prompts)
    assert sorted(fixed.decoder.buffers) == [1, 4]
    prompt_ids = [captioner.prompt_ids(prompt) for prompt in PROMPTS]
    ours, _ = fixed.decoder.prefill(embeds[:3], prompt_ids, 12)
    theirs, _ = captioner.decoder.prefill(embeds[:3], prompt_ids, 12)
    assert ours.shape == theirs.shape and np.abs(ours - theirs).max() <= 1e-5 * np.abs(theirs).max()


def test_a_batch_beyond_the_fixed_buffers_is_captioned_as_by_the_plain_decoder(captioner, graphs_dir, vision, pixels):
    decoder = FixedBufferDecoder(graphs_dir, max_prompt_tokens=4, max_new_tokens=12, batch_sizes=(1, 2))
    fixed = GreedyCaptioner(decoder, captioner.tokenizer, max_new_tokens=12)
    embeds = vision(pixels[:3])
    assert fixed.caption(embeds, PROMPTS) == captioner.caption(embeds, PROMPTS)  # 3 rows, prompts over 4 tokens
    assert fixed.caption(embeds[:1], [""]) == captioner.caption(embeds[:1], [""])  # fits: [DEC] alone
    assert list(decoder.buffers) == [1]


def test_graphs_of_the_earlier_cache_layout_are_refused_and_rebuilt(graphs_dir, tmp_path):
    shutil.copytree(graphs_dir, tmp_path / "text_decoder", ignore=shutil.ignore_patterns("*.onnx"))
    shape_file = tmp_path / "text_decoder" / "decoder.json"
    shape = json.loads(shape_file.read_text())
    del shape["cache_layout"]
    shape_file.write_text(json.dumps(shape))
    with pytest.raises(ValueError, match=r"earlier layout.*make models"):
        TextDecoder(tmp_path / "text_decoder")
    assert GraphPaths(graphs_dir.parent.parent.parent / "vision_encoder" / "1" / "model.onnx", graphs_dir).complete()
    assert not GraphPaths(tmp_path / "model.onnx", tmp_path / "text_decoder").complete()


def test_the_vision_encoder_gives_a_row_the_same_embeddings_in_any_batch(vision, pixels):
    assert np.array_equal(vision(pixels)[2], vision(pixels[2:3])[0])


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_int8_rows_do_not_depend_on_their_batch_mates(graphs_dir, model_repository, pixels, precision):
    """int8 weights only, no activation scale shared across a batch: a row alone gets what it gets in a batch."""
    suffix = "" if precision == "fp32" else ".int8"
    vision = OnnxModel(model_repository / "vision_encoder" / "1" / f"model{suffix}.onnx")
    embeds = vision(pixels[:3])
    assert np.array_equal(embeds[1], vision(pixels[1:2])[0])
    captioner = GreedyCaptioner.load(graphs_dir, precision, max_new_tokens=12)
    assert captioner.generate(embeds, [captioner.prompt_ids(p) for p in PROMPTS]) == [
        captioner.generate(embeds[i : i + 1], [captioner.prompt_ids(prompt)])[0] for i, prompt in enumerate(PROMPTS)
    ]


def test_prompt_count_must_match_image_count(captioner, vision, pixels):
    with pytest.raises(ValueError, match="3 images but 2 prompts"):
        captioner.caption(vision(pixels[:3]), PROMPTS[:2])


def test_repetition_penalty_is_hugging_faces():
    logits = np.array([[2.0, -2.0, 1.0, 0.5]], dtype=np.float32)
    assert penalise_repetition(logits, [[0, 1, 1]], 2.0).tolist() == [[1.0, -4.0, 1.0, 0.5]]


def test_the_build_wrote_each_options_fidelity(model_repository, graphs_dir):
    for directory in (graphs_dir, model_repository / "vision_encoder" / "1"):
        fidelity = json.loads((directory / "fidelity.json").read_text())
        exact = fidelity["options"]["fp32"]
        assert exact["captions_identical"] == exact["captions"] == 8
        assert exact["teacher_forced_top1"] == 1.0 and exact["max_relative_logit_error"] < 1e-4
        assert 0.5 < fidelity["options"]["int8"]["teacher_forced_top1"] <= 1.0


def test_auto_precision_follows_the_measured_agreement(tmp_path):
    (tmp_path / "fidelity.json").write_text(json.dumps({"options": {"int8": {"teacher_forced_top1": 0.995}}}))
    assert choose_precision("auto", tmp_path, 0.99, on_gpu=False).precision == "int8"
    chosen = choose_precision("auto", tmp_path, 0.999, on_gpu=False)
    assert chosen.precision == "fp32" and "99.5%" in chosen.reason
    assert choose_precision("auto", tmp_path / "nowhere", 0.0, on_gpu=False).precision == "fp32"
    assert choose_precision("int8", tmp_path, 1.0, on_gpu=False).precision == "int8"
    assert choose_precision("int8", tmp_path, 1.0, on_gpu=True).precision == "fp32"
