"""The food11-caption CLI against the session's tritonserver."""

import json

import pytest
from helpers import extra_outputs

from food11_client import cli
from pipeline_src.contract import CLASSIFY_ENSEMBLE
from pipeline_src.provenance.standins import BLIP_STANDIN_WARNING, CLASSIFIER_STANDIN_WARNING
from pipeline_src.serving.ports import free_port


@pytest.fixture
def photo_files(tmp_path, photos):
    paths = {}
    for name in ("apple.jpg", "coffee.png"):
        paths[name] = tmp_path / name
        paths[name].write_bytes(photos[name])
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"not a jpeg")
    paths["broken.jpg"] = broken
    return paths


def test_prints_one_json_result_per_photo_in_order(triton, photo_files, capsys, model_repository):
    files = [str(photo_files["apple.jpg"]), str(photo_files["coffee.png"])]
    assert cli.main(["--url", triton.grpc_url, *files]) == 0
    printed = capsys.readouterr()
    results = json.loads(printed.out)
    assert [result["file"] for result in results] == files
    assert results[0]["label"] == "Vegetable/Fruit"
    assert set(results[1]) == {
        "file",
        "label",
        "probability",
        "caption",
        "caption_status",
        "models",
        "warnings",
        "extra",
    }
    assert list(results[1]["extra"]) == extra_outputs(model_repository)  # none as shipped
    assert [model["model"] for model in results[0]["models"]] == ["captioner", "classifier", "vision_encoder"]
    # the session's models are the offline stand-ins: each warning once, where a person reads it
    assert printed.err.count(f"warning: {BLIP_STANDIN_WARNING}") == 1
    assert printed.err.count(f"warning: {CLASSIFIER_STANDIN_WARNING}") == 1


def test_names_the_bad_photo(triton, photo_files, capsys):
    code = cli.main(["--url", triton.grpc_url, str(photo_files["apple.jpg"]), str(photo_files["broken.jpg"])])
    assert code == cli.EXIT_BAD_PHOTO
    assert f"bad photo: {photo_files['broken.jpg']}: " in capsys.readouterr().err


def test_missing_file_is_reported_before_calling_the_server(tmp_path, capsys):
    assert cli.main(["--url", "127.0.0.1:1", str(tmp_path / "nope.jpg")]) == cli.EXIT_BAD_PHOTO
    assert "cannot read" in capsys.readouterr().err


def test_says_clearly_when_the_server_is_down(photo_files, capsys):
    code = cli.main(["--url", f"127.0.0.1:{free_port()}", "--timeout", "10", str(photo_files["apple.jpg"])])
    assert code == cli.EXIT_SERVER_DOWN
    assert "Triton is not serving food11_pipeline" in capsys.readouterr().err


def test_classify_only_answers_the_label_from_the_classify_ensemble(triton, photo_files, capsys):
    apple = str(photo_files["apple.jpg"])
    assert cli.main(["-u", triton.grpc_url, "--classify-only", apple]) == 0  # perf_analyzer's spelling too
    (result,) = json.loads(capsys.readouterr().out)
    assert set(result) == {"file", "label", "probability", "models", "warnings"}
    assert result["label"] == "Vegetable/Fruit"
    down = cli.main(["--url", f"127.0.0.1:{free_port()}", "--timeout", "10", "--classify-only", apple])
    assert down == cli.EXIT_SERVER_DOWN
    assert f"Triton is not serving {CLASSIFY_ENSEMBLE}" in capsys.readouterr().err
