"""Step 1, preprocessing: raw image bytes -> classifier and captioner tensors, decoded once."""

import triton_python_backend_utils as pb_utils

from pipeline_src.contract import IMAGE
from pipeline_src.steps.batch_decode import BatchDecoder
from pipeline_src.steps.settings import PreprocessSettings
from pipeline_src.steps.triton_step import StepContext, input_array


class TritonPythonModel:
    def initialize(self, args):
        self.step = StepContext(args)
        settings = PreprocessSettings.from_model_config(self.step.config)
        self.decoder = BatchDecoder(settings.max_pixels, settings.decode_threads)

    def execute(self, requests):
        decoded = self.decoder.decode([input_array(request, IMAGE).reshape(-1) for request in requests])
        return [self._response(pixels) for pixels in decoded]

    def _response(self, pixels):
        if pixels.error is not None:
            return self.step.error(pixels.error)
        return pb_utils.InferenceResponse(
            output_tensors=[
                pb_utils.Tensor("CLASSIFIER_PIXELS", pixels.classifier),
                pb_utils.Tensor("CAPTIONER_PIXELS", pixels.captioner),
            ]
        )

    def finalize(self):
        self.decoder.close()
