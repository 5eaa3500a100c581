"""Which models a call of an ensemble needs, read from configurations Triton opens to every caller: the ensemble,
the steps Triton runs for a call naming those outputs (its config's steps, less those ``pruned_steps`` says Triton
leaves out: pipeline_src/ensemble_pruning.py, quirks included), and the models those steps call by BLS (a step's
config parameter ``<role>_model``, the ``callee_field`` of its ``BLS_CALLS``: pipeline_src/steps/bls.py). So a
call of ``food11_pipeline`` naming ``contract.CLASSIFY_OUTPUTS`` needs neither the vision encoder nor
``caption_with_label`` nor the captioner. Standard library only; no I/O (step_health.py asks Triton).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from pipeline_src.ensemble_pruning import Step, pruned_steps

BLS_CALLEE_SUFFIX = "_model"  # a step's parameter naming a model it calls by BLS: captioner_model


def steps_of(config: Mapping) -> tuple[Step, ...]:
    """An ensemble's steps from its config as Triton answers it in JSON (``get_model_config(as_json=True)``,
    field names as in config.pbtxt); none for a model that is no ensemble."""
    return tuple(
        Step(
            step["model_name"],
            frozenset(step.get("input_map", {}).values()),
            tuple(step.get("output_map", {}).values()),
        )
        for step in config.get("ensemble_scheduling", {}).get("step", [])
    )


def output_names(config: Mapping) -> tuple[str, ...]:
    return tuple(output["name"] for output in config.get("output", []))


def bls_callees(config: Mapping) -> tuple[str, ...]:
    """The models a step's config names as BLS callees (its ``*_model`` parameters), in the parameters' order."""
    parameters = config.get("parameters", {})
    return tuple(
        dict.fromkeys(
            value["string_value"]
            for key, value in parameters.items()
            if key.endswith(BLS_CALLEE_SUFFIX) and value.get("string_value")
        )
    )


@dataclass(frozen=True)
class EnsembleCall:
    """What a call asks Triton for: an ensemble, and the outputs it names (None: none, so all of them)."""

    ensemble: str
    outputs: tuple[str, ...] | None = None


@dataclass(frozen=True)
class EnsembleGraph:
    """An ensemble the API calls and the models it is built from.

    ``callees``: by step model, the models it calls by BLS. ``complete``: every config was read (False: some
    are from an earlier look, or missing, and the graph is read again at the next look)."""

    ensemble: str
    outputs: tuple[str, ...] = ()
    steps: tuple[Step, ...] = ()
    callees: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    complete: bool = True

    @classmethod
    def alone(cls, ensemble: str) -> EnsembleGraph:
        """Before its config could be read: the ensemble alone, to be read again."""
        return cls(ensemble, complete=False)

    def needed(self, requested: Iterable[str] | None = None) -> tuple[str, ...]:
        """The models a call naming ``requested`` outputs needs (None: every output, as a call naming none):
        the steps Triton runs for it, each followed by its BLS callees, then the ensemble itself."""
        wanted = self.outputs if requested is None else tuple(requested)
        pruned = pruned_steps(self.steps, self.outputs, wanted)
        models: list[str] = []
        for index, step in enumerate(self.steps):
            if index not in pruned:
                models += [step.model, *self.callees.get(step.model, ())]
        if not self.steps:  # no ensemble: the model itself, and whatever it calls
            models += self.callees.get(self.ensemble, ())
        models.append(self.ensemble)
        return tuple(dict.fromkeys(models))

    @property
    def models(self) -> tuple[str, ...]:
        """Every model the ensemble is built from, and the ensemble: what ``/readyz`` needs ready."""
        return self.needed(None)
