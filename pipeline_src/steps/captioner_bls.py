"""caption_with_label's call to the captioner by BLS, made for one of its requests: the ``CaptionerCall`` that
``pipeline_src.steps.caption_with_label`` is handed. Imported only inside Triton (``triton_python_backend_utils``).
"""

from __future__ import annotations

import triton_python_backend_utils as pb_utils

from pipeline_src.steps.caption_with_label import (
    CAPTION_ERROR_READ,
    CAPTION_MODE_READ,
    CAPTION_READ,
    CAPTIONER_CALL,
    EMBEDS_SENT,
    PIXELS_SENT,
    PROMPT_SENT,
    Captioned,
    CaptionerCall,
    CaptionerFailed,
)
from pipeline_src.steps.settings import CaptionWithLabelSettings
from pipeline_src.steps.triton_step import bytes_tensor

READ = (CAPTION_READ.name, CAPTION_MODE_READ.name)


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
