"""The worked example of extending the pipeline: top_labels and the second ensemble food11_pipeline_topk,
on the session's real tritonserver, next to an untouched food11_pipeline."""

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from pipeline_src.contract import CORE_OUTPUTS
from pipeline_src.steps.labels import FOOD11_CLASSES

PIPELINE_OUTPUTS = list(CORE_OUTPUTS)  # the wire contract: what every caller of food11_pipeline reads
TOP_OUTPUTS = ["TOP_LABELS", "TOP_PROBABILITIES"]
PHOTOS = ["coffee.png", "apple.jpg", "chelsea.jpg"]


def infer(triton_grpc, model: str, photos: list[bytes], outputs: list[str]) -> dict[str, np.ndarray]:
    images = np.array([[photo] for photo in photos], dtype=np.object_)
    tensor = grpcclient.InferInput("IMAGE", list(images.shape), "BYTES")
    tensor.set_data_from_numpy(images)
    result = triton_grpc.infer(
        model, [tensor], outputs=[grpcclient.InferRequestedOutput(name) for name in outputs], client_timeout=120
    )
    return {name: result.as_numpy(name) for name in outputs}


@pytest.fixture(scope="module")
def answers(triton_grpc, photos):
    """Both ensembles' answers for the same photos, in one request each."""
    batch = [photos[name] for name in PHOTOS]
    return (
        infer(triton_grpc, "food11_pipeline", batch, PIPELINE_OUTPUTS),
        infer(triton_grpc, "food11_pipeline_topk", batch, PIPELINE_OUTPUTS + TOP_OUTPUTS),
    )


def test_topk_gives_three_labels_per_photo_sorted_by_probability(answers):
    _, topk = answers
    labels, probabilities = topk["TOP_LABELS"], topk["TOP_PROBABILITIES"]
    assert labels.shape == probabilities.shape == (len(PHOTOS), 3)
    for row_labels, row_probabilities in zip(labels, probabilities):
        names = [label.decode("utf-8") for label in row_labels]
        assert len(set(names)) == 3 and set(names) <= set(FOOD11_CLASSES)
        assert np.all(np.diff(row_probabilities) <= 0), row_probabilities
        assert 0.0 < row_probabilities.sum() <= 1.0 + 1e-6


def test_topk_first_label_and_probability_are_the_pipelines_label_and_probability(answers):
    _, topk = answers
    np.testing.assert_array_equal(topk["TOP_LABELS"][:, :1], topk["LABEL"])
    np.testing.assert_array_equal(topk["TOP_PROBABILITIES"][:, :1], topk["PROBABILITY"])
    assert topk["LABEL"][1, 0] == b"Vegetable/Fruit"  # apple.jpg: the classifier is sure of it


def test_food11_pipeline_answers_exactly_as_the_topk_ensemble_does_for_the_core_outputs(answers):
    pipeline, topk = answers
    for name in PIPELINE_OUTPUTS:
        np.testing.assert_array_equal(pipeline[name], topk[name], err_msg=name)


def test_food11_pipeline_still_declares_the_core_outputs(triton_grpc):
    """The wire contract (pipeline_src.contract.CORE_OUTPUTS): a caller names the outputs it reads, so the
    ensemble may declare more (a step of yours wired in); renaming or removing one of these breaks callers."""
    metadata = triton_grpc.get_model_metadata("food11_pipeline", as_json=True)
    declared = [output["name"] for output in metadata["outputs"]]
    missing = [name for name in CORE_OUTPUTS if name not in declared]
    assert not missing, (
        f"food11_pipeline no longer declares {missing}, which every caller reads (pipeline_src.contract)"
    )


def test_a_bad_photo_in_the_topk_ensemble_fails_naming_the_step(triton_grpc, photos):
    with pytest.raises(InferenceServerException, match="preprocess: image 2 of 2: cannot decode") as caught:
        infer(triton_grpc, "food11_pipeline_topk", [photos["apple.jpg"], b"not an image"], TOP_OUTPUTS)
    assert caught.value.status() == "StatusCode.INVALID_ARGUMENT"


def test_top_labels_alone_refuses_a_request_that_is_not_a_distribution_and_serves_the_next(triton_grpc):
    def call(probabilities: np.ndarray):
        tensor = grpcclient.InferInput("PROBABILITIES", list(probabilities.shape), "FP32")
        tensor.set_data_from_numpy(probabilities)
        return triton_grpc.infer("top_labels", [tensor])

    with pytest.raises(InferenceServerException, match="top_labels: PROBABILITIES: row 2 of 2 is not a probability"):
        call(np.stack([np.full(11, 1 / 11), np.full(11, 0.5)]).astype(np.float32))
    rows = np.full((1, 11), 0.05, dtype=np.float32)
    rows[0, FOOD11_CLASSES.index("Rice")] = 0.5
    assert call(rows).as_numpy("TOP_LABELS")[0, 0] == b"Rice"
