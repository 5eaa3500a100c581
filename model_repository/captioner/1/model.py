"""Step 4, BLIP captioning: the images of all requests in one batched generate, each with its prompt."""

import numpy as np
import triton_python_backend_utils as pb_utils

from pipeline_src.steps.captioning import BlipCaptioner, standin_info
from pipeline_src.steps.settings import CaptionerSettings
from pipeline_src.steps.triton_step import StepContext, bytes_tensor, input_array, split_rows, stack_requests


class TritonPythonModel:
    def initialize(self, args):
        self.step = StepContext(args)
        settings = CaptionerSettings.from_model_config(self.step.config)
        model_dir = self.step.version_dir / settings.model_dir
        standin = standin_info(model_dir)
        if standin:
            self.step.logger.log_warn(
                f"{self.step.name}: {model_dir} is a STAND-IN BLIP ({standin['size']}, random weights): "
                "its captions are MEANINGLESS. Build a real BLIP with scripts/build_models.py --blip."
            )
        self.captioner = BlipCaptioner(
            str(model_dir),
            device=self.step.torch_device,
            fp16=settings.fp16_on_gpu,
            cpu_precision=settings.cpu_precision,
            torch_threads=settings.torch_threads,
            max_new_tokens=settings.max_new_tokens,
            num_beams=settings.num_beams,
            repetition_penalty=settings.repetition_penalty,
        )
        self.step.logger.log_info(f"{self.step.name}: BLIP on {self.captioner.device} in {self.captioner.precision}")

    def execute(self, requests):
        pixels, sizes = stack_requests([input_array(request, "PIXEL_VALUES") for request in requests])
        prompts = [p.decode("utf-8") for request in requests for p in input_array(request, "PROMPT").reshape(-1)]
        try:
            captions = self.captioner.caption(pixels, prompts)
        except Exception as exc:  # a generation failure fails this batch, reported per request
            return self.step.internal_errors(requests, exc)
        return [
            pb_utils.InferenceResponse(output_tensors=[bytes_tensor("CAPTION", list(rows))])
            for rows in split_rows(np.array(captions, dtype=object), sizes)
        ]
