"""Step 2, the Food-11 classifier: all requests of an execute stacked into one ONNX Runtime run."""

from pipeline_src.steps.onnx_step import OnnxStep
from pipeline_src.steps.settings import ClassifierSettings


class TritonPythonModel(OnnxStep):
    SETTINGS = ClassifierSettings
