"""A caller that names only the label's outputs pays only for the label: Triton's ensemble runs the steps the
requested outputs need (preprocess, classifier, label), never the vision encoder or the captioner."""

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from pipeline_src.contract import CLASSIFY_OUTPUTS, ENSEMBLE

pytestmark = pytest.mark.integration
CAPTIONING_STEPS = ("vision_encoder", "caption_with_label", "captioner")


def inference_counts(triton_grpc, models) -> dict[str, int]:
    stats = {}
    for model in models:
        (entry,) = triton_grpc.get_inference_statistics(model, as_json=True)["model_stats"]
        stats[model] = int(entry.get("inference_count", 0))
    return stats


def raw_call(triton_grpc, photos: list[bytes], outputs: list[str], model: str = ENSEMBLE):
    image = grpcclient.InferInput("IMAGE", [len(photos), 1], "BYTES")
    image.set_data_from_numpy(np.array([[photo] for photo in photos], dtype=np.object_))
    requested = [grpcclient.InferRequestedOutput(name) for name in outputs]
    return triton_grpc.infer(model, [image], outputs=requested).get_response(as_json=True)


@pytest.mark.parametrize("outputs", [["LABEL", "PROBABILITY"], ["PROBABILITY"], ["MODELS"], list(CLASSIFY_OUTPUTS)])
def test_a_raw_call_naming_only_label_outputs_runs_no_captioning(triton_grpc, client, photos, outputs):
    watched = (*CAPTIONING_STEPS, "label")
    before = inference_counts(triton_grpc, watched)

    answer = raw_call(triton_grpc, [photos["apple.jpg"], photos["coffee.png"]], outputs)

    after = inference_counts(triton_grpc, watched)
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
    before = inference_counts(triton_grpc, (*CAPTIONING_STEPS, "top_labels"))
    answer = raw_call(triton_grpc, [photos["apple.jpg"]], ["TOP_LABELS"], model="food11_pipeline_topk")
    after = inference_counts(triton_grpc, (*CAPTIONING_STEPS, "top_labels"))
    assert [output["name"] for output in answer["outputs"]] == ["TOP_LABELS"]
    assert {step: after[step] - before[step] for step in CAPTIONING_STEPS} == dict.fromkeys(CAPTIONING_STEPS, 0)
    assert after["top_labels"] - before["top_labels"] == 1


def test_the_api_classifies_without_a_caption(api, client, photos):
    response = httpx.post(f"{api.url}/classify", files={"photo": ("apple.jpg", photos["apple.jpg"], "image/jpeg")})
    assert response.status_code == 200, response.text
    body = response.json()
    (expected,) = client.classify([photos["apple.jpg"]])
    assert (body["label"], body["probability"]) == (expected.label, pytest.approx(expected.probability))
    assert "caption" not in body and body["models"] and "triton;dur=" in response.headers["Server-Timing"]


def test_the_api_names_a_bad_photo_on_classify_too(api):
    response = httpx.post(f"{api.url}/classify", files={"photo": ("x.jpg", b"not an image", "image/jpeg")})
    assert response.status_code == 400
    assert "preprocess" in response.json()["detail"]
