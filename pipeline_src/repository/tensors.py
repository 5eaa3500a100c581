"""Tensor types and shapes as Triton compares them, for ensemble edges, BLS calls and ONNX files."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tritonclient.grpc import model_config_pb2

ANY = -1  # Triton's variable-size dimension


@dataclass(frozen=True)
class TensorSpec:
    """One side of an edge: who (``label``), what type, what shape per row, and whether it is batched."""

    label: str  # e.g. "step 2 (classifier) output 'output'"
    data_type: str  # "TYPE_FP32", ...
    dims: tuple[int, ...]  # without the batch dimension when batched
    batched: bool  # the model's max_batch_size > 0: a batch dimension comes first

    @property
    def full_dims(self) -> tuple[int, ...]:
        return ((ANY,) if self.batched else ()) + self.dims

    def describe(self) -> str:
        batching = "batched" if self.batched else "max_batch_size 0"
        return f"{self.data_type} dims {list(self.dims)} ({batching})"


def data_type_name(value: int) -> str:
    return model_config_pb2.DataType.Name(value)


def is_data_type_name(name: str) -> bool:
    known = model_config_pb2.DataType.keys()  # an enum wrapper: `in` works on its keys only
    return name in known and name != "TYPE_INVALID"


def spec_of(label: str, tensor, batched: bool, use_reshape: bool = False) -> TensorSpec:
    """The spec of a config's ModelInput/ModelOutput. An ensemble's own tensors count their ``reshape``."""
    dims = tensor.reshape.shape if use_reshape and tensor.HasField("reshape") else tensor.dims
    return TensorSpec(label, data_type_name(tensor.data_type), tuple(dims), batched)


def dims_match(left: Sequence[int], right: Sequence[int]) -> bool:
    """Same rank, and each dimension equal or variable (-1) on either side."""
    return len(left) == len(right) and all(a == b or ANY in (a, b) for a, b in zip(left, right))


def differs_only_in_batching(left: TensorSpec, right: TensorSpec) -> bool:
    """Same type and per-row dims, but only one side batched."""
    return left.batched != right.batched and left.data_type == right.data_type and dims_match(left.dims, right.dims)


def edge_mismatch(tensor: str, producer: TensorSpec, consumer: TensorSpec) -> str | None:
    """Why ``producer`` cannot feed ``consumer`` the ``tensor``, as the validator says it, or None. Stricter than
    Triton's load check on one point: a side with max_batch_size 0 whose dims lack the batch dimension is refused
    (Triton loads it, then fails every request of more than one row with 'unexpected shape')."""
    if producer.data_type != consumer.data_type:
        why: str | None = "the data types differ"
    elif producer.batched == consumer.batched:
        why = None if dims_match(producer.dims, consumer.dims) else "the dims differ"
    elif dims_match(producer.full_dims, consumer.full_dims):
        why = None
    elif dims_match(producer.dims, consumer.dims):
        unbatched = consumer if producer.batched else producer
        why = (
            f"{unbatched.label} has max_batch_size 0, so its dims must include the batch dimension the other "
            f"side carries (e.g. {[ANY, *unbatched.dims]}), or give it a max_batch_size"
        )
    else:
        why = "the dims differ"
    return why and (
        f"tensor '{tensor}': {producer.label} is {producer.describe()}, but {consumer.label} expects "
        f"{consumer.describe()}: {why}"
    )
