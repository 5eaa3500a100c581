"""Step 2b, BLIP's vision encoder: all requests of an execute stacked into one ONNX Runtime run."""

from pipeline_src.steps.onnx_step import OnnxStep
from pipeline_src.steps.settings import VisionEncoderSettings


class TritonPythonModel(OnnxStep):
    SETTINGS = VisionEncoderSettings
