"""Step 3, BLS: label and probability from the logits, then a caption conditioned on the label."""

import asyncio

import numpy as np
import triton_python_backend_utils as pb_utils

from pipeline_src.contract import CAPTION, CAPTION_STATUS, LABEL, MODELS, PROBABILITY, CaptionStatus, refused_under_load
from pipeline_src.provenance.served import identity_json
from pipeline_src.steps.classification import caption_plan, predict
from pipeline_src.steps.settings import LabelAndCaptionSettings
from pipeline_src.steps.triton_step import StepContext, bytes_tensor, input_array

# The captioner call's tensor names and callee come from its declaration, which food11-validate checks
# against the captioner's config.
CAPTIONER_CALL = LabelAndCaptionSettings.CAPTIONER_CALL
EMBEDS_SENT, PROMPT_SENT = CAPTIONER_CALL.inputs  # EMBEDS_SENT: this step's own input, forwarded as is
(CAPTION_READ,) = CAPTIONER_CALL.outputs


class TritonPythonModel:
    def initialize(self, args):
        self.step = StepContext(args)
        self.settings = LabelAndCaptionSettings.from_model_config(self.step.config)
        # Which weights answer, read from the manifests of the versions Triton loads beside this step.
        self.models = identity_json(self.step.repository)
        self.step.logger.log_info(f"{self.step.name}: every answer names the models {self.models}")

    async def execute(self, requests):
        # The captioner calls of all requests are in flight at once; its dynamic batcher merges them.
        return await asyncio.gather(*(self._label_and_caption(request) for request in requests))

    async def _label_and_caption(self, request):
        try:
            predictions = [predict(row) for row in input_array(request, "LOGITS")]
        except ValueError as exc:
            return self.step.error(f"classifier output unusable: {exc}", pb_utils.TritonError.INTERNAL)
        plans = [
            caption_plan(prediction, self.settings.prompt_template, self.settings.confidence_threshold)
            for prediction in predictions
        ]
        prompts = [prompt for prompt, _ in plans]
        captions, failure = await self._caption(
            pb_utils.get_input_tensor_by_name(request, EMBEDS_SENT.name), prompts, request
        )
        if failure and refused_under_load(failure):
            # Overload is the caller's to handle (retry later, elsewhere): refuse the request as the
            # captioner refused its call, rather than answer without a caption.
            return self.step.error(
                f"the captioner is over capacity ({failure}): retry later", pb_utils.TritonError.UNAVAILABLE
            )
        statuses = [failure or status for _, status in plans]
        return pb_utils.InferenceResponse(
            output_tensors=[
                bytes_tensor(LABEL, [prediction.label for prediction in predictions]),
                pb_utils.Tensor(PROBABILITY, np.array([[p.probability] for p in predictions], dtype=np.float32)),
                pb_utils.Tensor("PROBABILITIES", np.stack([p.probabilities for p in predictions])),
                bytes_tensor(CAPTION, captions),
                bytes_tensor(CAPTION_STATUS, statuses),
                bytes_tensor(MODELS, [self.models] * len(predictions)),
            ]
        )

    async def _caption(self, image_embeds, prompts, caller):
        """(captions, None), or (empty captions, the status saying why) when the captioner let us down.
        The captioner call carries the ``caller``'s trace (a traced request's trace shows the captioner as
        its child) and its timeout (the time its caller has left: the captioner's queue refuses it past that)."""
        empty = [""] * len(prompts)
        request = pb_utils.InferenceRequest(
            model_name=CAPTIONER_CALL.callee(self.settings),
            inputs=[image_embeds, bytes_tensor(PROMPT_SENT.name, prompts)],
            requested_output_names=CAPTIONER_CALL.output_names,
            trace=caller.trace(),
            timeout=caller.timeout(),
        )
        wait_ms = self.settings.caption_wait_ms(caller.timeout())
        try:
            # shield: on timeout stop waiting, but let the captioner finish instead of cancelling mid-flight.
            response = await asyncio.wait_for(asyncio.shield(request.async_exec()), wait_ms / 1000.0)
        except asyncio.TimeoutError:
            return empty, CaptionStatus.CAPTIONER_TIMEOUT.with_detail(f"no caption within {wait_ms} ms")
        if response.has_error():
            message = response.error().message()
            self.step.logger.log_warn(f"{self.step.name}: captioner failed: {message}")
            return empty, CaptionStatus.CAPTIONER_ERROR.with_detail(message)
        captions = pb_utils.get_output_tensor_by_name(response, CAPTION_READ.name).as_numpy().reshape(-1)
        return [caption.decode("utf-8") for caption in captions], None
