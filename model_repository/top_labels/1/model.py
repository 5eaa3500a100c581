"""The k most probable labels of each photo: a thin adapter around pipeline_src.steps.top_labels."""

from pipeline_src.steps.classification import PROBABILITIES, distribution_problem
from pipeline_src.steps.top_labels import TopLabelsSettings, check_output_dims, top_labels
from pipeline_src.steps.triton_step import StepContext, answer_stacked


class TritonPythonModel:
    def initialize(self, args):
        self.step = StepContext(args)
        self.settings = TopLabelsSettings.from_model_config(self.step.config)  # a bad parameter fails the load
        check_output_dims(self.settings.k, {output["name"]: output["dims"] for output in self.step.config["output"]})

    def execute(self, requests):
        return answer_stacked(
            self.step, requests, [PROBABILITIES], self._top_labels, checks={PROBABILITIES: distribution_problem}
        )

    def _top_labels(self, batch):
        best = top_labels(batch[PROBABILITIES], self.settings.k)
        return {"TOP_LABELS": best.labels, "TOP_PROBABILITIES": best.probabilities}
