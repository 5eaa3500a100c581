"""The steps' logic: decoding, classification, captioning and their typed settings.

Importable and unit-tested without Triton, except the modules that import ``triton_python_backend_utils`` and
so run only inside the server: ``triton_step`` (the helpers every ``model.py`` shares), ``onnx_step`` (an ONNX
model as a step) and ``captioner_bls`` (caption_with_label's call to the captioner).
"""
