"""Step logic of the Food-11 captioning pipeline, importable and testable without Triton.

The Triton ``model.py`` files under ``model_repository/`` are thin adapters around this package.
"""
