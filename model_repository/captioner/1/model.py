"""Step 4, BLIP captioning, batched in flight (pipeline_src.steps.caption_engine): execute hands each request to the
loop and returns; the loop answers it by its response sender when its last caption ends, each caption the one it
gets alone. Not a decoupled model: with Triton 2.51's python_backend (24.10) a BLS caller of one crashes its stub
under concurrent calls (32 callers did within minutes), and an ensemble over a decoupled step is decoupled itself
(no response cache, streaming clients only)."""

import time

import triton_python_backend_utils as pb_utils

from pipeline_src.steps.batching import bytes_rows
from pipeline_src.steps.caption_engine import CaptionEngine, Job, QueuePolicy, Refused
from pipeline_src.steps.captioning import CAPTIONER_PHASES, GreedyCaptioner, standin_info
from pipeline_src.steps.device_vision import LazyDeviceVision
from pipeline_src.steps.settings import CaptionerSettings
from pipeline_src.steps.step_metrics import StepLoadGauges, StepPhaseMetrics
from pipeline_src.steps.triton_step import StepContext, input_array

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
CAPTION, ERROR, MODE = "CAPTION", "CAPTION_ERROR", "CAPTION_MODE"


class TritonPythonModel:
    def initialize(self, args):
        self.step = StepContext(args)
        settings = CaptionerSettings.from_model_config(self.step.config)
        largest = self.step.config.get("max_batch_size", 0)
        if settings.rows_in_flight < largest:
            raise ValueError(
                f"rows_in_flight {settings.rows_in_flight} < max_batch_size {largest}: a request joins whole"
            )
        model_dir = self.step.version_dir / settings.model_dir
        standin = standin_info(model_dir)
        if standin:
            self.step.logger.log_warn(
                f"{self.step.name}: {model_dir} is a STAND-IN BLIP ({standin['size']}, random weights): "
                "its captions are MEANINGLESS. Build a real BLIP with scripts/build_models.py --blip."
            )
        self.captioner = GreedyCaptioner.from_settings(
            settings, self.step.version_dir, self.step.on_gpu, self.step.device_id
        )
        choice = self.captioner.choice
        self.step.logger.log_info(
            f"{self.step.name}: text decoder in {choice.precision} ({choice.reason}), providers "
            f"{self.captioner.decoder.step_session.get_providers()}, {settings.rows_in_flight} rows in flight"
        )
        self.vision = None
        if settings.vision_encoder_graph:
            self.vision = LazyDeviceVision(
                settings, self.step.version_dir, self.captioner.decoder.device, self.step.on_gpu
            )
            self.step.logger.log_info(
                f"{self.step.name}: encodes CAPTIONER_PIXELS itself with {self.vision.path}, loaded at the first such "
                "request (food11_pipeline_merged)"
            )
        if settings.warm_up:
            self.step.logger.log_info(f"{self.step.name}: warmed up in {self.captioner.warm_up():.2f} s")
        self.width = self.captioner.decoder.shape["vision_hidden_size"]
        self.metrics = StepPhaseMetrics(self.step.name, self.step.version, CAPTIONER_PHASES)
        self.load = StepLoadGauges(self.step.name, self.step.version)
        self.policy = QueuePolicy.from_settings(settings)
        self.engine = CaptionEngine(
            self.captioner,
            self.policy,
            warn=lambda message: self.step.logger.log_error(f"{self.step.name}: {message}"),
            report=self._report,
            vision=self.vision,
        )
        self.engine.start()  # after the assignment: the loop's first report reads self.engine

    def execute(self, requests):
        # Every answer, refusals too, is sent by the loop's thread (pipeline_src.steps.caption_engine.submit says why).
        arrived = time.monotonic()
        for request in requests:
            sender = request.get_response_sender()
            in_band = ERROR in request.requested_output_names()  # caption_with_label's call: refusals as an output
            deadline = self.policy.deadline(arrived, request.timeout())
            prompts = input_array(request, "PROMPT").reshape(-1)
            answer = self._answerer(sender, len(prompts), in_band)
            embeds, pixels = (
                input_array(request, name, optional=True) for name in ("IMAGE_EMBEDS", "CAPTIONER_PIXELS")
            )
            try:
                if embeds is not None and embeds.shape[-1] != self.width:
                    problem = f"IMAGE_EMBEDS: width {embeds.shape[-1]}, the captioner's is {self.width}"
                    raise Refused(problem, "INVALID_ARG")
                prompts = [prompt.decode("utf-8") for prompt in prompts]
            except (Refused, UnicodeDecodeError) as exc:
                refusal = exc if isinstance(exc, Refused) else Refused(f"PROMPT: {exc}", "INVALID_ARG")
                self.engine.submit(Job(None, [], answer), refusal)
                continue
            job = Job(embeds, prompts, answer, deadline, is_cancelled=sender.is_cancelled, pixels=pixels)
            self.engine.submit(job)  # the loop refuses what it cannot take (neither input, or both), with why
        return None

    def _answerer(self, sender, rows: int, in_band: bool):
        """How one request is answered: its captions, or why not (an error response, or for a caller that asks for
        CAPTION_ERROR, that output beside empty captions)."""

        def answer(captions, error, modes):
            errors = [""] * rows
            if error is not None:
                message = str(error) if isinstance(error, Refused) else f"internal error: {error}"
                if not in_band:
                    code = getattr(pb_utils.TritonError, getattr(error, "code", "INTERNAL"))
                    sender.send(self.step.error(message, code), flags=FINAL)
                    return
                captions, errors, modes = [""] * rows, [f"{self.step.name}: {message}"] * rows, [""] * rows
            tensors = [pb_utils.Tensor(CAPTION, bytes_rows(captions)), pb_utils.Tensor(MODE, bytes_rows(modes))]
            if in_band:
                tensors.append(pb_utils.Tensor(ERROR, bytes_rows(errors)))
            sender.send(pb_utils.InferenceResponse(output_tensors=tensors), flags=FINAL)

        return answer

    def _report(self):
        """In the loop's thread, before it answers and when it goes idle: its clock's totals and its load."""
        self.metrics.add(self.captioner.clock)
        self.load.set(len(self.engine.waiting), self.engine.rows_in_use)

    def finalize(self):
        self.engine.close()
