"""The served models' manifests, read once at load (pipeline_src.provenance.served)."""

import numpy as np
import triton_python_backend_utils as pb_utils

from pipeline_src.contract import MANIFESTS
from pipeline_src.provenance.served import manifests_json
from pipeline_src.steps.settings import ModelManifestsSettings
from pipeline_src.steps.triton_step import StepContext


class TritonPythonModel:
    def initialize(self, args):
        self.step = StepContext(args)
        ModelManifestsSettings.from_model_config(self.step.config)
        self.manifests = np.array([manifests_json(self.step.repository).encode("utf-8")], dtype=np.object_)

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(MANIFESTS, self.manifests)]) for _ in requests
        ]
