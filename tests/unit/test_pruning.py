"""Triton's ensemble pruning as the validator mirrors it: which steps a call runs, and the calls it starves."""

from pathlib import Path

from pipeline_src import PROJECT_ROOT
from pipeline_src.ensemble_pruning import Step, produced, pruned_steps, starved_calls
from pipeline_src.repository.loading import parse_config

CORE = ["LABEL", "PROBABILITY", "CAPTION", "CAPTION_STATUS", "MODELS", "CAPTION_MODE"]  # the pipelines' outputs


def steps_of(ensemble: str, repository: Path = PROJECT_ROOT / "model_repository") -> list[Step]:
    config = parse_config(repository / ensemble / "config.pbtxt")
    return [
        Step(step.model_name, frozenset(step.input_map.values()), tuple(step.output_map.values()))
        for step in config.ensemble_scheduling.step
    ]


def run_for(steps: list[Step], outputs: list[str], requested: list[str]) -> list[str]:
    """The models a call naming ``requested`` runs, checking that it gets every one of them."""
    pruned = pruned_steps(steps, outputs, requested)
    assert set(requested) <= produced(steps, ["IMAGE"], pruned)
    return [step.model for index, step in enumerate(steps) if index not in pruned]


def test_a_classify_only_call_runs_neither_the_vision_encoder_nor_the_captioning_step():
    steps = steps_of("food11_pipeline")
    assert run_for(steps, CORE, ["LABEL", "PROBABILITY", "MODELS"]) == ["preprocess", "classifier", "label"]
    assert run_for(steps, CORE, ["CAPTION"]) == [step.model for step in steps]  # the caption needs the label
    assert run_for(steps, CORE, CORE) == [step.model for step in steps]


def test_top_labels_alone_keeps_the_label_step_and_drops_the_captioning():
    steps = steps_of("food11_pipeline_topk")
    outputs = [*CORE, "TOP_LABELS", "TOP_PROBABILITIES"]
    assert run_for(steps, outputs, ["TOP_LABELS"]) == ["preprocess", "classifier", "label", "top_labels"]


def test_the_shipped_ensembles_starve_no_call():
    assert starved_calls(steps_of("food11_pipeline"), ["IMAGE"], CORE) == []
    topk = [*CORE, "TOP_LABELS", "TOP_PROBABILITIES"]
    assert starved_calls(steps_of("food11_pipeline_topk"), ["IMAGE"], topk) == []


def with_caption_tags(reads: set[str], caption_step_maps: tuple[str, ...] = ()) -> tuple[list[Step], list[str]]:
    """food11_pipeline with a step after caption_with_label that reads ``reads``, caption_with_label mapping
    ``caption_step_maps`` more of its outputs to ensemble tensors."""
    steps = steps_of("food11_pipeline")
    index = next(index for index, step in enumerate(steps) if step.model == "caption_with_label")
    steps[index] = Step(steps[index].model, steps[index].inputs, (*steps[index].outputs, *caption_step_maps))
    steps.append(Step("caption_tags", frozenset(reads), ("TAGS",)))
    return steps, [*CORE, "TAGS"]


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
    assert starved_calls(steps, ["IMAGE"], outputs) == []
    assert run_for(steps, outputs, ["TAGS"]) == [step.model for step in steps]
    assert run_for(steps, outputs, ["LABEL"]) == ["preprocess", "classifier", "label"]
