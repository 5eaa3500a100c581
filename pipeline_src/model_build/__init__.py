"""Builders of the model files the repository needs (run by ``scripts/build_models.py``)."""
