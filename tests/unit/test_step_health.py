"""Which models each API route needs, derived from the shipped ensembles' configs (client/food11_api/
ensemble_graph.py): /caption and /predict food11_pipeline's, /classify food11_classify's; and what the API says
when some are not ready (step_health.py). No server: the configs are
read from model_repository/ into the JSON Triton answers for them (tests/integration/test_api_step_health.py
holds the same derivation to a live Triton's answers)."""

from __future__ import annotations

import typing

import pytest
from google.protobuf.json_format import MessageToDict

from food11_api.ensemble_graph import (
    BLS_CALLEE_SUFFIX,
    EnsembleCall,
    EnsembleGraph,
    bls_callees,
    output_names,
    steps_of,
)
from food11_api.routes.captioning import CAPTIONING_PATHS, ensemble_calls
from food11_api.routes.health import ProbedRoute
from food11_api.settings import ApiSettings
from food11_api.step_health import Readiness, refusal_detail
from pipeline_src import PROJECT_ROOT, contract
from pipeline_src.repository.loading import parse_config
from pipeline_src.steps.settings import declared_settings_class

REPOSITORY = PROJECT_ROOT / "model_repository"
CLASSIFY_MODELS = ("preprocess", "classifier", "label", contract.CLASSIFY_ENSEMBLE)
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


def shipped_readiness(ensemble: str = contract.ENSEMBLE, **look) -> Readiness:
    """A look at the shipped ensembles the API calls: ``ensemble`` (its caption one) and the classify one."""
    return Readiness(0.0, (shipped_graph(ensemble), shipped_graph(contract.CLASSIFY_ENSEMBLE)), **look)


CALLS = ensemble_calls(ApiSettings())
CAPTION_CALL, CLASSIFY_CALL = CALLS["/caption"], CALLS["/classify"]


def test_the_classify_ensemble_is_the_label_steps_alone():
    graph = shipped_graph(contract.CLASSIFY_ENSEMBLE)
    assert graph.outputs == contract.CLASSIFY_OUTPUTS
    assert graph.models == graph.needed(contract.CLASSIFY_OUTPUTS) == CLASSIFY_MODELS


@pytest.mark.parametrize("ensemble", [contract.ENSEMBLE, "food11_pipeline_topk"])
def test_each_route_needs_the_steps_of_its_ensembles_outputs_and_their_callees(ensemble):
    readiness = shipped_readiness(ensemble)
    calls = ensemble_calls(ApiSettings(model_name=ensemble))
    needed = {path: readiness.needed(calls[path]) for path in CAPTIONING_PATHS}
    assert needed["/classify"] == CLASSIFY_MODELS  # no vision encoder, BLS step or captioner
    everything = (*CAPTION_MODELS[:-1], *(["top_labels"] if ensemble.endswith("topk") else []), ensemble)
    assert needed["/caption"] == needed["/predict"] == everything
    assert readiness.needed() == (*everything, contract.CLASSIFY_ENSEMBLE)  # what /readyz needs ready


@pytest.mark.parametrize("ensemble", [contract.ENSEMBLE, "food11_pipeline_topk"])
def test_a_call_naming_some_outputs_needs_only_the_steps_triton_runs_for_them(ensemble):
    """As a caller that still asks the caption ensemble for the label's outputs (FOOD11_API_CLASSIFY_MODEL_NAME
    set to it): Triton leaves out the captioning steps."""
    readiness = shipped_readiness(ensemble)
    assert readiness.needed(EnsembleCall(ensemble, contract.CLASSIFY_OUTPUTS)) == (*CLASSIFY_MODELS[:-1], ensemble)


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


def test_every_captioning_route_says_what_it_calls_and_readyz_can_probe_it():
    assert set(CALLS) == CAPTIONING_PATHS == set(typing.get_args(ProbedRoute))
    assert CALLS["/caption"] == CALLS["/predict"] == EnsembleCall(contract.ENSEMBLE)  # every output
    # Its own ensemble, not food11_pipeline's outputs named: Triton's response cache ignores the outputs named.
    assert CALLS["/classify"] == EnsembleCall(contract.CLASSIFY_ENSEMBLE, contract.CLASSIFY_OUTPUTS)


def test_a_down_captioner_refuses_captions_and_names_itself_while_classify_goes_on():
    readiness = shipped_readiness(not_ready={"captioner": "not ready in Triton"})
    assert readiness.down(CAPTION_CALL) == readiness.down() == ["captioner"]
    assert readiness.down(CLASSIFY_CALL) == []
    assert readiness.why_not_ready("t:8001") == "not ready: captioner (not ready in Triton)"
    assert readiness.why_not_ready("t:8001", CLASSIFY_CALL) is None
    assert refusal_detail(readiness.down()) == "captioner is not ready (healing or down): retry later"


def test_an_ensemble_unloaded_with_its_step_names_the_step_even_for_a_call_that_skips_it():
    # Triton unloads every ensemble that has the step (measured on 2.51): food11_pipeline goes with the vision
    # encoder, and a call of it naming only the label's outputs cannot be answered either, and its refusal
    # names the step. food11_classify, which has no vision encoder, still answers.
    readiness = shipped_readiness(not_ready=dict.fromkeys(["vision_encoder", "food11_pipeline"], "not ready in Triton"))
    subset = EnsembleCall(contract.ENSEMBLE, contract.CLASSIFY_OUTPUTS)
    assert readiness.down(subset) == readiness.down(CAPTION_CALL) == ["vision_encoder", "food11_pipeline"]
    assert refusal_detail(readiness.down(subset)) == (
        "vision_encoder and food11_pipeline are not ready (healing or down): retry later"
    )
    assert readiness.down(CLASSIFY_CALL) == []
    assert readiness.why_not_ready("t:8001") == (
        "not ready: vision_encoder (not ready in Triton), food11_pipeline (not ready in Triton)"
    )


def test_a_step_both_ensembles_have_takes_both_with_it():
    down = ["classifier", "food11_pipeline", contract.CLASSIFY_ENSEMBLE]
    readiness = shipped_readiness(not_ready=dict.fromkeys(down, "not ready in Triton"))
    assert readiness.down(CLASSIFY_CALL) == ["classifier", contract.CLASSIFY_ENSEMBLE]
    assert readiness.down(CAPTION_CALL) == ["classifier", "food11_pipeline"]
    assert readiness.down() == down


def test_triton_unreachable_is_no_models_state_and_readyz_names_triton():
    graphs = (EnsembleGraph.alone(contract.ENSEMBLE), EnsembleGraph.alone(contract.CLASSIFY_ENSEMBLE))
    readiness = Readiness(0.0, graphs, reachable=False, error="connection refused")
    assert readiness.down() == readiness.down(CLASSIFY_CALL) == []  # the request fails at once, as before
    assert readiness.why_not_ready("t:8001") == (
        "ensembles food11_pipeline and food11_classify not ready at t:8001: Triton not reachable (connection refused)"
    )
    assert readiness.why_not_ready("t:8001", CLASSIFY_CALL) == (
        "ensemble food11_classify not ready at t:8001: Triton not reachable (connection refused)"
    )
