"""A Triton step that runs one ONNX model on the stacked requests of an execute (the classifier, the
vision encoder). Imported only inside Triton. A step's ``model.py`` subclasses ``OnnxStep`` and names
its settings class; the config's input and output are the ONNX file's own."""

from __future__ import annotations

from typing import ClassVar

from pipeline_src.steps.onnx_contract import check_graph_against_config
from pipeline_src.steps.onnx_runtime import OnnxModel
from pipeline_src.steps.settings import OnnxStepSettings
from pipeline_src.steps.triton_step import StepContext, answer_stacked


class OnnxStep:
    SETTINGS: ClassVar[type[OnnxStepSettings]]

    def initialize(self, args):
        self.step = StepContext(args)
        settings = self.SETTINGS.from_model_config(self.step.config)
        self.model = OnnxModel.from_settings(settings, self.step.version_dir, self.step.on_gpu, self.step.device_id)
        # a graph unlike its config is refused here, with every difference, rather than fail or mis-answer later
        check_graph_against_config(self.model.session, self.step.config, settings.onnx_file)
        if self.model.choice:
            self.step.logger.log_info(f"{self.step.name}: {self.model.choice.precision} ({self.model.choice.reason})")
        self.input_name = self.step.config["input"][0]["name"]
        self.output_name = self.step.config["output"][0]["name"]
        self.step.logger.log_info(f"{self.step.name}: ONNX Runtime providers {self.model.session.get_providers()}")

    def execute(self, requests):
        return answer_stacked(
            self.step, requests, [self.input_name], lambda batch: {self.output_name: self.model(batch[self.input_name])}
        )
