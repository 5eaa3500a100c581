"""The vision encoder inside the captioner step (food11_pipeline_merged): uint8 pixels in, image embeddings out
where the captioner's decoder computes (the GPU on a GPU instance), so that they never cross to the host, through
Triton's shared memory or to another process's CUDA context on their way to the cross-attention."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort

from pipeline_src.steps.onnx_runtime import onnx_session
from pipeline_src.steps.precision import FAST_PRECISION, precision_file
from pipeline_src.steps.settings import CaptionerSettings


class DeviceVisionEncoder:
    def __init__(self, path: Path, device: tuple[str, int], on_gpu: bool = False, intra_op_threads: int = 0):
        self.session = onnx_session(path, on_gpu, device[1], intra_op_threads, cpu_arena=False)
        self.device = device  # the decoder's: where the embeddings stay
        (self.input,) = self.session.get_inputs()
        self.output = self.session.get_outputs()[0]

    def __call__(self, pixels: np.ndarray) -> ort.OrtValue:
        """``pixels`` uint8 ``[n, 3, 384, 384]`` -> ``image_embeds [n, 577, width]`` on the decoder's device."""
        binding = self.session.io_binding()
        binding.bind_cpu_input(self.input.name, np.ascontiguousarray(pixels))
        binding.bind_output(self.output.name, *self.device)
        self.session.run_with_iobinding(binding)
        return binding.get_outputs()[0]


class LazyDeviceVision:
    """A ``DeviceVisionEncoder`` of the graph ``vision_encoder_graph`` names, loaded at the first pixels it is handed:
    its memory (the vision encoder a second time, 350 MB with BLIP base) is paid only where food11_pipeline_merged is
    called, and the first such request pays its load. Its file is checked at once. Its precision: ``cpu_precision``'s
    choice for it (its own fidelity beside it), or in the fast mode its fp16 twin (built by --fast)."""

    def __init__(self, settings: CaptionerSettings, version_dir: Path, device: tuple[str, int], on_gpu: bool = False):
        self.path = (version_dir / settings.vision_encoder_graph).resolve()
        if not self.path.is_file():
            raise FileNotFoundError(
                f"vision_encoder_graph {settings.vision_encoder_graph!r}: {self.path} is missing (`make models` builds "
                'it; "" takes IMAGE_EMBEDS only)'
            )
        self.settings, self.device, self.on_gpu = settings, device, on_gpu
        self.encoder: DeviceVisionEncoder | None = None

    def __call__(self, pixels: np.ndarray) -> ort.OrtValue:
        if self.encoder is None:
            settings = self.settings
            fast = settings.mode == "fast"
            precision = FAST_PRECISION if fast else settings.choose_precision(self.path.parent, self.on_gpu).precision
            path = precision_file(self.path, precision)
            self.encoder = DeviceVisionEncoder(path, self.device, self.on_gpu, settings.intra_op_threads)
        return self.encoder(pixels)
