"""The perf_analyzer input data the project writes is accepted by perf_analyzer against the real server,
for the ensemble and for each step, and it drives real inferences. A step added to an ensemble gets the
data the ensemble would hand it, and what cannot be fed is named with the reason."""

import base64
import json
import shutil
import struct

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from helpers import running

from pipeline_src.profiling import perf_analyzer
from pipeline_src.profiling.perf_input import main, write_all, write_input_data
from pipeline_src.profiling.step_runners import SPECIAL_RUNNERS, load_models
from pipeline_src.repository.scaffold import Layout, StepSpec, Tensor, create_step
from pipeline_src.repository.validate import validate_repository
from pipeline_src.serving.launcher import TritonServer
from pipeline_src.serving.ports import free_ports
from pipeline_src.steps.classification import plan_captions
from pipeline_src.steps.imaging import image_tensors
from pipeline_src.steps.settings import CaptionerSettings, CaptionWithLabelSettings

MODELS = ("food11_pipeline", "preprocess", "classifier", "vision_encoder", "caption_with_label", "captioner")


@pytest.fixture(scope="module")
def input_files(model_repository, photos, tmp_path_factory):
    fruit = [photos[name] for name in ("apple.jpg", "orange.jpg", "fruits.jpg")]
    return write_input_data(model_repository, fruit, tmp_path_factory.mktemp("perf_input"))


def test_every_model_of_the_pipeline_gets_one_entry_per_photo(input_files):
    assert set(MODELS) <= set(input_files)
    ensemble = json.loads(input_files["food11_pipeline"].read_text())["data"]
    assert len(ensemble) == 3 and ensemble[0]["IMAGE"]["shape"] == [1]
    captioner = json.loads(input_files["captioner"].read_text())["data"][0]
    assert set(captioner) == {"IMAGE_EMBEDS", "PROMPT"} and captioner["IMAGE_EMBEDS"]["shape"] == [577, 32]  # tiny
    vision = json.loads(input_files["vision_encoder"].read_text())["data"][0]
    assert set(vision) == {"pixel_values"} and vision["pixel_values"]["shape"] == [3, 384, 384]


def require_perf_analyzer() -> None:
    try:
        perf_analyzer.library_path()
    except perf_analyzer.PerfAnalyzerMissing as exc:
        pytest.skip(f"{exc} (make test installs it)")


def answered(server: TritonServer, model: str) -> int:
    """The requests ``model`` has answered successfully, by Triton's statistics."""
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        stats = client.get_inference_statistics(model, as_json=True)["model_stats"]
    return sum(int(version.get("inference_stats", {}).get("success", {}).get("count", 0)) for version in stats)


def assert_measured(server: TritonServer, model: str, input_file, tmp_path) -> None:
    """perf_analyzer measures the model on the input file, and the server answered every request it sent."""
    before = answered(server, model)
    # A loose stability bound: this checks that the data is accepted, not how fast the server is.
    measurement = perf_analyzer.measure(
        model,
        server.grpc_url,
        input_file,
        concurrency=2,
        csv_path=tmp_path / "out.csv",
        requests_per_window=4,
        stability_percentage=999,
    )
    assert measurement.model == model and measurement.concurrency == 2
    assert measurement.throughput > 0 and measurement.p50_ms > 0
    assert answered(server, model) >= before + 3 * 4


@pytest.mark.parametrize("model", MODELS)
def test_perf_analyzer_accepts_the_input_data_and_the_server_infers(model, triton, input_files, tmp_path):
    require_perf_analyzer()
    assert_measured(triton, model, input_files[model], tmp_path)


# --- a step of one's own, wired into food11_pipeline ----------------------------------------------------------

SUFFIX = "_pi"  # names of its own: a step of yours called image_quality may exist already
IMAGE_QUALITY, QUALITY_SCORE, CAPTION_LENGTH, ORPHAN = (
    f"{name}{SUFFIX}" for name in ("image_quality", "quality_score", "caption_length", "orphan")
)
BRIGHTNESS, SHARPNESS, SCORE, LENGTH = (
    f"{name}{SUFFIX.upper()}" for name in ("BRIGHTNESS", "SHARPNESS", "SCORE", "LENGTH")
)
WIRED = f"""
    {{
      model_name: "{IMAGE_QUALITY}"
      model_version: -1
      input_map {{ key: "PIXELS", value: "captioner_pixels" }}
      output_map {{ key: "BRIGHTNESS", value: "{BRIGHTNESS}" }}
      output_map {{ key: "SHARPNESS", value: "{SHARPNESS}" }}
    }},
    {{
      model_name: "{QUALITY_SCORE}"
      model_version: -1
      input_map {{ key: "BRIGHTNESS", value: "{BRIGHTNESS}" }}
      output_map {{ key: "SCORE", value: "{SCORE}" }}
    }},
    {{
      model_name: "{CAPTION_LENGTH}"
      model_version: -1
      input_map {{ key: "CAPTION_CODES", value: "CAPTION" }}
      output_map {{ key: "LENGTH", value: "{LENGTH}" }}
    }},"""
OUTPUTS = f"""
  {{ name: "{SHARPNESS}", data_type: TYPE_FP32, dims: [ 1 ] }},
  {{ name: "{SCORE}", data_type: TYPE_FP64, dims: [ 2 ] }},
  {{ name: "{LENGTH}", data_type: TYPE_FP32, dims: [ 1 ] }},
"""


@pytest.fixture(scope="module")
def extended(model_repository, tmp_path_factory):
    """A copy of the built repository with steps of one's own (docs/EXTENDING.md) wired into food11_pipeline:
    image_quality reads preprocess's pixels, quality_score reads image_quality's BRIGHTNESS, caption_length
    reads the CAPTION only the captioner makes; orphan is in no ensemble."""
    repository = shutil.copytree(model_repository, tmp_path_factory.mktemp("extended") / "model_repository")
    tests = repository.parent / "tests"
    one = (1,)
    steps = [
        StepSpec(
            IMAGE_QUALITY,
            (Tensor("PIXELS", "UINT8", (3, 384, 384)),),
            (Tensor("BRIGHTNESS", dims=one), Tensor("SHARPNESS", dims=one)),
        ),
        StepSpec(QUALITY_SCORE, (Tensor("BRIGHTNESS", dims=one),), (Tensor("SCORE", "FP64", (2,)),)),
        StepSpec(CAPTION_LENGTH, (Tensor("CAPTION_CODES", dims=one),), (Tensor("LENGTH", dims=one),)),
        StepSpec(ORPHAN),
    ]
    for spec in steps:
        create_step(spec, Layout(repository, tests))
    edit(
        repository / CAPTION_LENGTH / "config.pbtxt",
        '"CAPTION_CODES", data_type: TYPE_FP32',
        '"CAPTION_CODES", data_type: TYPE_STRING',
    )
    config = repository / "food11_pipeline" / "config.pbtxt"
    edit(config, "ensemble_scheduling {\n  step [", "ensemble_scheduling {\n  step [" + WIRED)
    edit(config, "\noutput [\n", "\noutput [" + OUTPUTS)
    return repository


def edit(path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, f"{old!r} in {path}"
    path.write_text(text.replace(old, new))


def floats(entry: dict, dtype: str = "<f4") -> np.ndarray:
    return np.frombuffer(base64.b64decode(entry["content"]["b64"]), dtype=dtype).reshape(entry["shape"])


def strings(entry: dict) -> list[str]:
    """A BYTES tensor's elements: each a 4-byte little-endian length, then the bytes."""
    raw, values, offset = base64.b64decode(entry["content"]["b64"]), [], 0
    while offset < len(raw):
        (length,) = struct.unpack_from("<I", raw, offset)
        values.append(raw[offset + 4 : offset + 4 + length].decode("utf-8"))
        offset += 4 + length
    return values


def test_the_extended_repository_is_valid(extended):
    report = validate_repository(extended)
    assert report.ok, report.text()


def test_a_new_step_gets_what_its_ensemble_would_hand_it_and_the_rest_is_named(extended, photos, tmp_path):
    fruit = [photos[name] for name in ("apple.jpg", "orange.jpg", "fruits.jpg")]
    result = write_all(extended, fruit, tmp_path)
    # image_quality: preprocess's real captioner pixels for each photo
    entries = json.loads(result.written[IMAGE_QUALITY].read_text())["data"]
    assert len(entries) == 3 and set(entries[0]) == {"PIXELS"}
    for entry, photo in zip(entries, fruit):
        np.testing.assert_array_equal(floats(entry["PIXELS"], "u1"), image_tensors(photo, 40_000_000).captioner)
    # quality_score: image_quality's BRIGHTNESS, computed here by its own compute (the row's mean times 2)
    entries = json.loads(result.written[QUALITY_SCORE].read_text())["data"]
    for entry, photo in zip(entries, fruit):
        expected = np.float32(image_tensors(photo, 40_000_000).captioner.astype(np.float64).mean() * 2)
        np.testing.assert_allclose(floats(entry["BRIGHTNESS"]), [expected], rtol=1e-6)
    # caption_length: the captions, the captioner run here for them (once, however many steps read them)
    (entry, *_) = json.loads(result.written[CAPTION_LENGTH].read_text())["data"]
    assert len(strings(entry["CAPTION_CODES"])) == 1 and strings(entry["CAPTION_CODES"])[0]
    assert [(run.callee, run.caller, run.photos) for run in result.callee_runs] == [
        ("captioner", "caption_with_label", 3)
    ]
    # the pipeline's own files are still written, the same for the ensemble's callers
    assert {"food11_pipeline", "captioner", "top_labels", "preprocess"} <= set(result.written)
    # what cannot be fed is named, with why and what to do
    assert "no ensemble feeds it" in result.unfed[ORPHAN] and "write its input file yourself" in result.unfed[ORPHAN]
    assert set(result.unfed) == {ORPHAN, "model_manifests"}


def test_a_step_after_the_bls_step_whose_callee_cannot_run_here_is_named_with_what_to_do(
    extended, photos, tmp_path, monkeypatch
):
    def missing_graphs(model, settings):
        raise FileNotFoundError("no text decoder graphs")

    monkeypatch.setitem(SPECIAL_RUNNERS, CaptionerSettings, missing_graphs)
    result = write_all(extended, [photos["apple.jpg"]], tmp_path)
    why = result.unfed[CAPTION_LENGTH]
    assert "caption_with_label's output 'CAPTION' comes from captioner, called by BLS" in why
    assert "no text decoder graphs" in why and "write its input file yourself" in why
    assert IMAGE_QUALITY in result.written and not result.callee_runs


def test_the_command_prints_what_it_wrote_and_what_it_could_not(extended, photos, tmp_path, capsys):
    folder = tmp_path / "photos"
    folder.mkdir()
    (folder / "apple.jpg").write_bytes(photos["apple.jpg"])
    main([str(folder), "--repository", str(extended), "--output-dir", str(tmp_path / "out")])
    lines = capsys.readouterr().out.splitlines()
    assert f"{IMAGE_QUALITY}: {tmp_path / 'out' / IMAGE_QUALITY}.json" in lines
    assert any(line.startswith(f"{ORPHAN}: not written: no ensemble feeds it") for line in lines), lines
    assert f"{CAPTION_LENGTH}: {tmp_path / 'out' / CAPTION_LENGTH}.json" in lines
    assert any(line.startswith("ran captioner here for caption_with_label's answers to 1 photos: ") for line in lines)


# --- a step after the BLS step, on a server ------------------------------------------------------------------

AFTER_BLS = (
    "caption_words_pi"  # reads caption_with_label's prompt and the caption's words, which only the captioner makes
)
WORDS = "CAPTION_WORDS_PI"
AFTER_BLS_CONFIG = f"""name: "{AFTER_BLS}"
backend: "python"
max_batch_size: 8
input [
  {{ name: "WORDS", data_type: TYPE_STRING, dims: [ 1 ] }},
  {{ name: "PROMPT", data_type: TYPE_STRING, dims: [ 1 ] }}
]
output [ {{ name: "CAPTION_WORDS", data_type: TYPE_INT32, dims: [ 1 ] }} ]
instance_group [ {{ count: 1, kind: KIND_CPU }} ]
"""
# Written by hand: a BYTES-input step, as small as a Python-backend step gets.
AFTER_BLS_MODEL = """import numpy as np

from pipeline_src.steps.triton_step import StepContext, answer_stacked


def count_words(batch):
    rows = zip(batch["WORDS"].reshape(-1), batch["PROMPT"].reshape(-1))
    words = [len(own.split()) + len(prompt.split()) for own, prompt in rows]
    return {"CAPTION_WORDS": np.array(words, dtype=np.int32).reshape(-1, 1)}


class TritonPythonModel:
    def initialize(self, args):
        self.step = StepContext(args)

    def execute(self, requests):
        return answer_stacked(self.step, requests, ["WORDS", "PROMPT"], count_words)
"""
AFTER_BLS_WIRED = f"""
    {{
      model_name: "{AFTER_BLS}"
      model_version: -1
      input_map {{ key: "WORDS", value: "caption_after_prompt" }}
      input_map {{ key: "PROMPT", value: "prompt" }}
      output_map {{ key: "CAPTION_WORDS", value: "{WORDS}" }}
    }},"""


@pytest.fixture(scope="module")
def after_bls(model_repository, tmp_path_factory):
    """A copy of the built repository with a step after caption_with_label, wired into food11_pipeline."""
    repository = shutil.copytree(model_repository, tmp_path_factory.mktemp("after_bls") / "model_repository")
    (repository / AFTER_BLS / "1").mkdir(parents=True)
    (repository / AFTER_BLS / "config.pbtxt").write_text(AFTER_BLS_CONFIG)
    (repository / AFTER_BLS / "1" / "model.py").write_text(AFTER_BLS_MODEL)
    config = repository / "food11_pipeline" / "config.pbtxt"
    edit(config, "ensemble_scheduling {\n  step [", "ensemble_scheduling {\n  step [" + AFTER_BLS_WIRED)
    edit(config, "\noutput [\n", f'\noutput [\n  {{ name: "{WORDS}", data_type: TYPE_INT32, dims: [ 1 ] }},\n')
    edit(
        config,
        '      output_map { key: "CAPTION_STATUS", value: "CAPTION_STATUS" }\n',
        '      output_map { key: "CAPTION_STATUS", value: "CAPTION_STATUS" }\n'
        '      output_map { key: "PROMPT", value: "prompt" }\n'
        '      output_map { key: "CAPTION_AFTER_PROMPT", value: "caption_after_prompt" }\n',
    )
    return repository


@pytest.fixture(scope="module")
def after_bls_server(after_bls, tmp_path_factory):
    """A server of that copy with the new step alone loaded: perf_analyzer profiles it alone."""
    server = TritonServer(
        after_bls,
        tmp_path_factory.mktemp("after_bls_triton"),
        free_ports(),
        extra_args=("--model-control-mode=explicit", f"--load-model={AFTER_BLS}"),
    )
    with running(server):
        yield server


def test_a_step_after_the_bls_step_gets_real_captions_and_perf_analyzer_measures_it(
    after_bls, after_bls_server, photos, tmp_path
):
    require_perf_analyzer()
    fruit = [photos[name] for name in ("apple.jpg", "orange.jpg", "fruits.jpg")]
    result = write_all(after_bls, fruit, tmp_path / "perf_input")
    entries = json.loads(result.written[AFTER_BLS].read_text())["data"]
    own_words = [strings(entry["WORDS"])[0] for entry in entries]
    prompts = [strings(entry["PROMPT"])[0] for entry in entries]
    # What caption_with_label would answer: its prompt for the label step's probabilities, and the words the
    # captioner added to it.
    probabilities = np.stack(
        [
            floats(entry["PROBABILITIES"])
            for entry in json.loads(result.written["caption_with_label"].read_text())["data"]
        ]
    )
    settings = load_models(after_bls)["caption_with_label"].settings()
    assert isinstance(settings, CaptionWithLabelSettings)
    plans = plan_captions(probabilities, settings.prompt_template, settings.confidence_threshold)
    assert prompts == plans.prompts
    assert any(plans.prompts), "no confident label among the fruit: the prompt is not checked"
    assert all(words.strip() for words in own_words)
    assert [run.callee for run in result.callee_runs] == ["captioner"] and result.callee_runs[0].seconds > 0
    assert AFTER_BLS not in result.unfed
    assert_measured(after_bls_server, AFTER_BLS, result.written[AFTER_BLS], tmp_path)
