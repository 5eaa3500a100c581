"""Step 4, BLIP captioning: the image embeddings of all requests of an execute decoded together, greedy,
on ONNX Runtime with a KV cache; each request's caption as it would be alone."""

from pipeline_src.steps.batching import bytes_rows
from pipeline_src.steps.captioning import CAPTIONER_PHASES, GreedyCaptioner, standin_info
from pipeline_src.steps.settings import CaptionerSettings
from pipeline_src.steps.step_metrics import StepPhaseMetrics
from pipeline_src.steps.triton_step import StepContext, answer_stacked


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
        self.captioner = GreedyCaptioner.from_settings(
            settings, self.step.version_dir, self.step.on_gpu, self.step.device_id
        )
        choice = self.captioner.choice
        self.step.logger.log_info(
            f"{self.step.name}: text decoder in {choice.precision} ({choice.reason}), "
            f"providers {self.captioner.decoder.providers}"
        )
        if settings.warm_up:
            self.step.logger.log_info(f"{self.step.name}: warmed up in {self.captioner.warm_up():.2f} s")
        self.metrics = StepPhaseMetrics(self.step.name, self.step.version, CAPTIONER_PHASES)

    def execute(self, requests):
        with self.captioner.clock.timing("execute"):
            responses = answer_stacked(self.step, requests, ["IMAGE_EMBEDS", "PROMPT"], self._caption)
        self.metrics.add(self.captioner.clock)
        return responses

    def _caption(self, batch):
        prompts = [prompt.decode("utf-8") for prompt in batch["PROMPT"].reshape(-1)]
        captions = self.captioner.caption(batch["IMAGE_EMBEDS"], prompts)
        return {"CAPTION": bytes_rows(captions)}
