"""The pages that describe the repository's DAG and outputs are held to it: docs/architecture.md's drawing
draws each of the project's steps with every tensor it maps and lists each drawn ensemble's outputs, and
docs/api.md lists every route of the API, every output of the wire contract, and the outputs beyond it that the
project's steps make. Changing one of the drawn steps, its tensors or its outputs without updating the page fails
here, naming what is missing.

"The project's steps" are the ones the drawing draws (tests/repository_checks.py): a step of yours, wired into
an ensemble as docs/EXTENDING.md says, needs no line on these pages (tests/unit/
test_added_steps_pass_the_suite_checks.py adds two and runs these checks)."""

import pytest
from fastapi.routing import APIRoute
from repository_checks import (
    api_page_extra_output_problems,
    dag_drawing,
    drawing_answers_problems,
    drawing_names_problems,
    drawing_tensor_problems,
    drawn_ensembles,
)

from pipeline_src import PROJECT_ROOT
from pipeline_src.contract import CORE_OUTPUTS

REPOSITORY = PROJECT_ROOT / "model_repository"
DOCS = PROJECT_ROOT / "docs"
API = (DOCS / "api.md").read_text()
DRAWN_ENSEMBLES = drawn_ensembles(REPOSITORY, dag_drawing(DOCS))


def test_every_drawn_step_is_in_the_repository_and_the_contracts_ensembles_are_drawn():
    """Fails for a step the drawing draws that the repository lacks (renamed or removed), or a drawing that no
    longer names food11_pipeline or food11_classify."""
    assert drawing_names_problems(REPOSITORY, DOCS) == []


@pytest.mark.parametrize("ensemble", DRAWN_ENSEMBLES)
def test_the_drawing_names_every_drawn_step_with_the_tensors_it_maps(ensemble):
    """Fails for a drawn step's tensor (its own name or an ensemble tensor a drawn step reads or the ensemble
    answers) missing from the drawing, and for a drawn step's BLS callee left undrawn."""
    assert drawing_tensor_problems(REPOSITORY, DOCS, ensemble) == []


@pytest.mark.parametrize("ensemble", DRAWN_ENSEMBLES)
def test_the_drawing_lists_the_outputs_its_steps_make_in_each_ensemble(ensemble):
    """Fails for an '<ensemble> answers:' list other than the outputs the drawn steps make (one added, renamed or
    reordered), a contract output missing from it, or a listed output whose steps are not drawn."""
    assert drawing_answers_problems(REPOSITORY, DOCS, ensemble) == []


def test_the_api_page_lists_every_route_and_core_output():
    from food11_api.app import create_app

    routes = [
        f"`{method} {route.path}`"
        for route in create_app().routes
        if isinstance(route, APIRoute) and route.include_in_schema
        for method in sorted(route.methods - {"HEAD"})
    ]
    assert [route for route in routes if route not in API] == [], "docs/api.md's endpoint table lacks these"
    contract = API[API.index("## The raw contract") :]
    assert [name for name in CORE_OUTPUTS if f"| `{name}` | out |" not in contract] == []


def test_the_api_page_names_each_output_the_projects_steps_make_beyond_the_core_contract():
    """Fails for an output beyond CORE_OUTPUTS that a drawn step makes in an ensemble the section names
    (CAPTION_MODE, TOP_LABELS, TOP_PROBABILITIES today) and the section does not name."""
    assert api_page_extra_output_problems(REPOSITORY, DOCS) == []
