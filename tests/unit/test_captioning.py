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
from pipeline_src.steps.captioning import GreedyCaptioner, standin_info
from pipeline_src.steps.fixed_buffers import FixedBufferDecoder, FixedState
from pipeline_src.steps.imaging import normalise_captioner
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
    with torch.device("meta"):  # shapes without weights: counting needs no 224M random numbers
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
        expected = model.vision_model(pixel_values=torch.from_numpy(normalise_captioner(pixels)))[0].numpy()
    assert np.abs(vision(pixels) - expected).max() <= 1e-4 * np.abs(expected).max()


def test_uint8_pixels_normalised_in_the_graph_are_the_float_pixels_bit_for_bit(blip_dir, pixels, tmp_path):
    """The preprocess step sends uint8 pixels and the vision graph normalises them: its embeddings are, bit for
    bit, those of the same graph without the normalisation fed the float pixels the preprocess step sent before."""
    from pipeline_src.model_build.blip_onnx import VisionEncoder, export_vision_encoder

    blip = BlipForConditionalGeneration.from_pretrained(str(blip_dir)).eval()
    with torch.inference_mode():
        export_vision_encoder(VisionEncoder(blip), tmp_path / "uint8.onnx")
        floats = tmp_path / "float.onnx"
        torch.onnx.export(
            VisionEncoder(blip).vision,
            (torch.zeros(2, 3, 384, 384),),
            str(floats),
            input_names=["pixel_values"],
            output_names=["image_embeds"],
            dynamic_axes={"pixel_values": {0: "b"}, "image_embeds": {0: "b"}},
            opset_version=17,
            dynamo=False,
        )
    assert pixels.dtype == np.uint8
    ours = OnnxModel(tmp_path / "uint8.onnx")(pixels)
    before = ort.InferenceSession(str(floats)).run(None, {"pixel_values": normalise_captioner(pixels)})[0]
    assert np.array_equal(ours, before)


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
    """Batches padded to a few sizes, on the first rows of buffers allocated once, two sets of buffers that the
    steps alternate between, one binding per size and parity made once (CUDA graphs' addresses): the plain
    decoder's captions and first tokens."""
    fixed = GreedyCaptioner(
        FixedBufferDecoder(graphs_dir, max_prompt_tokens=16, max_new_tokens=12, batch_sizes=(1, 4)),
        captioner.tokenizer,
        max_new_tokens=12,
    )
    embeds = vision(pixels)
    for rows in (3, 1, 4, 3):  # padded to 4, then 1, then 4's bindings again
        prompts = (PROMPTS * 2)[:rows]
        assert fixed.caption(embeds[:rows], prompts) == captioner.caption(embeds[:rows], prompts)
    assert sorted(fixed.decoder.bindings) == [(1, 0), (1, 1), (4, 0), (4, 1)]
    prompt_ids = [captioner.prompt_ids(prompt) for prompt in PROMPTS]
    ours, state = fixed.decoder.start(embeds[:3], prompt_ids, 12)
    theirs, _ = captioner.decoder.start(embeds[:3], prompt_ids, 12)
    assert isinstance(state, FixedState) and state.size == 4 and ours.tolist() == theirs.tolist()


def test_a_batch_beyond_the_fixed_buffers_is_captioned_as_by_the_plain_decoder(captioner, graphs_dir, vision, pixels):
    decoder = FixedBufferDecoder(graphs_dir, max_prompt_tokens=4, max_new_tokens=12, batch_sizes=(1, 2))
    fixed = GreedyCaptioner(decoder, captioner.tokenizer, max_new_tokens=12)
    embeds = vision(pixels[:3])
    assert fixed.caption(embeds, PROMPTS) == captioner.caption(embeds, PROMPTS)  # 3 rows, prompts over 4 tokens
    assert fixed.caption(embeds[:1], [""]) == captioner.caption(embeds[:1], [""])  # fits: [DEC] alone
    assert sorted(decoder.bindings) == [(1, 0), (1, 1)]


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


def test_the_repetition_penalty_on_the_device_is_hugging_faces(graphs_dir, hugging_face, vision, pixels):
    """The decoder step applies the penalty before its greedy choice: generate's captions with the same penalty
    (a strong one, so that it changes captions here)."""
    penalised = GreedyCaptioner.load(graphs_dir, max_new_tokens=12, repetition_penalty=3.0)
    plain = GreedyCaptioner.load(graphs_dir, max_new_tokens=12)
    prompts = (PROMPTS * 2)[: len(pixels)]
    penalising = HuggingFaceCaptioner(hugging_face.model, hugging_face.tokenizer, 12, repetition_penalty=3.0)
    expected = penalising.caption(pixels, prompts)
    assert penalised.caption(vision(pixels), prompts) == expected
    assert expected != plain.caption(vision(pixels), prompts)


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


# --- the greedy loop on the decoder's device (issue: only the next tokens come to the host) ---------------------

VARIED_PROMPTS = ["a photo of noodles/pasta,", "", "a photo of bread,", "a photo of vegetable/fruit,", "a dish"]


def host_greedy(decoder: TextDecoder, embeds, prompt_ids, max_new_tokens: int, sep: int) -> list[list[int]]:
    """The earlier captioner's loop, the logits on the host: argmax there after Hugging Face's repetition
    penalty (1.0 here), each row stopping at ``sep``."""
    logits, state = decoder.prefill(embeds, prompt_ids, max_new_tokens)
    generated: list[list[int]] = [[] for _ in prompt_ids]
    unfinished = np.ones(len(prompt_ids), dtype=bool)
    for step in range(max_new_tokens):
        tokens = logits.argmax(axis=-1)
        for row in np.flatnonzero(unfinished):
            generated[row].append(int(tokens[row]))
        unfinished &= tokens != sep
        if not unfinished.any() or step == max_new_tokens - 1:
            return generated
        logits = decoder.advance(state, tokens)
    return generated


def ended_at(tokens: list[int], sep: int) -> list[int]:
    """A generation as it would have stopped at ``sep``: the same choices up to it."""
    return tokens[: tokens.index(sep) + 1] if sep in tokens else tokens


@pytest.fixture(scope="module")
def many_rows(vision, hugging_face, captioner):
    """32 rows: the check photos, mirrored and cropped, with prompts of different lengths (one empty); each row's
    tokens as Hugging Face fp32 generate gives them alone."""
    pixels = np.concatenate([check_pixels(9)] * 4)[:32]
    prompt_ids = [captioner.prompt_ids(VARIED_PROMPTS[row % len(VARIED_PROMPTS)]) for row in range(32)]
    alone = [hugging_face.new_tokens(pixels[row], prompt_ids[row]) for row in range(32)]
    return vision(pixels), prompt_ids, alone


@pytest.fixture(scope="module")
def early_sep(many_rows):
    """A token that some rows generate early and others never: taken as the end of a caption, it makes rows of
    one batch end at different steps (the stand-in's random weights rarely write the real [SEP])."""
    _, _, alone = many_rows
    counts = {}
    for tokens in alone:
        for token in set(tokens[:4]):
            counts[token] = counts.get(token, 0) + 1
    token = max((count, token) for token, count in counts.items() if count < len(alone))[1]
    assert sum(token not in tokens for tokens in alone) > 0
    return token


@pytest.mark.parametrize("fixed", [False, True], ids=["plain", "fixed_buffers"])
@pytest.mark.parametrize("ending", ["sep", "early"])
def test_the_device_loop_gives_each_row_its_tokens_alone_at_every_batch_size(
    graphs_dir, captioner, many_rows, early_sep, fixed, ending
):
    """Batches of 1 to 32 rows with mixed prompt lengths, rows ending at different steps: every row's tokens are
    Hugging Face fp32 generate's for it alone, and the earlier host-side loop's."""
    embeds, prompt_ids, alone = many_rows
    sep = early_sep if ending == "early" else captioner.decoder.shape["sep_token_id"]
    decoder = (
        FixedBufferDecoder(graphs_dir, max_prompt_tokens=16, max_new_tokens=12) if fixed else TextDecoder(graphs_dir)
    )
    decoder.shape = {**decoder.shape, "sep_token_id": sep}
    greedy = GreedyCaptioner(decoder, captioner.tokenizer, max_new_tokens=12)
    for rows in (1, 2, 3, 5, 8, 13, 16, 32):
        got = greedy.generate(embeds[:rows], prompt_ids[:rows])
        assert got == [ended_at(tokens, sep) for tokens in alone[:rows]], rows
        assert got == host_greedy(TextDecoder(graphs_dir), embeds[:rows], prompt_ids[:rows], 12, sep), rows
    if ending == "early":
        assert len({len(tokens) for tokens in greedy.generate(embeds, prompt_ids)}) > 1  # they did end apart


@pytest.mark.parametrize("fixed", [False, True], ids=["plain", "fixed_buffers"])
def test_no_decoder_step_sends_the_logits_to_the_host(graphs_dir, captioner, many_rows, fixed):
    """What a step binds is what it hands back: a token per row and the next step's inputs, where the step runs;
    never a [rows, vocab] float tensor (the logits, 122 KB a row at BLIP's vocabulary, every step)."""
    embeds, prompt_ids, _ = many_rows
    decoder = (
        FixedBufferDecoder(graphs_dir, max_prompt_tokens=16, max_new_tokens=12, batch_sizes=(4, 8))
        if fixed
        else TextDecoder(graphs_dir)
    )
    vocab = decoder.shape["vocab_size"]
    tokens, state = decoder.start(embeds[:6], prompt_ids[:6], 12)
    bindings = [state.binding]
    for _ in range(3):
        decoder.step(state)
        bindings.append(state.binding)
    if fixed:
        assert set(map(id, bindings[1:])) == {id(binding) for binding in decoder.bindings.values()}
    for binding in bindings:
        for value in binding.get_outputs():
            assert not (value.data_type() == "tensor(float)" and value.shape()[-1] == vocab), value.shape()
    assert tokens.shape == (6,) and tokens.dtype == np.int64


def test_the_warm_up_makes_every_sizes_bindings_before_serving(graphs_dir, captioner):
    """On a GPU each (size, parity) binding's first run is recorded as a CUDA graph: the warm-up runs them all,
    so no request pays for a recording."""
    decoder = FixedBufferDecoder(graphs_dir, max_prompt_tokens=16, max_new_tokens=4, batch_sizes=(1, 2, 4))
    assert decoder.warm_sizes == (1,)  # nothing is recorded on the CPU: one size warms its kernels and arena
    decoder.records = True  # as on a GPU with gpu_cuda_graphs (the CPU ignores the run's graph id)
    GreedyCaptioner(decoder, captioner.tokenizer, max_new_tokens=4).warm_up()
    assert sorted(decoder.bindings) == [(size, parity) for size in (1, 2, 4) for parity in (0, 1)]


def test_the_build_wrote_the_fast_modes_fidelity_and_its_guard(graphs_dir):
    """`--fast`: fp16 twins, the guard's margin calibrated on the check photos, its teacher-forced agreement without
    the guard and the captions with it, for food11_pipeline and for food11_pipeline_merged."""
    fast = json.loads((graphs_dir / "fidelity.json").read_text())["options"]["fp16"]
    assert 0.0 < fast["teacher_forced_top1"] <= 1.0 and fast["teacher_forced_tokens"] == 160
    assert fast["guard_margin"] > 0 and 0 <= fast["guard_redone_steps"] <= fast["guard_steps"]
    assert fast["captions"] == fast["merged"]["captions"] == 8 and fast["captions_identical"] <= 8
    for name in ("cross_kv.fp16.onnx", "decoder_step.fp16.onnx"):
        assert (graphs_dir / name).is_file()
