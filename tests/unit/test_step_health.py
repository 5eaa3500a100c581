"""Which models each API route needs, derived from the shipped ensembles' configs (client/food11_api/
ensemble_graph.py): /caption and /predict food11_pipeline's, /classify food11_classify's; and what the API says
when some are not ready (step_health.py). No server: the configs are read from model_repository/ into the JSON
Triton answers for them (tests/integration/test_api_step_health.py holds the same derivation to a live Triton's
answers).

What each route needs is read from the repository too (tests/repository_checks.py: each ensemble's steps, and
the BLS callees their settings classes declare), so a step of yours wired into an ensemble passes these
(tests/unit/test_added_steps_pass_the_suite_checks.py adds two)."""

from __future__ import annotations

import typing

import pytest
from repository_checks import (
    api_graph,
    api_graph_problems,
    config_json,
    contract_ensembles,
    declared_bls_callees,
    ensemble_names,
    models_built_from,
    route_needs_problems,
    settings_class,
)

from food11_api.ensemble_graph import BLS_CALLEE_SUFFIX, EnsembleCall, EnsembleGraph, bls_callees
from food11_api.routes.captioning import CAPTIONING_PATHS, ensemble_calls
from food11_api.routes.health import ProbedRoute
from food11_api.settings import ApiSettings
from food11_api.step_health import Readiness, refusal_detail
from pipeline_src import PROJECT_ROOT, contract

REPOSITORY = PROJECT_ROOT / "model_repository"
CLASSIFY_MODELS = models_built_from(REPOSITORY, contract.CLASSIFY_ENSEMBLE)  # its steps, then itself


def shipped_graph(ensemble: str = contract.ENSEMBLE) -> EnsembleGraph:
    """What the API's monitor reads from Triton, read from the files."""
    return api_graph(REPOSITORY, ensemble)


@pytest.mark.parametrize("ensemble", ensemble_names(REPOSITORY))
def test_the_api_reads_each_ensembles_steps_and_bls_callees_as_the_configs_say(ensemble):
    """Fails where the API's reading of Triton's JSON (steps, outputs, callees by their ``*_model`` parameters)
    differs from the config files and the settings classes' BLS_CALLS, or needs other models than those."""
    assert api_graph_problems(REPOSITORY, ensemble) == []


def test_the_pipelines_captioning_step_calls_the_captioner_by_bls():
    """The one BLS call of the shipped pipeline, as the API reads it: what /readyz needs beyond the steps."""
    graph = shipped_graph()
    assert {step: callees for step, callees in graph.callees.items() if callees} == {
        "caption_with_label": ("captioner",)
    }
    assert graph.models.index("captioner") == graph.models.index("caption_with_label") + 1


def shipped_readiness(ensemble: str = contract.ENSEMBLE, **look) -> Readiness:
    """A look at the shipped ensembles the API calls: ``ensemble`` (its caption one) and the classify one."""
    return Readiness(0.0, (shipped_graph(ensemble), shipped_graph(contract.CLASSIFY_ENSEMBLE)), **look)


CALLS = ensemble_calls(ApiSettings())
CAPTION_CALL, CLASSIFY_CALL = CALLS["/caption"], CALLS["/classify"]


def test_the_classify_ensemble_is_the_label_steps_alone():
    graph = shipped_graph(contract.CLASSIFY_ENSEMBLE)
    assert graph.outputs == contract.CLASSIFY_OUTPUTS
    assert graph.models == graph.needed(contract.CLASSIFY_OUTPUTS) == CLASSIFY_MODELS


@pytest.mark.parametrize("ensemble", contract_ensembles(REPOSITORY))
def test_each_route_needs_the_steps_of_its_ensembles_outputs_and_their_callees(ensemble):
    """With ``ensemble`` as the caption ensemble: /caption and /predict need every model it is built from,
    /classify food11_classify's, /readyz both. Fails where the API would refuse a route for a model it does not
    need, or answer while one it needs is down."""
    assert route_needs_problems(REPOSITORY, ensemble) == []


@pytest.mark.parametrize("ensemble", contract_ensembles(REPOSITORY))
def test_a_call_naming_some_outputs_needs_only_the_steps_triton_runs_for_them(ensemble):
    """As a caller that still asks the caption ensemble for the label's outputs (FOOD11_API_CLASSIFY_MODEL_NAME
    set to it): Triton leaves out the captioning steps."""
    readiness = shipped_readiness(ensemble)
    assert readiness.needed(EnsembleCall(ensemble, contract.CLASSIFY_OUTPUTS)) == (*CLASSIFY_MODELS[:-1], ensemble)


def test_bls_callees_are_the_steps_model_parameters():
    """The API finds a step's callees by its ``*_model`` parameters: caption_with_label's captioner, and none for a
    model whose settings class declares no BLS call (every other model of the repository)."""
    assert bls_callees(config_json(REPOSITORY, "caption_with_label")) == ("captioner",)
    calling_none = [
        path.parent.name
        for path in sorted(REPOSITORY.glob("*/config.pbtxt"))
        if not declared_bls_callees(REPOSITORY, path.parent.name)
    ]
    assert "caption_with_label" not in calling_none and "captioner" in calling_none
    for model in calling_none:
        assert bls_callees(config_json(REPOSITORY, model)) == (), model


@pytest.mark.parametrize("config", sorted(REPOSITORY.glob("*/config.pbtxt")), ids=lambda path: path.parent.name)
def test_every_declared_bls_call_is_found_by_the_api_from_the_config_alone(config):
    """The API cannot import the steps' settings classes (tests/unit/test_layout.py): it finds a step's BLS
    callees by their parameter's name, so every ``BlsCall.callee_field`` must end in ``_model``."""
    declared_class = settings_class(config)
    declared = () if declared_class is None else declared_class.BLS_CALLS
    assert all(call.callee_field.endswith(BLS_CALLEE_SUFFIX) for call in declared)
    assert set(bls_callees(config_json(REPOSITORY, config.parent.name))) == set(
        declared_bls_callees(REPOSITORY, config.parent.name)
    )


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
