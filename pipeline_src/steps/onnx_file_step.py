"""The Triton adapter of a step that is a model file of yours: ``food11-new-step NAME --onnx FILE`` writes a
``1/model.py`` subclassing ``OnnxFileStep``. The file runs on ONNX Runtime inside the Python backend (CUDA first
on a GPU instance), so it serves on the local server too, which has no onnxruntime backend. Imported only inside
Triton."""

from __future__ import annotations

from typing import ClassVar

import triton_python_backend_utils as pb_utils

from pipeline_src.steps.batching import non_finite_problem, shape_groups
from pipeline_src.steps.onnx_contract import check_graph_against_config
from pipeline_src.steps.onnx_runtime import OnnxFileModel
from pipeline_src.steps.settings import OnnxFileSettings
from pipeline_src.steps.triton_step import StepContext, answer_stacked, input_array, input_problem


class OnnxFileStep:
    SETTINGS: ClassVar[type[OnnxFileSettings]] = OnnxFileSettings

    def initialize(self, args):
        self.step = StepContext(args)
        settings = self.SETTINGS.from_model_config(self.step.config)  # a bad parameter fails the load, with why
        self.batched = int(self.step.config.get("max_batch_size", 0)) > 0
        self.model = OnnxFileModel(
            self.step.version_dir / settings.onnx_file,
            self.step.on_gpu,
            self.step.device_id,
            settings.intra_op_threads,
            outputs=list(self.step.outputs),  # the config's: a graph output it leaves out is not computed
            batch_sizes=settings.padded_batch_sizes if self.step.on_gpu and self.batched else (),
        )
        # A graph unlike its config refuses to load, naming every difference, rather than fail every request.
        check_graph_against_config(self.model.session, self.step.config, settings.onnx_file)
        self.model.warm_up()
        self.checks = dict.fromkeys(self.model.inputs, non_finite_problem) if settings.refuse_non_finite else {}
        self.step.logger.log_info(f"{self.step.name}: ONNX Runtime providers {self.model.session.get_providers()}")

    def execute(self, requests):
        if not self.batched:
            return [self._answer_alone(request) for request in requests]
        # Requests of one row shape run stacked, once; a bad one fails alone, naming the step (answer_stacked).
        shapes = [{name: input_array(request, name) for name in self.model.inputs} for request in requests]
        responses: dict = {}
        for group in shape_groups(shapes):
            grouped = [requests[index] for index in group]
            answers = answer_stacked(self.step, grouped, self.model.inputs, self.model, self.checks)
            responses.update(zip(group, answers))
        return [responses[index] for index in range(len(requests))]

    def _answer_alone(self, request):
        """max_batch_size 0: each request is one run of the graph, at its own shapes."""
        values = {name: input_array(request, name) for name in self.model.inputs}
        if problem := input_problem(values, self.checks):
            return self.step.error(problem)
        try:
            outputs = self.model(values)
        except Exception as exc:  # the run failed: INTERNAL for this request, naming the step
            return self.step.internal_errors([request], exc)[0]
        tensors = [pb_utils.Tensor(name, rows) for name, rows in outputs.items()]
        return pb_utils.InferenceResponse(output_tensors=tensors)
