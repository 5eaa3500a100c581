"""The Food-11 captioning pipeline's own code; the ``model.py`` files under ``model_repository/`` are
thin adapters around it.

    steps/        the steps' logic and typed settings (unit-tested without Triton)
    model_build/  builders of the model files (classifier export, BLIP snapshots)
    repository/   checking the model repository (validate) and adding steps to it (scaffold)
    serving/      starting tritonserver and the API

Imports point one way: ``steps`` imports none of the others; the others may import ``steps``.
"""

from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
