"""A Python step's BLS calls, as its settings class declares them (pipeline_src.steps.bls), against the
callee models' configs: the callee exists, takes every tensor sent, and gives every output read."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from pipeline_src.repository.loading import ModelEntry, load_models
from pipeline_src.repository.report import Report
from pipeline_src.repository.step_settings import check_settings
from pipeline_src.repository.tensors import TensorSpec, edge_mismatch, is_data_type_name, spec_of
from pipeline_src.steps.bls import BlsCall, BlsTensor
from pipeline_src.steps.settings import StepSettings


def check_bls_calls(caller: ModelEntry, settings: StepSettings, models: dict[str, ModelEntry], report: Report) -> None:
    for call in type(settings).BLS_CALLS:
        callee_name = call.callee(settings)
        where = f"declared in {type(settings).__name__}.BLS_CALLS, callee from parameter {call.callee_field}"
        for problem in _call_problems(caller, call, models.get(callee_name), callee_name):
            report.error(caller.name, f"BLS call to '{callee_name}' ({where}): {problem}")


def _call_problems(caller: ModelEntry, call: BlsCall, callee: ModelEntry | None, callee_name: str) -> Iterator[str]:
    for tensor in (*call.inputs, *call.outputs):
        if not is_data_type_name(tensor.data_type):
            yield (
                f"tensor '{tensor.name}' is declared with data type '{tensor.data_type}', not a Triton type "
                "such as TYPE_FP32"
            )
            return
    if callee is None:
        yield f"model '{callee_name}' is not in the repository"
        return
    if callee.config is None:
        return  # its config is broken: reported with that model
    if callee.batched and callee.max_batch_size < caller.max_batch_size:
        yield (
            f"'{callee.name}' has max_batch_size {callee.max_batch_size}, smaller than this step's "
            f"{caller.max_batch_size}: a full request forwarded to it would be refused"
        )
    for sent in call.inputs:
        if sent.forwarded:
            yield from _forwarded_problems(caller, sent)
        yield from _callee_end_problems(callee, sent, sending=True)
        theirs = next((tensor for tensor in callee.config.input if tensor.name == sent.name), None)
        if sent.optional and theirs is not None and not theirs.optional:
            yield f"sends '{sent.name}' only when it has it, but model '{callee.name}' needs it (not optional)"
    sent_names = {tensor.name for tensor in call.inputs}
    for tensor in callee.config.input:
        if tensor.name not in sent_names and not tensor.optional:
            yield f"does not send input '{tensor.name}' of model '{callee.name}', which is not optional"
    for read in call.outputs:
        yield from _callee_end_problems(callee, read, sending=False)


def _forwarded_problems(caller: ModelEntry, sent: BlsTensor) -> Iterator[str]:
    """A forwarded tensor is the caller's own input, as is."""
    own = next((tensor for tensor in caller.parsed_config.input if tensor.name == sent.name), None)
    if own is None:
        yield f"forwards this step's input '{sent.name}', which its config does not declare"
        return
    own_spec = spec_of(f"this step's input '{sent.name}'", own, caller.batched)
    if problem := edge_mismatch(sent.name, own_spec, _spec("the tensor sent", sent)):
        yield problem


def _callee_end_problems(callee: ModelEntry, tensor: BlsTensor, sending: bool) -> Iterator[str]:
    """The callee has the tensor (an input it is sent, or an output read from it), and what flows along the
    edge fits both ends."""
    kind = "input" if sending else "output"
    declared = {t.name: t for t in (callee.parsed_config.input if sending else callee.parsed_config.output)}
    if tensor.name not in declared:
        listing = ", ".join(map(repr, declared)) or "none"
        if sending:
            yield (
                f"sends tensor '{tensor.name}', which is not an input of model '{callee.name}' (its inputs: {listing})"
            )
        else:
            yield f"reads output '{tensor.name}', which model '{callee.name}' does not have (its outputs: {listing})"
        return
    ours = _spec("the tensor sent" if sending else "the output read", tensor)
    theirs = spec_of(f"'{callee.name}' {kind} '{tensor.name}'", declared[tensor.name], callee.batched)
    if problem := edge_mismatch(tensor.name, *((ours, theirs) if sending else (theirs, ours))):
        yield problem


def _spec(label: str, tensor: BlsTensor) -> TensorSpec:
    """A BLS tensor carries the caller's request rows as its batch dimension."""
    return TensorSpec(label, tensor.data_type, tuple(tensor.dims), batched=True)


def steps_bls_callees(repository: Path, ensemble: str) -> list[tuple[str, list[str]]]:
    """Each step of ``ensemble``, in order, with the models it calls by BLS (none: an empty list)."""
    report = Report(repository)
    models = load_models(repository, report)
    steps = []
    for step in models[ensemble].parsed_config.ensemble_scheduling.step:
        settings = check_settings(models[step.model_name], report)
        callees = [call.callee(settings) for call in type(settings).BLS_CALLS] if settings is not None else []
        steps.append((step.model_name, callees))
    return steps


def bls_callees(repository: Path, ensemble: str) -> list[str]:
    """The models that the BLS steps of ``ensemble`` call (perf_analyzer's ``--bls-composing-models``)."""
    return list(dict.fromkeys(callee for _, callees in steps_bls_callees(repository, ensemble) for callee in callees))
