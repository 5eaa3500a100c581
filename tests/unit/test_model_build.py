"""The build command: the offline-default classifier, a course checkpoint, the BLIP stand-in."""

import numpy as np
import onnxruntime as ort
import pytest
import torch
from helpers import FRUIT_PHOTOS

from pipeline_src.model_build import classifier_export
from pipeline_src.model_build.cli import main as build_models
from pipeline_src.model_build.imagenet_food11 import IMAGENET_TO_FOOD11, UNCOVERED_CLASSES, ImageNetToFood11
from pipeline_src.steps.classification import predict
from pipeline_src.steps.imaging import image_tensors
from pipeline_src.steps.labels import FOOD11_CLASSES


def test_imagenet_table_names_match_torchvisions_class_list():
    from torchvision.models import MobileNet_V2_Weights

    categories = MobileNet_V2_Weights.IMAGENET1K_V1.meta["categories"]
    for food_class, members in IMAGENET_TO_FOOD11.items():
        for index, name in members.items():
            assert categories[index] == name, f"{food_class}: ImageNet {index} is {categories[index]!r}"
    assert set(IMAGENET_TO_FOOD11) == set(FOOD11_CLASSES)
    assert UNCOVERED_CLASSES == ("Egg", "Fried food", "Rice")


def test_head_softmax_is_the_imagenet_food_mass_renormalised():
    logits = torch.randn(3, 1000, generator=torch.Generator().manual_seed(1)) * 3
    food = torch.softmax(ImageNetToFood11()(logits), dim=1)
    imagenet = torch.softmax(logits, dim=1)
    mass = torch.stack([imagenet[:, list(IMAGENET_TO_FOOD11[name])].sum(1) for name in FOOD11_CLASSES], dim=1)
    torch.testing.assert_close(food, mass / mass.sum(1, keepdim=True), atol=1e-6, rtol=1e-4)
    uncovered = [FOOD11_CLASSES.index(name) for name in UNCOVERED_CLASSES]
    assert float(food[:, uncovered].max()) < 1e-20


@pytest.fixture(scope="module")
def default_classifier(model_repository):
    return ort.InferenceSession(
        str(model_repository / "classifier" / "1" / "model.onnx"), providers=["CPUExecutionProvider"]
    )


@pytest.mark.parametrize("photo", FRUIT_PHOTOS)
def test_offline_default_labels_real_fruit_photos_vegetable_fruit(default_classifier, photos, photo):
    pixels = image_tensors(photos[photo], 40_000_000).classifier[None]
    (logits,) = default_classifier.run(["output"], {"input": pixels})[0]
    prediction = predict(logits)
    assert prediction.label == "Vegetable/Fruit"
    assert prediction.probability > 0.9


def test_offline_default_has_a_dynamic_batch_axis(default_classifier):
    batch = np.random.default_rng(0).standard_normal((5, 3, 224, 224)).astype(np.float32)
    assert default_classifier.run(["output"], {"input": batch})[0].shape == (5, 11)


def test_course_state_dict_checkpoint_is_exported_and_matches_pytorch(tmp_path, capsys):
    torch.manual_seed(0)
    model = classifier_export.course_mobilenet_v2().eval()
    checkpoint = tmp_path / "food11.pth"
    torch.save(model.state_dict(), checkpoint)
    build_models(
        ["--repository", str(tmp_path / "repo"), "--classifier-checkpoint", str(checkpoint), "--blip-standin", "tiny"]
    )
    assert "max abs difference ONNX Runtime vs PyTorch" in capsys.readouterr().out
    session = ort.InferenceSession(str(tmp_path / "repo/classifier/1/model.onnx"), providers=["CPUExecutionProvider"])
    batch = torch.randn(3, 3, 224, 224)
    with torch.inference_mode():
        expected = model(batch).numpy()
    np.testing.assert_allclose(session.run(["output"], {"input": batch.numpy()})[0], expected, atol=1e-4)


def test_pickled_model_needs_the_explicit_trust_flag(tmp_path):
    checkpoint = tmp_path / "whole_model.pth"
    torch.save(classifier_export.course_mobilenet_v2(), checkpoint)
    with pytest.raises(ValueError, match="--trust-pickled-checkpoint"):
        classifier_export.load_checkpoint(checkpoint)
    assert isinstance(classifier_export.load_checkpoint(checkpoint, trust_pickle=True), torch.nn.Module)
