"""The ensembles callers call keep the wire contract (pipeline_src/contract.py): ``food11_pipeline`` its input and
its core outputs, ``food11_classify`` its input and the label's outputs, named and typed as every client reads
them. Outputs beyond them are the repository's to add."""

from __future__ import annotations

from tritonclient.grpc import model_config_pb2

from pipeline_src import contract
from pipeline_src.repository.loading import ModelEntry
from pipeline_src.repository.report import Report

# By ensemble, the tensors of contract.CONFIG_TYPES that its callers send and read.
CONTRACTS = {
    contract.ENSEMBLE: tuple(contract.CONFIG_TYPES),
    contract.CLASSIFY_ENSEMBLE: (contract.IMAGE, *contract.CLASSIFY_OUTPUTS),
}


def check_wire_contract(models: dict[str, ModelEntry], report: Report) -> None:
    for ensemble, names in CONTRACTS.items():
        entry = models.get(ensemble)
        if entry is not None and entry.config is not None:  # else not here (a repository of one's own), or reported
            _check(entry, names, report)


def _check(entry: ModelEntry, names: tuple[str, ...], report: Report) -> None:
    config = entry.parsed_config
    declared = {
        tensor.name: (model_config_pb2.DataType.Name(tensor.data_type), tuple(tensor.dims))
        for tensor in (*config.input, *config.output)
    }
    for name in names:
        data_type, dims = contract.CONFIG_TYPES[name]
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
