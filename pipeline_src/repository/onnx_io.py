"""An ONNX file's inputs and outputs against the config of the model that serves it."""

from __future__ import annotations

from pathlib import Path

from pipeline_src.repository.loading import ModelEntry
from pipeline_src.repository.report import Report
from pipeline_src.repository.tensors import ANY, data_type_name
from pipeline_src.steps.onnx_contract import ORT_TO_TRITON

# ONNX TensorProto element type names -> config.pbtxt data types: ONNX Runtime's "tensor(float)" as "FLOAT".
ONNX_TO_TRITON = {name[len("tensor(") : -1].upper(): data_type for name, data_type in ORT_TO_TRITON.items()}


def check_onnx_io(entry: ModelEntry, onnx_path: Path, report: Report) -> None:
    """Names, element types and shapes of the file's graph inputs (initializers excluded) and outputs
    agree with the config's; the config's dims exclude the batch dimension when max_batch_size > 0."""
    try:
        import onnx  # the build extra; only needed for this check
    except ImportError:
        report.warning(
            entry.name, f"the onnx package is not installed: {onnx_path} is unchecked (pip install -e '.[build]')"
        )
        return
    try:
        graph = onnx.load(str(onnx_path), load_external_data=False).graph
    except Exception as exc:  # onnx raises DecodeError, ValueError, ... on a bad file
        report.error(entry.name, f"{onnx_path} is not a readable ONNX model: {exc}")
        return
    initializers = {tensor.name for tensor in graph.initializer}
    file_inputs = {value.name: value for value in graph.input if value.name not in initializers}
    file_outputs = {value.name: value for value in graph.output}
    where = f"ONNX model {onnx_path}"
    for kind, declared, in_file in (
        ("input", entry.parsed_config.input, file_inputs),
        ("output", entry.parsed_config.output, file_outputs),
    ):
        for tensor in declared:
            if tensor.name not in in_file:
                report.error(
                    entry.name,
                    f"config {kind} '{tensor.name}' is not an {kind} of {where} "
                    f"(its {kind}s: {', '.join(map(repr, in_file)) or 'none'})",
                )
                continue
            mismatch = _value_mismatch(entry, tensor, in_file[tensor.name], onnx)
            if mismatch:
                report.error(entry.name, f"{kind} '{tensor.name}': {mismatch} ({where})")
    for name in file_inputs.keys() - {tensor.name for tensor in entry.parsed_config.input}:
        report.error(
            entry.name,
            f"{where} has input '{name}', which the config does not declare: ONNX Runtime needs every input fed",
        )


def _value_mismatch(entry: ModelEntry, tensor, value, onnx) -> str | None:
    """Why the file's ValueInfo disagrees with the config's tensor, or None."""
    if value.type.WhichOneof("value") != "tensor_type":
        return "is not a tensor in the ONNX file"
    tensor_type = value.type.tensor_type
    file_type = ONNX_TO_TRITON.get(onnx.TensorProto.DataType.Name(tensor_type.elem_type), "an unsupported type")
    config_type = data_type_name(tensor.data_type)
    if file_type != config_type:
        return f"the ONNX file has element type {file_type}, the config says {config_type}"
    if not tensor_type.HasField("shape"):
        return None  # rank unknown: ONNX Runtime checks at run time
    file_dims = [dim.dim_value if dim.HasField("dim_value") else dim.dim_param or "?" for dim in tensor_type.shape.dim]
    dims = list(tensor.reshape.shape if tensor.HasField("reshape") else tensor.dims)
    expected = [ANY, *dims] if entry.batched else dims
    shown = f"the ONNX file has shape {file_dims}, the config {dims}"
    shown += " after the batch dimension" if entry.batched else ""
    if len(file_dims) != len(expected):
        return shown
    if entry.batched and isinstance(file_dims[0], int) and not (file_dims[0] == 1 == entry.max_batch_size):
        return (
            f"{shown}: the ONNX file fixes the batch dimension to {file_dims[0]}, but max_batch_size is "
            f"{entry.max_batch_size}; export it with a dynamic batch axis"
        )
    for file_dim, config_dim in zip(file_dims[1:] if entry.batched else file_dims, dims):
        if isinstance(file_dim, int) and config_dim != ANY and file_dim != config_dim:
            return shown
    return None
