"""Add a new Python step to the model repository: ``food11-new-step NAME`` (``python -m`` this package too).

One job a module: ``spec`` says what the step is and where its files go, ``render`` writes their text from
``templates/*.tmpl``, ``files`` plans and writes them, ``wiring`` says what to do next (with the ensemble
tensors its inputs can take), ``onnx_file`` does the same for a step that is an ONNX file (``--onnx FILE``),
``cli`` is the command line, whose ``--help`` describes the whole tool.
"""

from pipeline_src.repository.scaffold.cli import DEFAULT_TESTS_DIR, main
from pipeline_src.repository.scaffold.files import create_step, plan_files
from pipeline_src.repository.scaffold.onnx_file import create_onnx_step, plan_onnx_files, read_spec
from pipeline_src.repository.scaffold.spec import Layout, ScaffoldError, StepSpec, Tensor
from pipeline_src.repository.scaffold.wiring import next_steps

__all__ = [
    "DEFAULT_TESTS_DIR",
    "Layout",
    "ScaffoldError",
    "StepSpec",
    "Tensor",
    "create_onnx_step",
    "create_step",
    "main",
    "next_steps",
    "plan_files",
    "plan_onnx_files",
    "read_spec",
]
