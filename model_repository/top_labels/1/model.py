"""The k most probable labels of each photo: a thin adapter around pipeline_src.steps.top_labels."""

import triton_python_backend_utils as pb_utils

from pipeline_src.steps.top_labels import TopLabelsSettings, check_output_dims, find_problem, top_labels
from pipeline_src.steps.triton_step import StepContext, input_array, split_rows, stack_requests

INPUT = "PROBABILITIES"


class TritonPythonModel:
    def initialize(self, args):
        self.step = StepContext(args)
        self.settings = TopLabelsSettings.from_model_config(self.step.config)  # a bad parameter fails the load
        check_output_dims(self.settings.k, {output["name"]: output["dims"] for output in self.step.config["output"]})

    def execute(self, requests):
        # Triton hands over the requests, never concatenated: a bad one gets its own error response (raising
        # here would fail them all); the others run stacked as one batch, split back in order.
        responses = [None] * len(requests)
        served, arrays = [], []
        for index, request in enumerate(requests):
            rows = input_array(request, INPUT)
            problem = find_problem(rows)
            if problem:
                responses[index] = self.step.error(f"{INPUT}: {problem}")
            else:
                served.append(index)
                arrays.append(rows)
        if served:
            batch, sizes = stack_requests(arrays)
            try:
                best = top_labels(batch, self.settings.k)
                per_request = zip(split_rows(best.labels, sizes), split_rows(best.probabilities, sizes))
                answers = [
                    pb_utils.InferenceResponse(output_tensors=[
                        pb_utils.Tensor("TOP_LABELS", labels),
                        pb_utils.Tensor("TOP_PROBABILITIES", probabilities),
                    ])
                    for labels, probabilities in per_request
                ]
            except Exception as exc:  # the batched run failed: INTERNAL, reported per request
                answers = self.step.internal_errors([requests[index] for index in served], exc)
            for index, answer in zip(served, answers):
                responses[index] = answer
        return responses
