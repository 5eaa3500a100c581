"""Step 4, BLS: a caption conditioned on the label step's answer. A thin adapter around
pipeline_src.steps.caption_with_label, handed the captioner call that ``captioner_for`` makes by BLS."""

import asyncio
import os

import triton_python_backend_utils as pb_utils

from pipeline_src.contract import RESPONSES_CACHED_ENV
from pipeline_src.steps.caption_with_label import (
    CAPTION_ERROR_READ,
    CAPTION_MODE_READ,
    CAPTION_READ,
    CAPTIONER_CALL,
    EMBEDS_SENT,
    PIXELS_SENT,
    PROBABILITIES,
    PROMPT_SENT,
    Captioned,
    CaptionerCall,
    CaptionerFailed,
    CaptionWithLabel,
    Refused,
)
from pipeline_src.steps.settings import CaptionWithLabelSettings
from pipeline_src.steps.triton_step import StepContext, bytes_tensor, input_array

READ = (CAPTION_READ.name, CAPTION_MODE_READ.name)


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


def captioner_for(caller, settings: CaptionWithLabelSettings) -> CaptionerCall:
    """The captioner call for the request ``caller``: its images, with the prompts it is given. The call carries
    the caller's trace (a traced request's trace shows the captioner as its child) and its timeout (the time its
    caller has left: the captioner's queue refuses it past that)."""

    forwarded = [
        tensor
        for sent in (EMBEDS_SENT, PIXELS_SENT)
        if (tensor := pb_utils.get_input_tensor_by_name(caller, sent.name))
    ]

    async def caption(prompts: list[str]):
        request = pb_utils.InferenceRequest(
            model_name=CAPTIONER_CALL.callee(settings),
            inputs=[
                *forwarded,  # the embeddings, or the pixels the captioner encodes itself: whichever the caller has
                bytes_tensor(PROMPT_SENT.name, prompts),
            ],
            requested_output_names=CAPTIONER_CALL.output_names,
            trace=caller.trace(),
            timeout=caller.timeout(),
        )
        # One response, sent by the captioner's loop when the captions end; awaiting it leaves this step's event loop
        # free. The captioner says why there is no caption in CAPTION_ERROR, as an output, since this call asks for
        # it: an error response sent by a response sender can reach a BLS caller without its call's id in
        # python_backend before 25.05 (Triton 2.51's included: InferResponse::SaveToSharedMemory).
        response = await request.async_exec()
        if response.has_error():  # Triton's own, before the captioner ran (it was not loaded, say)
            raise CaptionerFailed(response.error().message())
        error = pb_utils.get_output_tensor_by_name(response, CAPTION_ERROR_READ.name).as_numpy().reshape(-1)
        if len(error) and error[0]:
            raise CaptionerFailed(error[0].decode("utf-8"))
        return Captioned(*(pb_utils.get_output_tensor_by_name(response, name).as_numpy().reshape(-1) for name in READ))

    return caption
