"""The ensemble callers call keeps the wire contract (pipeline_src/contract.py): its input and its core
outputs, named and typed as every client reads them. Outputs beyond them are the repository's to add."""

from __future__ import annotations

from tritonclient.grpc import model_config_pb2

from pipeline_src import contract
from pipeline_src.repository.loading import ModelEntry
from pipeline_src.repository.report import Report


def check_wire_contract(models: dict[str, ModelEntry], report: Report) -> None:
    entry = models.get(contract.ENSEMBLE)
    if entry is None or entry.config is None:
        return  # no such ensemble here (a repository of one's own), or its config is already reported
    declared = {
        tensor.name: (model_config_pb2.DataType.Name(tensor.data_type), tuple(tensor.dims))
        for tensor in (*entry.config.input, *entry.config.output)
    }
    for name, (data_type, dims) in contract.CONFIG_TYPES.items():
        if name not in declared:
            report.error(
                entry.name,
                f"declares no {name}: it is part of the wire contract every client reads (pipeline_src/contract.py); "
                "add outputs beside the core ones, but keep these",
            )
        elif declared[name] != (data_type, dims):
            got_type, got_dims = declared[name]
            report.error(
                entry.name,
                f"{name} is {got_type} {list(got_dims)}, the wire contract's is {data_type} {list(dims)} "
                "(pipeline_src/contract.py): every client reads it so",
            )
