"""The captioner step's loop (pipeline_src.steps.caption_engine) on the tiny stand-in, without Triton: requests
joining the table mid-decode and leaving as their captions end get each caption they get alone (and Hugging
Face's); the queue policy refuses in Triton's words; a failed step fails what it held and the loop serves on;
stopping answers everything. Most tests run the loop an iteration at a time (threaded=False), so that every
join happens at a known step."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from pipeline_src.model_build.blip_fidelity import check_pixels
from pipeline_src.steps.caption_engine import QUEUE_FULL, CaptionEngine, Job, QueuePolicy, Refused
from pipeline_src.steps.captioning import GreedyCaptioner, table_sizes
from pipeline_src.steps.fixed_buffers import FixedBufferDecoder, runs
from pipeline_src.steps.onnx_runtime import OnnxModel
from pipeline_src.steps.settings import CaptionerSettings

PROMPTS = ["a photo of noodles/pasta,", "", "a photo of bread,", "a photo of vegetable/fruit,", "a dish"]
NEW_TOKENS = 12


@pytest.fixture(scope="module")
def graphs_dir(model_repository):
    return model_repository / "captioner" / "1" / "text_decoder"


@pytest.fixture(scope="module")
def embeds(model_repository):
    """Twelve photos' image embeddings: the check photos, mirrored and cropped, some twice."""
    vision = OnnxModel(model_repository / "vision_encoder" / "1" / "model.onnx")
    return vision(np.concatenate([check_pixels(9), check_pixels(3)]))


@pytest.fixture(scope="module")
def alone(graphs_dir, embeds):
    """Each (photo, prompt)'s caption alone, by the plain decoder (the build checks it against Hugging Face)."""
    plain = GreedyCaptioner.load(graphs_dir, max_new_tokens=NEW_TOKENS)
    return lambda row, prompt: plain.caption(embeds[row : row + 1], [prompt])[0]


def table(graphs_dir, rows: int = 8, **generation) -> GreedyCaptioner:
    decoder = FixedBufferDecoder(
        graphs_dir, max_prompt_tokens=16, max_new_tokens=NEW_TOKENS, batch_sizes=range(1, rows + 1)
    )
    plain = GreedyCaptioner.load(graphs_dir, max_new_tokens=NEW_TOKENS, **generation)
    return GreedyCaptioner(decoder, plain.tokenizer, max_new_tokens=NEW_TOKENS, **generation)


class Answers:
    """What the loop answered, per job name."""

    def __init__(self):
        self.got: dict[str, tuple[list[str] | None, BaseException | None]] = {}
        self.modes: dict[str, list[str] | None] = {}  # which mode made each caption (CAPTION_MODE)
        self.done = threading.Condition()

    def job(self, name: str, embeds, prompts, **fields) -> Job:
        def answer(captions, error, modes):
            with self.done:
                self.got[name] = (captions, error)
                self.modes[name] = modes
                self.done.notify_all()

        return Job(embeds, list(prompts), answer, **fields)


def test_requests_joining_mid_decode_get_the_captions_they_get_alone(graphs_dir, embeds, alone):
    """A three-photo request, then a two-photo one three steps later, then a one-photo one: each joins the rows
    in progress at that step, and every caption is the one its photo and prompt get alone."""
    engine = CaptionEngine(table(graphs_dir), threaded=False)
    answers = Answers()
    engine.submit(answers.job("a", embeds[0:3], PROMPTS[0:3]))
    for _ in range(3):
        engine.iterate()
    assert engine.rows_in_use == 3
    engine.submit(answers.job("b", embeds[3:5], PROMPTS[3:5]))
    engine.iterate()
    assert engine.rows_in_use == 5  # b joined while a is mid-caption
    engine.submit(answers.job("c", embeds[5:6], PROMPTS[1:2]))
    while engine.rows_in_use or engine.waiting:
        engine.iterate()
    expected = {
        "a": [alone(row, PROMPTS[row]) for row in range(3)],
        "b": [alone(3, PROMPTS[3]), alone(4, PROMPTS[4])],
        "c": [alone(5, PROMPTS[1])],
    }
    assert {name: captions for name, (captions, _) in answers.got.items()} == expected
    assert all(error is None for _, error in answers.got.values())


def test_rows_freed_by_early_endings_are_reused_by_requests_that_join_later(graphs_dir, embeds):
    """Rows end at different steps: a token that one (photo, prompt) writes first and two others never, taken as
    [SEP]. That pair in rows 1 and 3 ends at once, between rows 0 and 2 still writing; a two-photo request that
    joins next takes rows 1 and 3 (two runs, not next to each other) and gets its captions as they are alone."""
    plain = GreedyCaptioner.load(graphs_dir, max_new_tokens=NEW_TOKENS)
    pairs = [(row, prompt) for row in range(len(embeds)) for prompt in PROMPTS]
    tokens = {pair: plain.generate(embeds[pair[0] : pair[0] + 1], [plain.prompt_ids(pair[1])])[0] for pair in pairs}
    ending, others, sep = next(
        (pair, rest[:3], tokens[pair][0])
        for pair in pairs
        if len(rest := [other for other in pairs if tokens[pair][0] not in tokens[other]]) >= 3
    )
    captioner = table(graphs_dir, rows=4)
    for decoder in (captioner.decoder, plain.decoder):
        decoder.shape = {**decoder.shape, "sep_token_id": sep}
    engine = CaptionEngine(captioner, threaded=False)
    answers = Answers()
    for name, (row, prompt) in zip("abcd", [others[0], ending, others[1], ending]):
        engine.submit(answers.job(name, embeds[row : row + 1], [prompt]))
    engine.iterate()
    assert [held is not None for held in engine.rows] == [True, False, True, False]  # b and d ended at once
    last = others[2]
    engine.submit(answers.job("e", embeds[[others[0][0], last[0]]], [others[0][1], last[1]]))
    engine.iterate()
    assert not engine.waiting and [held[0] for held in engine.rows if held][1::2] == [engine.rows[1][0]] * 2
    while engine.rows_in_use or engine.waiting:
        engine.iterate()

    def alone(row, prompt):
        return plain.caption(embeds[row : row + 1], [prompt])[0]

    for name, (row, prompt) in zip("abcd", [others[0], ending, others[1], ending]):
        assert answers.got[name] == ([alone(row, prompt)], None), name
    assert answers.got["e"] == ([alone(*others[0]), alone(*last)], None)


def test_concurrent_callers_each_get_their_own_captions(graphs_dir, embeds, alone):
    """The threaded loop, callers from many threads at once: every request answered, each with its captions."""
    engine = CaptionEngine(table(graphs_dir)).start()
    answers = Answers()
    requests = {f"r{i}": ([i % 12, (i * 5) % 12][: 1 + i % 2], PROMPTS[i % 5]) for i in range(16)}

    def call(name):
        rows, prompt = requests[name]
        engine.submit(answers.job(name, embeds[rows], [prompt] * len(rows)))

    try:
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(call, requests))
        with answers.done:
            answers.done.wait_for(lambda: len(answers.got) == len(requests), timeout=300)
    finally:
        engine.close()
    for name, (rows, prompt) in requests.items():
        assert answers.got[name] == ([alone(row, prompt) for row in rows], None), name


def test_the_queue_policy_refuses_in_tritons_words(graphs_dir, embeds):
    engine = CaptionEngine(table(graphs_dir, rows=2), QueuePolicy(max_queue_size=1), threaded=False)
    answers = Answers()
    engine.submit(answers.job("waits", embeds[0:1], PROMPTS[0:1]))
    engine.submit(answers.job("refused", embeds[0:1], PROMPTS[0:1]))
    assert answers.got == {}  # every answer comes from the loop's thread, refusals too
    engine.iterate()  # the first joins; of two more, one waits past its deadline, one's caller has gone
    assert QUEUE_FULL in str(answers.got["refused"][1]) and answers.got["refused"][1].code == "UNAVAILABLE"
    engine.submit(answers.job("late", embeds[1:2], PROMPTS[1:2], deadline=0.0))
    engine.iterate()
    engine.submit(answers.job("gone", embeds[1:2], PROMPTS[1:2], is_cancelled=lambda: True))
    while engine.rows_in_use or engine.waiting:
        engine.iterate()
    assert "Request timeout expired" in str(answers.got["late"][1])
    assert answers.got["gone"][1].code == "CANCELLED"
    assert answers.got["waits"][1] is None


def test_a_requests_deadline_follows_tritons_rule():
    """Triton's: the default timeout, or the request's own where overriding is allowed and it is shorter."""
    assert QueuePolicy(0, 240_000_000, True).deadline(10.0, 1_000_000) == pytest.approx(11.0)
    assert QueuePolicy(0, 240_000_000, True).deadline(10.0, 0) == pytest.approx(250.0)
    assert QueuePolicy(0, 240_000_000, False).deadline(10.0, 1_000_000) == pytest.approx(250.0)
    assert QueuePolicy(0, 0, True).deadline(10.0, 1_000_000) is None  # no default: Triton never times out
    settings = CaptionerSettings(max_waiting_requests=3, waiting_timeout_microseconds=2000)
    assert QueuePolicy.from_settings(settings) == QueuePolicy(3, 2000, True)


def test_a_failed_step_fails_what_it_held_and_the_loop_serves_on(graphs_dir, embeds, alone, monkeypatch):
    """A fault that cannot be made on purpose otherwise (the device failing mid-step): stubbed once."""
    captioner = table(graphs_dir)
    engine = CaptionEngine(captioner, threaded=False, warn=lambda message: None)
    answers = Answers()
    engine.submit(answers.job("hit", embeds[0:2], PROMPTS[0:2]))
    engine.iterate()
    real = captioner.decoder.step_rows

    def broken(size, guarded=()):
        monkeypatch.setattr(captioner.decoder, "step_rows", real)
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(captioner.decoder, "step_rows", broken)
    engine.iterate()
    assert "illegal memory access" in str(answers.got["hit"][1]) and engine.rows_in_use == 0
    engine.submit(answers.job("next", embeds[2:3], PROMPTS[2:3]))
    while engine.rows_in_use or engine.waiting:
        engine.iterate()
    assert answers.got["next"] == ([alone(2, PROMPTS[2])], None)


def test_stopping_answers_every_request_waiting_or_in_progress(graphs_dir, embeds):
    engine = CaptionEngine(table(graphs_dir, rows=2), threaded=False)
    answers = Answers()
    engine.submit(answers.job("running", embeds[0:2], PROMPTS[0:2]))
    engine.iterate()
    engine.submit(answers.job("waiting", embeds[2:3], PROMPTS[2:3]))
    engine.close()
    assert "stopped while this request was in progress" in str(answers.got["running"][1])
    assert "stopped before this request began" in str(answers.got["waiting"][1])
    with pytest.raises(Refused, match="stopping"):
        engine.submit(answers.job("after", embeds[0:1], PROMPTS[0:1]))


def test_a_prompt_longer_than_the_tables_slots_is_captioned_alone(graphs_dir, embeds, alone):
    long_prompt = "a photo of " + " ".join(["noodles"] * 20)
    engine = CaptionEngine(table(graphs_dir), threaded=False)
    answers = Answers()
    engine.submit(answers.job("long", embeds[0:1], [long_prompt]))
    engine.iterate()
    assert answers.got["long"] == ([alone(0, long_prompt)], None) and engine.rows_in_use == 0


def test_runs_and_table_sizes():
    assert runs([0, 1, 2, 5, 6, 9]) == [(0, 2), (5, 6), (9, 9)]
    assert table_sizes(32, recorded=True) == (1, 2, 4, 8, 16, 32)
    assert table_sizes(48, recorded=True) == (1, 2, 4, 8, 16, 32, 48)
    assert table_sizes(3, recorded=False) == (1, 2, 3)


def test_a_failing_report_loses_figures_not_answers(graphs_dir, embeds, alone):
    warnings = []

    def broken_report():
        raise RuntimeError("metrics gone")

    engine = CaptionEngine(table(graphs_dir), report=broken_report, warn=warnings.append).start()
    answers = Answers()
    try:
        engine.submit(answers.job("a", embeds[0:1], PROMPTS[0:1]))
        with answers.done:
            answers.done.wait_for(lambda: "a" in answers.got, timeout=300)
    finally:
        engine.close()
    assert answers.got["a"] == ([alone(0, PROMPTS[0])], None)
    assert any("metrics gone" in warning for warning in warnings)


def test_pixels_encoded_in_the_loop_give_the_captions_of_the_embeddings(graphs_dir, model_repository, embeds, alone):
    """food11_pipeline_merged's path: a request sends uint8 pixels, the loop encodes them with the vision graph on
    the decoder's device and captions them; the captions are those of the vision encoder step's embeddings. A
    request with neither input, or the pixels to a captioner without the graph, is refused with why. Requests that
    join at the same step are encoded in one run of the vision graph, each captioned from its own rows of it."""
    from pipeline_src.steps.device_vision import DeviceVisionEncoder

    captioner = table(graphs_dir)
    vision = DeviceVisionEncoder(model_repository / "vision_encoder" / "1" / "model.onnx", captioner.decoder.device)
    batches: list[int] = []

    def counted(images):
        batches.append(len(images))
        return vision(images)

    pixels = np.concatenate([check_pixels(9), check_pixels(3)])[:5]
    engine = CaptionEngine(captioner, threaded=False, vision=counted)
    answers = Answers()
    engine.submit(answers.job("pixels", None, PROMPTS[:3], pixels=pixels[:3]))
    engine.submit(answers.job("more", None, PROMPTS[3:5], pixels=pixels[3:5]))
    engine.submit(answers.job("neither", None, PROMPTS[:1]))
    while engine.rows_in_use or engine.waiting or engine.refusals:
        engine.iterate()
    assert batches == [5]
    assert answers.got["pixels"] == ([alone(row, PROMPTS[row]) for row in range(3)], None)
    assert answers.got["more"] == ([alone(row, PROMPTS[row]) for row in range(3, 5)], None)
    assert "either IMAGE_EMBEDS or CAPTIONER_PIXELS" in str(answers.got["neither"][1])
    blind = CaptionEngine(table(graphs_dir), threaded=False)
    blind.submit(answers.job("blind", None, PROMPTS[:1], pixels=pixels[:1]))
    blind.iterate()
    assert "takes IMAGE_EMBEDS only" in str(answers.got["blind"][1])


# --- the fast mode's guard ----------------------------------------------------------------------------------------


def fast_table(graphs_dir, twin: str, margin: float, rows: int = 8) -> GreedyCaptioner:
    """A table whose steps run on ``twin`` graphs (the int8 ones stand for a fast path that does choose otherwise:
    the stand-in's fp16 twins agree with fp32 on every check token), guarded at ``margin``."""
    from pipeline_src.steps.fixed_buffers import FastGraphs
    from pipeline_src.steps.onnx_runtime import onnx_session
    from pipeline_src.steps.precision import precision_file

    fast = FastGraphs(
        onnx_session(precision_file(graphs_dir / "cross_kv.onnx", twin), cpu_arena=False),
        onnx_session(precision_file(graphs_dir / "decoder_step.onnx", twin)),
        margin,
    )
    decoder = FixedBufferDecoder(
        graphs_dir, max_prompt_tokens=16, max_new_tokens=NEW_TOKENS, batch_sizes=range(1, rows + 1), fast=fast
    )
    return GreedyCaptioner(decoder, GreedyCaptioner.load(graphs_dir).tokenizer, max_new_tokens=NEW_TOKENS)


def caption_all(captioner: GreedyCaptioner, embeds, prompts) -> tuple[list[str], list[str]]:
    engine = CaptionEngine(captioner, threaded=False)
    answers = Answers()
    for row, prompt in enumerate(prompts):
        engine.submit(answers.job(f"r{row}", embeds[row : row + 1], [prompt]))
    while engine.rows_in_use or engine.waiting:
        engine.iterate()
    names = [f"r{row}" for row in range(len(prompts))]
    return [answers.got[name][0][0] for name in names], [answers.modes[name][0] for name in names]


def test_the_guard_forced_on_every_step_gives_the_exact_captions_and_says_so(graphs_dir, embeds, alone):
    """Guarding every step (an infinite margin) redoes each on the exact graphs: the exact captions, each answer
    saying the fast mode made it with every step redone. Unguarded (margin 0), the fast graphs' own choices, which
    here differ for some photos: the guard is what made the difference."""
    prompts = [PROMPTS[row % len(PROMPTS)] for row in range(8)]
    exact = [alone(row, prompt) for row, prompt in enumerate(prompts)]
    guarded, modes = caption_all(fast_table(graphs_dir, "int8", float("inf")), embeds, prompts)
    assert guarded == exact
    assert all(
        mode.startswith("fast, ") and mode.split(", ")[1].split(" of ")[0] == mode.split(" of ")[1].split()[0]
        for mode in modes
    ), modes  # "fast, N of N steps exact"
    unguarded, modes = caption_all(fast_table(graphs_dir, "int8", 0.0), embeds, prompts)
    assert unguarded != exact and modes == ["fast"] * len(prompts)


def test_the_exact_mode_says_so(graphs_dir, embeds):
    _, modes = caption_all(table(graphs_dir), embeds, PROMPTS[:3])
    assert modes == ["exact"] * 3
