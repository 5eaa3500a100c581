"""Which models each API route needs, derived from the shipped ensembles' configs (client/food11_api/
ensemble_graph.py), and what the API says when some are not ready (step_health.py). No server: the configs are
read from model_repository/ into the JSON Triton answers for them (tests/integration/test_api_step_health.py
holds the same derivation to a live Triton's answers)."""

from __future__ import annotations

import typing

import pytest
from google.protobuf.json_format import MessageToDict

from food11_api.ensemble_graph import (
    BLS_CALLEE_SUFFIX,
    EnsembleGraph,
    bls_callees,
    output_names,
    steps_of,
)
from food11_api.routes.captioning import CAPTIONING_PATHS, REQUESTED_OUTPUTS
from food11_api.routes.health import ProbedRoute
from food11_api.step_health import Readiness, refusal_detail
from pipeline_src import PROJECT_ROOT, contract
from pipeline_src.repository.loading import parse_config
from pipeline_src.steps.settings import declared_settings_class

REPOSITORY = PROJECT_ROOT / "model_repository"
CLASSIFY_MODELS = ("preprocess", "classifier", "label", "food11_pipeline")
CAPTION_MODELS = (
    "preprocess",
    "classifier",
    "label",
    "vision_encoder",
    "caption_with_label",
    "captioner",
    "food11_pipeline",
)


def config_json(model: str) -> dict:
    """A config as Triton's get_model_config(as_json=True) answers it (MessageToJson, proto field names)."""
    return MessageToDict(parse_config(REPOSITORY / model / "config.pbtxt"), preserving_proto_field_name=True)


def shipped_graph(ensemble: str = contract.ENSEMBLE) -> EnsembleGraph:
    """What the API's monitor reads from Triton, read from the files."""
    config = config_json(ensemble)
    steps = steps_of(config)
    callees = {step.model: bls_callees(config_json(step.model)) for step in steps}
    return EnsembleGraph(ensemble, output_names(config), steps, callees)


def test_the_shipped_ensemble_has_its_five_steps_and_one_bls_callee():
    graph = shipped_graph()
    assert [step.model for step in graph.steps] == [
        "preprocess",
        "classifier",
        "label",
        "vision_encoder",
        "caption_with_label",
    ]
    assert {step: callees for step, callees in graph.callees.items() if callees} == {
        "caption_with_label": ("captioner",)
    }
    assert graph.models == CAPTION_MODELS  # what /readyz needs ready


@pytest.mark.parametrize("ensemble", [contract.ENSEMBLE, "food11_pipeline_topk"])
def test_each_route_needs_the_steps_of_its_outputs_and_their_callees(ensemble):
    graph = shipped_graph(ensemble)
    needed = {path: graph.needed(REQUESTED_OUTPUTS[path]) for path in CAPTIONING_PATHS}
    assert needed["/classify"] == (*CLASSIFY_MODELS[:-1], ensemble)  # no vision encoder, BLS step or captioner
    everything = (*CAPTION_MODELS[:-1], *(["top_labels"] if ensemble.endswith("topk") else []), ensemble)
    assert needed["/caption"] == needed["/predict"] == graph.models == everything


def test_bls_callees_are_the_steps_model_parameters():
    assert bls_callees(config_json("caption_with_label")) == ("captioner",)
    for model in ("preprocess", "classifier", "label", "vision_encoder", "captioner", "top_labels"):
        assert bls_callees(config_json(model)) == (), model


@pytest.mark.parametrize("config", sorted(REPOSITORY.glob("*/config.pbtxt")), ids=lambda path: path.parent.name)
def test_every_declared_bls_call_is_found_by_the_api_from_the_config_alone(config):
    """The API cannot import the steps' settings classes (tests/unit/test_layout.py): it finds a step's BLS
    callees by their parameter's name, so every ``BlsCall.callee_field`` must end in ``_model``."""
    parameters = {key: value.string_value for key, value in parse_config(config).parameters.items()}
    settings_class = declared_settings_class(parameters)
    declared = () if settings_class is None else settings_class.BLS_CALLS
    assert all(call.callee_field.endswith(BLS_CALLEE_SUFFIX) for call in declared)
    expected = {call.callee(settings_class.from_parameters(parameters)) for call in declared} if declared else set()
    assert set(bls_callees(config_json(config.parent.name))) == expected


def test_every_captioning_route_says_what_it_asks_for_and_readyz_can_probe_it():
    assert set(REQUESTED_OUTPUTS) == CAPTIONING_PATHS == set(typing.get_args(ProbedRoute))
    assert REQUESTED_OUTPUTS["/classify"] == contract.CLASSIFY_OUTPUTS


def test_a_down_captioner_refuses_captions_and_names_itself_while_classify_goes_on():
    readiness = Readiness(0.0, shipped_graph(), not_ready={"captioner": "not ready in Triton"})
    assert readiness.down(None) == ["captioner"]
    assert readiness.down(contract.CLASSIFY_OUTPUTS) == []
    assert readiness.why_not_ready("t:8001") == "not ready: captioner (not ready in Triton)"
    assert readiness.why_not_ready("t:8001", contract.CLASSIFY_OUTPUTS) is None
    assert refusal_detail(readiness.down()) == "captioner is not ready (healing or down): retry later"


def test_an_ensemble_unloaded_with_its_step_names_the_step_even_for_a_call_that_skips_it():
    # Triton unloads the ensemble with any of its steps (measured on 2.51): a classify-only call cannot be
    # answered without the vision encoder, and its refusal names it.
    down = {"vision_encoder": "not ready in Triton", "food11_pipeline": "not ready in Triton"}
    readiness = Readiness(0.0, shipped_graph(), not_ready=down)
    assert readiness.down(contract.CLASSIFY_OUTPUTS) == ["vision_encoder", "food11_pipeline"]
    assert refusal_detail(readiness.down(contract.CLASSIFY_OUTPUTS)) == (
        "vision_encoder and food11_pipeline are not ready (healing or down): retry later"
    )
    assert readiness.why_not_ready("t:8001") == (
        "not ready: vision_encoder (not ready in Triton), food11_pipeline (not ready in Triton)"
    )


def test_triton_unreachable_is_no_models_state_and_readyz_names_triton():
    readiness = Readiness(0.0, EnsembleGraph.alone(contract.ENSEMBLE), reachable=False, error="connection refused")
    assert readiness.down() == []  # admission lets the request fail at once, as before the monitor
    assert readiness.why_not_ready("t:8001") == (
        "ensemble food11_pipeline not ready at t:8001: Triton not reachable (connection refused)"
    )
