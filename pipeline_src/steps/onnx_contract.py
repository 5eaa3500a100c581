"""An ONNX Runtime session's inputs and outputs against the config of the step that serves it, checked when the
step loads: a graph unlike its config would load and then fail, or worse answer, every request (an FP32 output
under TYPE_FP16 breaks the ensemble after it, a ``[N]`` output under dims ``[ 1 ]`` is served as it comes). The
validator checks the same with the ``onnx`` package (``pipeline_src.repository.onnx_io``); this needs only the
session the step runs, so it holds in a server without that package.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

# ONNX Runtime's type strings -> config.pbtxt data types
ORT_TO_TRITON = {
    "tensor(float)": "TYPE_FP32",
    "tensor(float16)": "TYPE_FP16",
    "tensor(bfloat16)": "TYPE_BF16",
    "tensor(double)": "TYPE_FP64",
    **{f"tensor({kind}{bits})": f"TYPE_{kind.upper()}{bits}" for kind in ("int", "uint") for bits in (8, 16, 32, 64)},
    "tensor(bool)": "TYPE_BOOL",
    "tensor(string)": "TYPE_STRING",
}


class GraphConfigMismatch(ValueError):
    """The graph's inputs or outputs are not the config's; the message lists every difference."""


def graph_mismatches(
    inputs: Sequence[Any], outputs: Sequence[Any], config: Mapping[str, Any], graph: str = "the ONNX graph"
) -> list[str]:
    """Every way the session's ``inputs`` and ``outputs`` (``NodeArg``: name, type, shape) differ from the
    config's (Triton's JSON form: name, data_type, dims; dims after the batch dimension when max_batch_size > 0)."""
    batched = int(config.get("max_batch_size", 0)) > 0
    problems = []
    for kind, args, declared in (
        ("input", inputs, config.get("input", [])),
        ("output", outputs, config.get("output", [])),
    ):
        found = {arg.name: arg for arg in args}
        for tensor in declared:
            arg = found.get(tensor["name"])
            if arg is None:
                problems.append(
                    f"config {kind} '{tensor['name']}' is not an {kind} of {graph} (its {kind}s: "
                    f"{', '.join(map(repr, found)) or 'none'})"
                )
            elif problem := _tensor_mismatch(arg, tensor, batched):
                problems.append(f"{kind} '{tensor['name']}': {problem}")
        if kind == "input" and (unfed := sorted(found.keys() - {tensor["name"] for tensor in declared})):
            problems.append(
                f"{graph} has input(s) {', '.join(map(repr, unfed))} the config does not declare: "
                "ONNX Runtime needs every input fed"
            )
    return problems


def check_graph_against_config(session, config: Mapping[str, Any], graph: str = "the ONNX graph") -> None:
    """Raises ``GraphConfigMismatch`` naming every difference, so that Triton refuses to load the step with it."""
    if problems := graph_mismatches(session.get_inputs(), session.get_outputs(), config, graph):
        raise GraphConfigMismatch(
            f"{config.get('name', 'the step')}: {graph} does not match config.pbtxt: {'; '.join(problems)}"
        )


def _tensor_mismatch(arg, tensor: Mapping[str, Any], batched: bool) -> str | None:
    graph_type = ORT_TO_TRITON.get(arg.type, arg.type)
    if graph_type != tensor["data_type"]:
        return f"the graph has element type {graph_type}, the config says {tensor['data_type']}"
    if arg.shape is None:
        return None  # rank unknown: checked per answer (pipeline_src.steps.batching.check_outputs)
    shape, dims = list(arg.shape), [int(dim) for dim in tensor.get("dims", [])]
    row = shape[1:] if batched else shape  # a named or unknown graph dim, or a config dim of -1, fits any size
    if len(shape) != len(dims) + batched or any(
        isinstance(graph_dim, int) and config_dim not in (-1, graph_dim) for graph_dim, config_dim in zip(row, dims)
    ):
        return f"the graph has shape {shape}, the config {dims}" + (" after the batch dimension" if batched else "")
    return None
