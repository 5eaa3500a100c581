"""Triton's ensemble pruning as the validator mirrors it: which steps a call runs, and the calls it starves.

The steps and outputs are read from the repository's ensembles (tests/repository_checks.py): a step of yours
wired into one is run by the calls that need it and by no other, and these tests pass with it (tests/unit/
test_added_steps_pass_the_suite_checks.py adds two)."""

from pathlib import Path

import pytest
from repository_checks import (
    classify_call_problems,
    ensemble_names,
    ensemble_outputs,
    ensemble_steps,
    models_run_for,
    starved_call_problems,
)

from pipeline_src import PROJECT_ROOT
from pipeline_src.contract import CLASSIFY_ENSEMBLE, CORE_OUTPUTS, ENSEMBLE
from pipeline_src.ensemble_pruning import Step, produced, pruned_steps, starved_calls

REPOSITORY = PROJECT_ROOT / "model_repository"


def run_for(steps: list[Step], outputs: list[str], requested: list[str]) -> list[str]:
    """The models a call naming ``requested`` runs, checking that it gets every one of them."""
    pruned = pruned_steps(steps, outputs, requested)
    assert set(requested) <= produced(steps, ["IMAGE"], pruned)
    return [step.model for index, step in enumerate(steps) if index not in pruned]


def test_a_classify_only_call_runs_neither_the_vision_encoder_nor_the_captioning_step():
    """A call of food11_pipeline naming only the label's outputs runs exactly food11_classify's steps (read from
    its config); one naming CAPTION needs more (the caption is prompted by the label); one naming every output
    runs every step. Fails where Triton's pruning, as mirrored, would run a captioning step for a label."""
    assert classify_call_problems(REPOSITORY) == []
    assert {"vision_encoder", "caption_with_label"}.isdisjoint(models_run_for(REPOSITORY, ENSEMBLE, ["LABEL"]))


def test_top_labels_alone_keeps_the_label_steps_and_drops_the_captioning():
    classify_steps = [step.model for step in ensemble_steps(REPOSITORY, CLASSIFY_ENSEMBLE)]
    ran = models_run_for(REPOSITORY, "food11_pipeline_topk", ["TOP_LABELS"])
    assert ran == [*classify_steps, "top_labels"]


@pytest.mark.parametrize("ensemble", ensemble_names(REPOSITORY))
def test_the_repositorys_ensembles_starve_no_call(ensemble):
    """Fails for an ensemble where a call naming some outputs drops a step whose tensor a kept step needs."""
    assert starved_call_problems(REPOSITORY, ensemble) == []


def contract_part(ensemble: str, repository: Path = REPOSITORY) -> tuple[list[Step], list[str]]:
    """The steps of ``ensemble`` a call naming the wire contract's outputs runs, each mapping only the tensors
    those steps read or the ensemble answers, and the outputs they make: the shipped wiring, whatever steps of
    yours the ensemble also has."""
    steps, outputs = ensemble_steps(repository, ensemble), ensemble_outputs(repository, ensemble)
    pruned = pruned_steps(steps, outputs, CORE_OUTPUTS)
    kept = [step for index, step in enumerate(steps) if index not in pruned]
    read = {tensor for step in kept for tensor in step.inputs}
    kept = [Step(step.model, step.inputs, tuple(t for t in step.outputs if t in read or t in outputs)) for step in kept]
    made = {tensor for step in kept for tensor in step.outputs}
    return kept, [output for output in outputs if output in made]


def with_caption_tags(reads: set[str], caption_step_maps: tuple[str, ...] = ()) -> tuple[list[Step], list[str]]:
    """food11_pipeline's contract part with a step after the step making CAPTION that reads ``reads``, the
    captioning step mapping ``caption_step_maps`` more of its outputs to ensemble tensors."""
    steps, outputs = contract_part(ENSEMBLE)
    index = next(index for index, step in enumerate(steps) if "CAPTION" in step.outputs)
    steps[index] = Step(steps[index].model, steps[index].inputs, (*steps[index].outputs, *caption_step_maps))
    steps.append(Step("caption_tags", frozenset(reads), ("TAGS",)))
    return steps, [*outputs, "TAGS"]


def test_a_step_reading_ensemble_outputs_starves_calls_that_do_not_name_them():
    """Triton counts an unrequested ensemble output unneeded although a step reads it, and counts it again once
    that step is dropped: with caption_tags reading CAPTION and LABEL, a call naming only LABEL loses the label
    step, one naming only CAPTION caption_with_label (each counted down twice), one naming only TAGS both."""
    steps, outputs = with_caption_tags({"CAPTION", "LABEL"})

    starved = starved_calls(steps, ["IMAGE"], outputs)

    assert [(s.requested, steps[s.dropped].model, s.tensor) for s in starved] == [
        (("LABEL",), "label", "LABEL"),
        (("CAPTION",), "caption_with_label", "CAPTION"),
    ]


def test_a_step_reading_only_tensors_that_are_no_ensemble_outputs_starves_no_call():
    steps, outputs = with_caption_tags({"generated", "probabilities"}, caption_step_maps=("generated",))
    classify_steps = [step.model for step in ensemble_steps(REPOSITORY, CLASSIFY_ENSEMBLE)]
    assert starved_calls(steps, ["IMAGE"], outputs) == []
    assert run_for(steps, outputs, ["TAGS"]) == [step.model for step in steps]
    assert run_for(steps, outputs, ["LABEL"]) == classify_steps
