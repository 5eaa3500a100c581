"""OnnxModel, the classifier's and vision encoder's run: padded batches (a GPU instance's gpu_batch_sizes)
answer every row as the unpadded batch does, each on the session of its padded size."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline_src.steps.onnx_runtime import OnnxModel
from pipeline_src.steps.settings import ClassifierSettings


@pytest.fixture(scope="module")
def classifier_path(model_repository):
    return model_repository / "classifier" / "1" / "model.onnx"


@pytest.mark.parametrize("rows", [1, 3, 4, 9])
def test_a_padded_batch_answers_each_row_as_the_batch_as_it_came(classifier_path, rows):
    batch = np.random.default_rng(rows).standard_normal((rows, 3, 224, 224), dtype=np.float32)
    exact = OnnxModel(classifier_path)(batch)
    padded = OnnxModel(classifier_path, batch_sizes=(1, 4))
    answer = padded(batch)
    assert answer.shape == exact.shape == (rows, 11)
    np.testing.assert_allclose(answer, exact, rtol=1e-4, atol=1e-5)


def test_each_padded_size_has_its_own_session_and_sees_only_its_shape(classifier_path):
    model = OnnxModel(classifier_path, batch_sizes=(1, 4))
    seen: dict[int, set[int]] = {1: set(), 4: set()}
    for size, session in model.model.sessions.items():
        run = session.run

        def spy(names, feeds, _run=run, _size=size):
            seen[_size].add(len(next(iter(feeds.values()))))
            return _run(names, feeds)

        session.run = spy  # type: ignore[method-assign]
    for rows in (1, 2, 3, 4, 5, 1):
        model(np.zeros((rows, 3, 224, 224), np.float32))
    assert seen == {1: {1}, 4: {4}}  # 5 rows: a chunk of 4, then 1 row on the 1-session


def test_padding_applies_on_a_gpu_instance_only(model_repository):
    settings = ClassifierSettings(gpu_batch_sizes="1,8")
    version = model_repository / "classifier" / "1"
    assert OnnxModel.from_settings(settings, version, on_gpu=False).model.batch_sizes == ()


def test_padded_sessions_warm_up_on_zeros_of_the_inputs_own_type(model_repository):
    """The vision encoder takes uint8 pixels: each padded size's session runs once at load on uint8 zeros (float
    zeros would fail its load with ONNX Runtime's type error), then answers as the unpadded model."""
    vision = model_repository / "vision_encoder" / "1" / "model.onnx"
    model = OnnxModel(vision)
    assert model.input.type == "tensor(uint8)"
    padded = OnnxModel(vision, batch_sizes=(1, 2))
    pixels = np.random.default_rng(0).integers(0, 256, (2, *model.input.shape[1:]), dtype=np.uint8)
    np.testing.assert_allclose(padded(pixels[:1]), model(pixels[:1]), rtol=1e-4, atol=1e-4)
