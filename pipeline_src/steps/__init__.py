"""The steps' logic: decoding, classification, captioning and their typed settings.

Importable and unit-tested without Triton, except ``triton_step`` (the helpers every ``model.py``
shares), which imports ``triton_python_backend_utils`` and so runs only inside the server.
"""
