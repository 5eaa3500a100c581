"""Step 3, BLS: label and probability from the logits, then a caption conditioned on the label. A thin adapter
around pipeline_src.steps.label_and_caption, handed the captioner call (pipeline_src.steps.captioner_bls)."""

import asyncio

import triton_python_backend_utils as pb_utils

from pipeline_src.provenance.served import identity_json
from pipeline_src.steps.captioner_bls import captioner_for
from pipeline_src.steps.label_and_caption import LOGITS, LabelAndCaption, Refused
from pipeline_src.steps.settings import LabelAndCaptionSettings
from pipeline_src.steps.triton_step import StepContext, input_array


class TritonPythonModel:
    def initialize(self, args):
        self.step = StepContext(args)
        settings = LabelAndCaptionSettings.from_model_config(self.step.config)
        # Which weights answer, read from the manifests of the versions Triton loads beside this step.
        models = identity_json(self.step.repository)
        self.step.logger.log_info(f"{self.step.name}: every answer names the models {models}")
        warn = lambda message: self.step.logger.log_warn(f"{self.step.name}: {message}")  # noqa: E731
        self.logic = LabelAndCaption(settings, models, warn, declared_outputs=self.step.outputs)

    async def execute(self, requests):
        # The captioner calls of all requests are in flight at once; its dynamic batcher merges them.
        return await asyncio.gather(*(self._answer(request) for request in requests))

    async def _answer(self, request):
        captioner = captioner_for(request, self.logic.settings)
        try:
            outputs = await self.logic.answer(input_array(request, LOGITS), captioner, request.timeout())
        except Refused as exc:
            return self.step.error(str(exc), getattr(pb_utils.TritonError, exc.code))
        return pb_utils.InferenceResponse(
            output_tensors=[pb_utils.Tensor(name, rows) for name, rows in outputs.items()]
        )
