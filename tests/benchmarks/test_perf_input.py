"""The perf_analyzer input data the project writes is accepted by perf_analyzer against the real server,
for the ensemble and for each step, and it drives real inferences. A step added to an ensemble gets the
data the ensemble would hand it, and what cannot be fed is named with the reason."""

import base64
import json
import shutil

import numpy as np
import pytest

from benchmarks.lib.triton_stats import model_counters
from benchmarks.profiling import perf_analyzer
from benchmarks.profiling.perf_input import main, write_all, write_input_data
from pipeline_src.repository.scaffold import Layout, StepSpec, Tensor, create_step
from pipeline_src.repository.validate import validate_repository
from pipeline_src.steps.imaging import image_tensors

pytestmark = pytest.mark.integration

MODELS = ("food11_pipeline", "preprocess", "classifier", "vision_encoder", "label_and_caption", "captioner")


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


@pytest.mark.parametrize("model", MODELS)
def test_perf_analyzer_accepts_the_input_data_and_the_server_infers(model, triton, input_files, tmp_path):
    try:
        perf_analyzer.library_path()
    except perf_analyzer.PerfAnalyzerMissing as exc:
        pytest.skip(f"{exc} (make test installs it)")
    before = model_counters(triton.grpc_url)[model]
    # A loose stability bound: this checks that the data is accepted, not how fast the server is.
    measurement = perf_analyzer.measure(
        model,
        triton.grpc_url,
        input_files[model],
        concurrency=2,
        csv_path=tmp_path / "out.csv",
        requests_per_window=4,
        stability_percentage=999,
    )
    assert measurement.model == model and measurement.concurrency == 2
    assert measurement.throughput > 0 and measurement.p50_ms > 0
    assert model_counters(triton.grpc_url)[model].requests >= before.requests + 3 * 4


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
            (Tensor("PIXELS", "FP32", (3, 384, 384)),),
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
        np.testing.assert_array_equal(floats(entry["PIXELS"]), image_tensors(photo, 40_000_000).captioner)
    # quality_score: image_quality's BRIGHTNESS, computed here by its own compute (the row's mean times 2)
    entries = json.loads(result.written[QUALITY_SCORE].read_text())["data"]
    for entry, photo in zip(entries, fruit):
        expected = np.float32(image_tensors(photo, 40_000_000).captioner.astype(np.float64).mean() * 2)
        np.testing.assert_allclose(floats(entry["BRIGHTNESS"]), [expected], rtol=1e-6)
    # the pipeline's own files are still written, the same for the ensemble's callers
    assert {"food11_pipeline", "captioner", "top_labels", "preprocess"} <= set(result.written)
    # what cannot be fed is named, with why
    assert "CAPTION" in result.unfed[CAPTION_LENGTH] and "captioner" in result.unfed[CAPTION_LENGTH]
    assert "no ensemble feeds it" in result.unfed[ORPHAN]
    assert {CAPTION_LENGTH, ORPHAN, "model_manifests"} <= set(result.unfed)


def test_the_command_prints_what_it_wrote_and_what_it_could_not(extended, photos, tmp_path, capsys):
    folder = tmp_path / "photos"
    folder.mkdir()
    (folder / "apple.jpg").write_bytes(photos["apple.jpg"])
    main([str(folder), "--repository", str(extended), "--output-dir", str(tmp_path / "out")])
    lines = capsys.readouterr().out.splitlines()
    assert f"{IMAGE_QUALITY}: {tmp_path / 'out' / IMAGE_QUALITY}.json" in lines
    assert any(line.startswith(f"{ORPHAN}: not written: no ensemble feeds it") for line in lines), lines
    assert any(line.startswith(f"{CAPTION_LENGTH}: not written: ") for line in lines), lines
