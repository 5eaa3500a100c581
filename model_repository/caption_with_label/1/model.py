"""Step 4, BLS: a caption conditioned on the label step's answer. A thin adapter around
pipeline_src.steps.caption_with_label, handed the captioner call (pipeline_src.steps.captioner_bls)."""

import asyncio
import os

import triton_python_backend_utils as pb_utils

from pipeline_src.contract import RESPONSES_CACHED_ENV
from pipeline_src.steps.caption_with_label import PROBABILITIES, CaptionWithLabel, Refused
from pipeline_src.steps.captioner_bls import captioner_for
from pipeline_src.steps.settings import CaptionWithLabelSettings
from pipeline_src.steps.triton_step import StepContext, input_array


class TritonPythonModel:
    def initialize(self, args):
        self.step = StepContext(args)
        settings = CaptionWithLabelSettings.from_model_config(self.step.config)
        warn = lambda message: self.step.logger.log_warn(f"{self.step.name}: {message}")  # noqa: E731
        cached = os.environ.get(RESPONSES_CACHED_ENV) == "1"  # set by the launcher of a server that caches answers
        self.logic = CaptionWithLabel(
            settings, warn, self.step.outputs, refuse_failed_captions=settings.refuses_failed_captions(cached)
        )

    async def execute(self, requests):
        # The captioner calls of all requests are in flight at once; its dynamic batcher merges them.
        return await asyncio.gather(*(self._answer(request) for request in requests))

    async def _answer(self, request):
        captioner = captioner_for(request, self.logic.settings)
        try:
            outputs = await self.logic.answer(input_array(request, PROBABILITIES), captioner, request.timeout())
        except Refused as exc:
            return self.step.error(str(exc), getattr(pb_utils.TritonError, exc.code))
        return pb_utils.InferenceResponse(
            output_tensors=[pb_utils.Tensor(name, rows) for name, rows in outputs.items()]
        )
