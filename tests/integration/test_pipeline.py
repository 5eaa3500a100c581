"""The ensemble end to end, on a real tritonserver started by the test session."""

import asyncio
import json
import urllib.request

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.grpc as grpcclient
from helpers import FRUIT_PHOTOS
from prometheus_client.parser import text_string_to_metric_families

from food11_client import AsyncFood11Client
from pipeline_src.steps.classification import build_prompt
from pipeline_src.steps.labels import FOOD11_CLASSES

TEMPLATE = "a photo of {label},"  # model_repository/caption_with_label/config.pbtxt


def test_a_real_photo_gets_a_food11_label_a_probability_and_a_prompted_caption(client, photos):
    (result,) = client.caption([photos["coffee.png"]])
    assert result.label in FOOD11_CLASSES
    assert 0.0 < result.probability <= 1.0
    assert result.caption_status == "ok"
    assert result.caption.startswith(build_prompt(TEMPLATE, result.label))


@pytest.mark.parametrize("photo", FRUIT_PHOTOS)
def test_fruit_photos_are_vegetable_fruit(client, photos, photo):
    (result,) = client.caption([photos[photo]])
    assert result.label == "Vegetable/Fruit"
    assert result.caption.startswith("a photo of vegetable/fruit,")


def test_one_request_with_three_photos_equals_three_single_requests_in_order(client, photos):
    names = ["chelsea.jpg", "apple.jpg", "astronaut.webp"]
    together = client.caption([photos[name] for name in names])
    one_by_one = [client.caption([photos[name]])[0] for name in names]
    assert len(together) == 3
    for batched, single in zip(together, one_by_one):
        assert batched.label == single.label
        assert batched.probability == pytest.approx(single.probability, abs=1e-5)
        assert batched.caption == single.caption
        assert batched.caption_status == single.caption_status


def test_async_client_serves_concurrent_calls(triton, photos, client):
    expected = client.caption([photos["orange.jpg"]])

    async def many():
        async with AsyncFood11Client(triton.grpc_url, timeout_s=120) as food11:
            return await asyncio.gather(*(food11.caption([photos["orange.jpg"]]) for _ in range(4)))

    for results in asyncio.run(many()):
        assert results == expected


def run_step(raw, model, inputs, outputs):
    tensors = []
    for name, (array, dtype) in inputs.items():
        tensor = grpcclient.InferInput(name, list(array.shape), dtype)
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    result = raw.infer(model, tensors, outputs=[grpcclient.InferRequestedOutput(name) for name in outputs])
    return {name: result.as_numpy(name) for name in outputs}


def test_ensemble_equals_the_steps_run_one_by_one(client, triton_grpc, model_repository, photos):
    image = np.array([[photos["chelsea.jpg"]]], dtype=np.object_)
    pre = run_step(triton_grpc, "preprocess", {"IMAGE": (image, "BYTES")}, ["CLASSIFIER_PIXELS", "CAPTIONER_PIXELS"])
    logits = run_step(triton_grpc, "classifier", {"input": (pre["CLASSIFIER_PIXELS"], "FP32")}, ["output"])["output"]
    onnx = ort.InferenceSession(str(model_repository / "classifier/1/model.onnx"), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(logits, onnx.run(["output"], {"input": pre["CLASSIFIER_PIXELS"]})[0], atol=1e-5)
    embeds = run_step(
        triton_grpc, "vision_encoder", {"pixel_values": (pre["CAPTIONER_PIXELS"], "UINT8")}, ["image_embeds"]
    )["image_embeds"]
    label = run_step(
        triton_grpc, "label", {"LOGITS": (logits, "FP32")}, ["LABEL", "PROBABILITY", "PROBABILITIES", "MODELS"]
    )
    assert label["PROBABILITIES"].sum() == pytest.approx(1.0, abs=1e-5)
    assert label["PROBABILITY"][0, 0] == pytest.approx(label["PROBABILITIES"].max())
    caption = run_step(
        triton_grpc,
        "caption_with_label",
        {"PROBABILITIES": (label["PROBABILITIES"], "FP32"), "IMAGE_EMBEDS": (embeds, "FP32")},
        ["CAPTION", "CAPTION_STATUS", "PROMPT", "CAPTION_AFTER_PROMPT"],
    )

    (result,) = client.caption([photos["chelsea.jpg"]])
    assert result.label == label["LABEL"][0, 0].decode() == FOOD11_CLASSES[int(label["PROBABILITIES"].argmax())]
    assert result.probability == pytest.approx(float(label["PROBABILITY"][0, 0]), abs=1e-6)
    assert [entry["sha256"] for entry in json.loads(label["MODELS"][0, 0])] == [model.sha256 for model in result.models]
    assert result.caption == caption["CAPTION"][0, 0].decode()
    assert result.caption_status == caption["CAPTION_STATUS"][0, 0].decode()
    prompt, own_words = caption["PROMPT"][0, 0].decode(), caption["CAPTION_AFTER_PROMPT"][0, 0].decode()
    assert result.caption == f"{prompt} {own_words}".strip()


def test_two_photos_with_the_same_label_get_different_captions(client, photos):
    """The captioner reads the photo: same label, same prompt, different photos, different captions."""
    results = client.caption([photos[name] for name in ("apple.jpg", "orange.jpg", "fruits.jpg")])
    assert {result.label for result in results} == {"Vegetable/Fruit"}
    assert len({result.caption for result in results}) == 3, [result.caption for result in results]


def test_served_captions_equal_hugging_face_fp32_generate_on_the_same_pixels(
    client, triton_grpc, model_repository, photos
):
    """The course's captioner (Hugging Face BLIP fp32 generate), given the preprocessing step's pixels and
    the pipeline's prompt, writes exactly the caption the server returns."""
    from pipeline_src.model_build.hf_captioner import HuggingFaceCaptioner

    names = ("apple.jpg", "coffee.png", "chelsea.jpg", "astronaut.webp")
    served = client.caption([photos[name] for name in names])
    image = np.array([[photos[name]] for name in names], dtype=np.object_)
    pixels = run_step(triton_grpc, "preprocess", {"IMAGE": (image, "BYTES")}, ["CAPTIONER_PIXELS"])["CAPTIONER_PIXELS"]
    course = HuggingFaceCaptioner.load(model_repository / "captioner" / "1" / "blip", max_new_tokens=20)
    prompts = [build_prompt(TEMPLATE, result.label) if result.caption_status == "ok" else "" for result in served]
    assert [result.caption for result in served] == course.caption(pixels, prompts)


@pytest.fixture
def reloaded_bls_step(triton_grpc):
    """Reload caption_with_label with changed parameters; restore the original config afterwards
    (explicitly: Triton skips reloading a model whose files did not change)."""
    original = triton_grpc.get_model_config("caption_with_label", as_json=True)["config"]

    def reload(**parameters):
        config = json.loads(json.dumps(original))
        for key, value in parameters.items():
            config["parameters"][key] = {"string_value": str(value)}
        triton_grpc.load_model("caption_with_label", config=json.dumps(config))

    yield reload
    triton_grpc.load_model("caption_with_label", config=json.dumps(original))


def test_below_the_confidence_threshold_the_caption_has_no_label_prompt(client, photos, reloaded_bls_step):
    reloaded_bls_step(confidence_threshold=1.0)
    (result,) = client.caption([photos["apple.jpg"]])
    assert result.label == "Vegetable/Fruit" and result.probability < 1.0
    assert result.caption_status == "low_confidence"
    assert not result.caption.startswith("a photo of")


def test_captioner_over_its_timeout_still_gives_label_and_probability(client, photos, reloaded_bls_step):
    reloaded_bls_step(caption_timeout_ms=1)
    (result,) = client.caption([photos["orange.jpg"]])
    assert result.label == "Vegetable/Fruit" and 0 < result.probability <= 1
    assert result.caption == ""
    assert result.caption_status == "captioner_timeout: no caption within 1 ms"


def test_failing_captioner_still_gives_label_and_probability(client, triton_grpc, photos):
    triton_grpc.unload_model("captioner")  # a real fault: the BLS call finds no captioner
    try:
        (result,) = client.caption([photos["apple.jpg"]])
    finally:
        triton_grpc.load_model("captioner")
    assert result.label == "Vegetable/Fruit" and 0 < result.probability <= 1
    assert result.caption == ""
    assert result.caption_status.startswith("captioner_error: ")
    assert "captioner" in result.caption_status[len("captioner_error: ") :]
    (recovered,) = client.caption([photos["apple.jpg"]])
    assert recovered.caption_status == "ok"


def captioner_phases(triton) -> dict[str, tuple[float, float]]:
    """The captioner's (seconds, runs) per phase, from Triton's /metrics."""
    with urllib.request.urlopen(f"http://{triton.metrics_url}/metrics", timeout=10) as response:
        families = text_string_to_metric_families(response.read().decode())
    totals: dict[str, list[float]] = {}
    for family in families:
        for sample in family.samples:
            if sample.labels.get("model") == "captioner" and family.name.startswith("food11_step_phase_"):
                kind = 0 if "seconds" in family.name else 1
                totals.setdefault(sample.labels["phase"], [0.0, 0.0])[kind] += sample.value
    return {phase: (seconds, runs) for phase, (seconds, runs) in totals.items()}


def test_the_captioner_says_on_tritons_metrics_where_its_time_goes(client, triton, photos):
    """One request of two photos, alone on the server: it joins the loop's table once (one prefill for its two
    rows, next to each other), then every step carries both rows (the same photo: the captions end together); the
    figures reach /metrics before the answer does."""
    before = captioner_phases(triton)
    assert set(before) == {"iteration", "vision", "prefill", "decoder_step", "row_step"}
    client.caption([photos["coffee.png"], photos["coffee.png"]])
    after = captioner_phases(triton)
    seconds = {phase: after[phase][0] - before[phase][0] for phase in after}
    runs = {phase: after[phase][1] - before[phase][1] for phase in after}
    assert runs["prefill"] == 1 and runs["vision"] == 0  # food11_pipeline: the vision encoder step encoded it
    assert 1 <= runs["decoder_step"] <= 19  # max_new_tokens 20: at most 19 steps after the prompt's
    assert runs["iteration"] == runs["decoder_step"] and runs["row_step"] == 2 * runs["decoder_step"]
    assert seconds["iteration"] >= seconds["prefill"] + seconds["decoder_step"] > 0


def test_the_merged_ensemble_answers_as_the_separate_steps_do(triton, photos):
    """food11_pipeline_merged sends the captioner the pixels and it encodes them itself (the embeddings never leave
    its process): every answer is food11_pipeline's, photo for photo, in one request and each alone."""
    from food11_client import Food11Client

    names = ["apple.jpg", "coffee.png", "chelsea.jpg", "astronaut.webp"]
    chosen = [photos[name] for name in names]
    answers = {}
    for ensemble in ("food11_pipeline", "food11_pipeline_merged"):
        with Food11Client(triton.grpc_url, model=ensemble, timeout_s=120) as client:
            answers[ensemble] = [*client.caption(chosen), *(client.caption([photo])[0] for photo in chosen)]
    separate, merged = answers["food11_pipeline"], answers["food11_pipeline_merged"]
    assert [(a.label, a.caption, a.caption_status) for a in merged] == [
        (a.label, a.caption, a.caption_status) for a in separate
    ]
    assert all(answer.caption_status == "ok" or answer.caption for answer in merged)


def test_every_answer_says_which_mode_made_its_caption(client, triton_grpc, photos):
    """CAPTION_MODE: exact by default; with the captioner reloaded in the fast mode (its fp16 graphs, guarded),
    fast (saying how often the guard stepped in); exact again once it is restored."""
    original = triton_grpc.get_model_config("captioner", as_json=True)["config"]
    assert client.caption([photos["apple.jpg"]])[0].extra["CAPTION_MODE"] == "exact"
    fast = json.loads(json.dumps(original))
    fast["parameters"]["mode"] = {"string_value": "fast"}
    triton_grpc.load_model("captioner", config=json.dumps(fast))
    try:
        answers = client.caption([photos["apple.jpg"], photos["coffee.png"]])
        assert [a.caption_status for a in answers] == ["ok", "ok"] and all(a.caption for a in answers)
        assert all(a.extra["CAPTION_MODE"] == "fast" or a.extra["CAPTION_MODE"].startswith("fast, ") for a in answers)
    finally:
        triton_grpc.load_model("captioner", config=json.dumps(original))
    assert client.caption([photos["apple.jpg"]])[0].extra["CAPTION_MODE"] == "exact"
