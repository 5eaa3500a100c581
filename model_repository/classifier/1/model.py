"""Step 2, the Food-11 classifier: all requests of an execute stacked into one ONNX Runtime run."""

import triton_python_backend_utils as pb_utils

from pipeline_src.steps.onnx_classifier import OnnxClassifier
from pipeline_src.steps.settings import ClassifierSettings
from pipeline_src.steps.triton_step import StepContext, input_array, split_rows, stack_requests


class TritonPythonModel:
    def initialize(self, args):
        self.step = StepContext(args)
        settings = ClassifierSettings.from_model_config(self.step.config)
        self.classifier = OnnxClassifier(
            str(self.step.version_dir / settings.onnx_file),
            on_gpu=self.step.on_gpu,
            device_id=self.step.device_id,
            intra_op_threads=settings.intra_op_threads,
        )
        self.step.logger.log_info(f"{self.step.name}: ONNX Runtime providers {self.classifier.providers}")

    def execute(self, requests):
        batch, sizes = stack_requests([input_array(request, "input") for request in requests])
        try:
            logits = self.classifier.logits(batch)
        except Exception as exc:  # an ONNX Runtime failure fails this batch, reported per request
            return self.step.internal_errors(requests, exc)
        return [
            pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("output", rows)])
            for rows in split_rows(logits, sizes)
        ]
