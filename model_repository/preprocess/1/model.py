"""Step 1, preprocessing: raw image bytes -> classifier and captioner tensors, decoded once."""

import numpy as np
import triton_python_backend_utils as pb_utils

from pipeline_src.contract import IMAGE
from pipeline_src.steps.imaging import CAPTIONER_SIZE, CLASSIFIER_SIZE, ImageRejected, image_tensors
from pipeline_src.steps.settings import PreprocessSettings
from pipeline_src.steps.triton_step import StepContext, input_array


class TritonPythonModel:
    def initialize(self, args):
        self.step = StepContext(args)
        self.settings = PreprocessSettings.from_model_config(self.step.config)

    def execute(self, requests):
        return [self._preprocess(request) for request in requests]

    def _preprocess(self, request):
        images = input_array(request, IMAGE).reshape(-1)
        count = len(images)
        classifier = np.empty((count, 3, CLASSIFIER_SIZE, CLASSIFIER_SIZE), dtype=np.float32)
        captioner = np.empty((count, 3, CAPTIONER_SIZE, CAPTIONER_SIZE), dtype=np.float32)
        for index, data in enumerate(images):
            try:
                tensors = image_tensors(data, self.settings.max_pixels)
            except ImageRejected as exc:
                return self.step.error(f"image {index + 1} of {count}: {exc}")
            classifier[index] = tensors.classifier
            captioner[index] = tensors.captioner
        return pb_utils.InferenceResponse(
            output_tensors=[
                pb_utils.Tensor("CLASSIFIER_PIXELS", classifier),
                pb_utils.Tensor("CAPTIONER_PIXELS", captioner),
            ]
        )
