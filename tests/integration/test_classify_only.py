"""A label costs only the label: ``food11_classify`` (what ``client.classify``, ``--classify-only`` and
``POST /classify`` call) runs preprocess, classifier and label, never the vision encoder or the captioner; and a
caller that names only the label's outputs of ``food11_pipeline`` gets the same, as Triton runs only the steps
the requested outputs need. Held to Triton's own statistics."""

import time

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from repository_checks import models_built_from

from pipeline_src import PROJECT_ROOT
from pipeline_src.contract import CLASSIFY_ENSEMBLE, CLASSIFY_OUTPUTS, ENSEMBLE

REPOSITORY = PROJECT_ROOT / "model_repository"
# The models food11_pipeline is built from beyond food11_classify's (the vision encoder, caption_with_label, the
# captioner, and any step of yours), read from the configs the session's server copies.
CAPTIONING_STEPS = tuple(
    model
    for model in models_built_from(REPOSITORY, ENSEMBLE)[:-1]
    if model not in models_built_from(REPOSITORY, CLASSIFY_ENSEMBLE)
)


def inference_counts(triton_grpc, models) -> dict[str, int]:
    stats = {}
    for model in models:
        (entry,) = triton_grpc.get_inference_statistics(model, as_json=True)["model_stats"]
        stats[model] = int(entry.get("inference_count", 0))
    return stats


def once_counted(read, counted):
    """``read()`` once ``counted`` holds for it (Triton updates its statistics just after answering), or after a few
    seconds."""
    for _ in range(50):
        if counted(value := read()):
            break
        time.sleep(0.1)
    return value


def counts_once_counted(triton_grpc, models, before: dict[str, int], ran: str, expected: int) -> dict[str, int]:
    """``models``' inference counts once Triton has counted ``expected`` more inferences of ``ran`` than ``before``."""
    return once_counted(
        lambda: inference_counts(triton_grpc, models), lambda after: after[ran] - before[ran] >= expected
    )


def requests_answered(triton_grpc, ensemble: str) -> int:
    (entry,) = triton_grpc.get_inference_statistics(ensemble, as_json=True)["model_stats"]
    return int(entry["inference_stats"]["success"].get("count", 0))


def requests_answered_since(triton_grpc, ensemble: str, before: int, expected: int) -> int:
    """How many requests ``ensemble`` answered since it had answered ``before``, once Triton has counted
    ``expected`` of them."""
    return once_counted(
        lambda: requests_answered(triton_grpc, ensemble) - before, lambda answered: answered >= expected
    )


def raw_call(triton_grpc, photos: list[bytes], outputs: list[str] | None, model: str = ENSEMBLE):
    """``outputs`` None: name none, so get every output."""
    image = grpcclient.InferInput("IMAGE", [len(photos), 1], "BYTES")
    image.set_data_from_numpy(np.array([[photo] for photo in photos], dtype=np.object_))
    requested = None if outputs is None else [grpcclient.InferRequestedOutput(name) for name in outputs]
    return triton_grpc.infer(model, [image], outputs=requested).get_response(as_json=True)


def test_classify_calls_its_own_ensemble_which_runs_no_captioning(triton_grpc, client, photos):
    watched = (*CAPTIONING_STEPS, "label")
    before, classify_before = inference_counts(triton_grpc, watched), requests_answered(triton_grpc, CLASSIFY_ENSEMBLE)

    classified = client.classify([photos["apple.jpg"], photos["coffee.png"]])

    after = counts_once_counted(triton_grpc, watched, before, "label", 2)
    assert len(classified) == 2 and classified[0].label == "Vegetable/Fruit"
    assert {step: after[step] - before[step] for step in CAPTIONING_STEPS} == dict.fromkeys(CAPTIONING_STEPS, 0)
    assert after["label"] - before["label"] == 2
    # Its own ensemble, not food11_pipeline with some outputs named: Triton's response cache would store that
    # partial answer as food11_pipeline's answer for these photos.
    assert requests_answered_since(triton_grpc, CLASSIFY_ENSEMBLE, classify_before, 1) == 1


def test_the_classify_ensemble_answers_the_label_outputs_when_none_are_named(triton_grpc, photos):
    answer = raw_call(triton_grpc, [photos["apple.jpg"]], None, model=CLASSIFY_ENSEMBLE)
    assert sorted(output["name"] for output in answer["outputs"]) == sorted(CLASSIFY_OUTPUTS)


@pytest.mark.parametrize("outputs", [["LABEL", "PROBABILITY"], ["PROBABILITY"], ["MODELS"], list(CLASSIFY_OUTPUTS)])
def test_a_raw_call_naming_only_label_outputs_runs_no_captioning(triton_grpc, photos, outputs):
    watched = (*CAPTIONING_STEPS, "label")
    before = inference_counts(triton_grpc, watched)

    answer = raw_call(triton_grpc, [photos["apple.jpg"], photos["coffee.png"]], outputs)

    after = counts_once_counted(triton_grpc, watched, before, "label", 2)
    assert sorted(output["name"] for output in answer["outputs"]) == sorted(outputs)  # exactly those
    assert {step: after[step] - before[step] for step in CAPTIONING_STEPS} == dict.fromkeys(CAPTIONING_STEPS, 0)
    assert after["label"] - before["label"] == 2


def test_classify_gives_the_label_and_probability_a_full_answer_gives(client, photos):
    images = [photos["apple.jpg"], photos["coffee.png"], photos["chelsea.jpg"]]
    classified, captioned = client.classify(images), client.caption(images)
    assert [(c.label, c.probability, c.models) for c in classified] == [
        (c.label, c.probability, c.models) for c in captioned
    ]


def test_a_top_labels_call_leaves_out_the_captioning_too(triton_grpc, photos):
    watched = (*CAPTIONING_STEPS, "top_labels")
    before = inference_counts(triton_grpc, watched)
    answer = raw_call(triton_grpc, [photos["apple.jpg"]], ["TOP_LABELS"], model="food11_pipeline_topk")
    after = counts_once_counted(triton_grpc, watched, before, "top_labels", 1)
    assert [output["name"] for output in answer["outputs"]] == ["TOP_LABELS"]
    assert {step: after[step] - before[step] for step in CAPTIONING_STEPS} == dict.fromkeys(CAPTIONING_STEPS, 0)
    assert after["top_labels"] - before["top_labels"] == 1


def test_the_api_classifies_through_the_classify_ensemble_without_a_caption(api, client, triton_grpc, photos):
    before = requests_answered(triton_grpc, CLASSIFY_ENSEMBLE)
    response = httpx.post(f"{api.url}/classify", files={"photo": ("apple.jpg", photos["apple.jpg"], "image/jpeg")})
    assert response.status_code == 200, response.text
    assert requests_answered_since(triton_grpc, CLASSIFY_ENSEMBLE, before, 1) == 1
    body = response.json()
    (expected,) = client.classify([photos["apple.jpg"]])
    assert (body["label"], body["probability"]) == (expected.label, pytest.approx(expected.probability))
    assert "caption" not in body and body["models"] and "triton;dur=" in response.headers["Server-Timing"]


def test_the_api_names_a_bad_photo_on_classify_too(api):
    response = httpx.post(f"{api.url}/classify", files={"photo": ("x.jpg", b"not an image", "image/jpeg")})
    assert response.status_code == 400
    assert "preprocess" in response.json()["detail"]
