"""The steps' logic and typed settings, unit-tested without Triton but for the modules that import
``triton_python_backend_utils`` and so run only inside it: ``triton_step``, ``onnx_step``, ``onnx_file_step`` and
``step_metrics``."""
