"""The perf_analyzer input data the project writes is accepted by perf_analyzer against the real server,
for the ensemble and for each step, and it drives real inferences."""

import json

import pytest

from pipeline_src.profiling import perf_analyzer
from pipeline_src.profiling.perf_input import write_input_data
from pipeline_src.profiling.triton_stats import model_counters

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
