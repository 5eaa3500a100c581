"""Step 3: the label, its probability and which models answer, from the classifier's logits. A thin adapter
around pipeline_src.steps.classification.label_outputs."""

from pipeline_src.provenance.served import identity_json
from pipeline_src.steps.classification import LOGITS, label_outputs, logits_problem
from pipeline_src.steps.settings import LabelSettings
from pipeline_src.steps.triton_step import StepContext, answer_stacked


class TritonPythonModel:
    def initialize(self, args):
        self.step = StepContext(args)
        LabelSettings.from_model_config(self.step.config)  # a config naming other code, or a parameter, fails the load
        # Which weights answer, read from the manifests of the versions Triton loads beside this step.
        self.models = identity_json(self.step.repository)
        self.step.logger.log_info(f"{self.step.name}: every answer names the models {self.models}")

    def execute(self, requests):
        return answer_stacked(self.step, requests, [LOGITS], self._label, checks={LOGITS: logits_problem})

    def _label(self, batch):
        return label_outputs(batch[LOGITS], self.models)
