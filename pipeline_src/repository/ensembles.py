"""An ensemble's graph: its steps' models and their tensors, who produces and who consumes each ensemble
tensor, types and shapes across every edge, batch sizes, cycles (of steps, and of ensembles nested in
ensembles). Mirrors Triton 2.51's load-time checks (core r24.10: ensemble_utils.cc,
model_config_utils.cc) and adds the one Triton only hits at run time (a max_batch_size 0 step whose
dims lack the batch dimension)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from pipeline_src.ensemble_pruning import Step, ensemble_outputs_read, starved_calls
from pipeline_src.repository.loading import ModelEntry
from pipeline_src.repository.report import Report
from pipeline_src.repository.tensors import ANY, TensorSpec, differs_only_in_batching, edge_mismatch, spec_of


@dataclass(frozen=True)
class Endpoint:
    """One end of an ensemble tensor: a step's input or output, or the ensemble's own input or output."""

    who: str  # "step 2 (classifier)" or "the ensemble"
    step: int | None  # 1-based step number; None for the ensemble itself
    spec: TensorSpec | None  # None when the step's model or tensor is unknown (reported already)


def check_ensemble(entry: ModelEntry, models: dict[str, ModelEntry], report: Report) -> None:
    _EnsembleCheck(entry, models, report).run()


def check_ensemble_nesting(models: dict[str, ModelEntry], report: Report) -> None:
    """Ensembles may contain ensembles, but never themselves, directly or not."""
    contains = {
        name: {
            step.model_name
            for step in entry.parsed_config.ensemble_scheduling.step
            if step.model_name in models and models[step.model_name].is_ensemble
        }
        for name, entry in models.items()
        if entry.is_ensemble
    }
    for cycle in find_cycles(contains):
        report.error(cycle[0], f"ensembles contain each other in a cycle: {' -> '.join([*cycle, cycle[0]])}")


def quoted_names(names: Iterable[str]) -> str:
    """Names as the messages list them: quoted, comma-separated, or "none"."""
    return ", ".join(f"'{name}'" for name in names) or "none"


Node = TypeVar("Node", int, str)  # a step's number, a model's name: sortable, for a stable report


def find_cycles(edges: Mapping[Node, Iterable[Node]]) -> list[list[Node]]:
    """One cycle per group of nodes that reach each other (self-loops included), as the list of its
    nodes in edge order; nodes are visited in sorted order so the report is stable."""
    found: list[list[Node]] = []
    groups: list[set[Node]] = []
    state: dict[Node, str] = {}  # node -> "open" while on the current path, "done" after
    path: list[Node] = []

    def visit(node: Node) -> None:
        state[node] = "open"
        path.append(node)
        for successor in sorted(edges.get(node, ())):
            if state.get(successor) == "open":
                cycle = path[path.index(successor) :]
                if not any(set(cycle) <= group or group <= set(cycle) for group in groups):
                    groups.append(set(cycle))
                    found.append(cycle)
            elif successor not in state:
                visit(successor)
        path.pop()
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node)
    return found


class _EnsembleCheck:
    def __init__(self, entry: ModelEntry, models: dict[str, ModelEntry], report: Report):
        self.entry, self.config, self.models, self.report = entry, entry.parsed_config, models, report
        self.producers: dict[str, list[Endpoint]] = defaultdict(list)
        self.consumers: dict[str, list[Endpoint]] = defaultdict(list)
        self.unbatched_steps: set[int] = set()  # max_batch_size 0 steps in a batching ensemble (reported)

    def error(self, message: str) -> None:
        self.report.error(self.entry.name, message)

    def run(self) -> None:
        if not self.config.ensemble_scheduling.step:
            self.error("platform 'ensemble' but ensemble_scheduling has no step")
            return
        for setting in ("instance_group", "model_warmup"):
            if len(getattr(self.config, setting)):
                self.error(f"{setting} is not allowed in an ensemble (Triton refuses it)")
        for tensor in self.config.input:
            spec = spec_of(f"ensemble input '{tensor.name}'", tensor, self.entry.batched, use_reshape=True)
            self.producers[tensor.name].append(Endpoint("the ensemble", None, spec))
        for number, step in enumerate(self.config.ensemble_scheduling.step, start=1):
            self.read_step(number, step)
        for tensor in self.config.output:
            spec = spec_of(f"ensemble output '{tensor.name}'", tensor, self.entry.batched, use_reshape=True)
            if tensor.name not in self.producers:
                self.error(f"ensemble output '{tensor.name}' is produced by no step")
            self.consumers[tensor.name].append(Endpoint("the ensemble", None, spec))
        self.check_producers()
        self.check_edges()
        self.check_cycles()
        if not any(problem.model == self.entry.name for problem in self.report.errors):
            self.check_pruning()

    def read_step(self, number: int, step) -> None:
        """Record what the step consumes and produces, checking it against its model's config."""
        label = f"step {number} ({step.model_name or 'no model'})"
        if not step.model_name:
            self.error(f"{label} names no model_name")
        if not step.input_map or not step.output_map:
            self.error(f"{label} needs a non-empty input_map and output_map (Triton refuses it)")
        model = self.models.get(step.model_name)
        if model is None and step.model_name:
            self.error(f"{label}: model '{step.model_name}' is not in the repository")
        config = model.config if model else None  # None: unknown, or its config is broken (reported)
        inputs = {tensor.name: tensor for tensor in config.input} if config else {}
        outputs = {tensor.name: tensor for tensor in config.output} if config else {}
        if model is not None and config is not None:
            self.check_step_model(label, step, model, inputs, outputs)
            self.check_step_batching(number, label, step, model, inputs, outputs)
        batched = model is not None and model.batched
        for key, tensor in step.input_map.items():
            spec = spec_of(f"{label} input '{key}'", inputs[key], batched) if key in inputs else None
            self.consumers[tensor].append(Endpoint(label, number, spec))
        for key, tensor in step.output_map.items():
            spec = spec_of(f"{label} output '{key}'", outputs[key], batched) if key in outputs else None
            self.producers[tensor].append(Endpoint(label, number, spec))

    def check_step_model(self, label: str, step, model: ModelEntry, inputs: dict, outputs: dict) -> None:
        for key in step.input_map:
            if key not in inputs:
                self.error(
                    f"{label}: input_map key '{key}' is not an input of model '{model.name}' "
                    f"(its inputs: {quoted_names(inputs)})"
                )
        for name, tensor in inputs.items():
            if name not in step.input_map and not tensor.optional:
                self.error(f"{label}: input '{name}' of model '{model.name}' is not fed (no input_map key '{name}')")
        for key in step.output_map:
            if key not in outputs:
                self.error(
                    f"{label}: output_map key '{key}' is not an output of model '{model.name}' "
                    f"(its outputs: {quoted_names(outputs)})"
                )
        if model.batched and model.max_batch_size < self.entry.max_batch_size:
            self.error(
                f"{label}: model '{model.name}' has max_batch_size {model.max_batch_size}, smaller than "
                f"the ensemble's {self.entry.max_batch_size} (Triton refuses the ensemble)"
            )
        versions = [int(version.name) for version in model.versions]
        if step.model_version != -1 and versions and step.model_version not in versions:
            self.error(
                f"{label}: model_version {step.model_version} is not a version Triton loads of "
                f"'{model.name}' (loaded: {versions})"
            )

    def check_step_batching(
        self, number: int, label: str, step, model: ModelEntry, inputs: dict, outputs: dict
    ) -> None:
        """A max_batch_size 0 step in a batching ensemble gets [batch, ...] tensors: Triton loads it, then
        fails every request of more than one row unless its dims start with the (variable) batch dimension."""
        if not self.entry.batched or model.batched:
            return
        mapped = [inputs[key] for key in step.input_map if key in inputs]
        mapped += [outputs[key] for key in step.output_map if key in outputs]
        lacking = [tensor.name for tensor in mapped if not (tensor.dims and tensor.dims[0] == ANY)]
        if lacking:
            self.unbatched_steps.add(number)
            self.error(
                f"{label}: model '{model.name}' has max_batch_size 0 inside an ensemble that batches "
                f"(max_batch_size {self.entry.max_batch_size}): its tensor(s) {quoted_names(lacking)} lack the "
                "batch dimension they get (Triton loads this, then fails requests of more than one row); "
                f"give it max_batch_size >= {self.entry.max_batch_size}"
            )

    def check_producers(self) -> None:
        """Each tensor produced once, and used (Triton refuses an ensemble with an unused tensor)."""
        for tensor, sources in self.producers.items():
            who = " and by ".join(source.who for source in sources)
            if len(sources) > 1:
                self.error(f"tensor '{tensor}' is produced more than once: by {who}")
            if tensor not in self.consumers:
                what = f"ensemble input '{tensor}'" if sources[0].step is None else f"tensor '{tensor}' from {who}"
                self.error(
                    f"{what} is used by no step and is not an ensemble output "
                    "(Triton 2.51 refuses to load an ensemble with an unused tensor)"
                )

    def check_edges(self) -> None:
        """Every consumed tensor has a producer, whose type and shape the consumer accepts."""
        for tensor, ends in self.consumers.items():
            sources = self.producers.get(tensor, [])
            for end in ends:
                if not sources and end.step is not None:
                    self.error(
                        f"{end.who} consumes tensor '{tensor}', which no step produces and is not an ensemble input"
                    )
                source = sources[0] if len(sources) == 1 else None
                if source is not None and source.spec and end.spec:
                    problem = edge_mismatch(tensor, source.spec, end.spec)
                    if problem and not (
                        {source.step, end.step} & self.unbatched_steps
                        and differs_only_in_batching(source.spec, end.spec)
                    ):
                        self.error(problem)

    def check_cycles(self) -> None:
        """No step needs, directly or not, a tensor it produces itself."""
        labels: dict[int, str] = {}
        needs: dict[int, set[int]] = defaultdict(set)  # step -> the steps producing what it consumes
        for tensor, ends in self.consumers.items():
            for end in ends:
                if end.step is None:
                    continue
                labels[end.step] = end.who
                needs[end.step].update(s.step for s in self.producers.get(tensor, []) if s.step is not None)
        for cycle in find_cycles(needs):
            path = " needs ".join(labels[step] for step in [*cycle, cycle[0]])
            self.error(f"steps form a cycle: {path}")

    def check_pruning(self) -> None:
        """Warn of the calls Triton cannot answer because it leaves out a step that the call needs
        (pipeline_src.ensemble_pruning), naming the smallest such call, the cause and the fix."""
        scheduled = self.config.ensemble_scheduling.step
        steps = [Step(s.model_name, frozenset(s.input_map.values()), tuple(s.output_map.values())) for s in scheduled]
        ensemble_outputs = [tensor.name for tensor in self.config.output]
        starved = starved_calls(steps, [tensor.name for tensor in self.config.input], ensemble_outputs)
        if not starved:
            return
        readers = "; ".join(
            f"step {index + 1} ({steps[index].model}) reads {quoted_names(names)}"
            for index, names in ensemble_outputs_read(steps, ensemble_outputs).items()
        )
        for call in starved:
            self.report.warning(
                self.entry.name,
                f"a call naming only {quoted_names(call.requested)} fails in Triton ('unexpected deadlock'): Triton "
                f"leaves out step {call.dropped + 1} ({steps[call.dropped].model}), so '{call.tensor}' is never "
                f"made. Triton counts an ensemble output that a call does not name as unneeded, even when a step "
                f"reads it ({readers}): have steps read outputs that are no ensemble outputs instead "
                "(docs/EXTENDING.md, 'A step after another')",
            )
