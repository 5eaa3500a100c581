"""The pages that describe the repository's DAG and outputs are held to it: docs/architecture.md's drawing
names every step of each shipped ensemble with every tensor it maps and the ensemble's outputs, and
docs/api.md lists every route of the API and every output of the wire contract. Adding a step or an output
without updating the page fails here, naming what is missing."""

import re

import pytest
from fastapi.routing import APIRoute

from pipeline_src import PROJECT_ROOT
from pipeline_src.contract import CLASSIFY_ENSEMBLE, CORE_OUTPUTS, ENSEMBLE
from pipeline_src.repository.loading import parse_config

REPOSITORY = PROJECT_ROOT / "model_repository"
SHIPPED_ENSEMBLES = (ENSEMBLE, "food11_pipeline_topk", CLASSIFY_ENSEMBLE)
ARCHITECTURE = (PROJECT_ROOT / "docs" / "architecture.md").read_text()
API = (PROJECT_ROOT / "docs" / "api.md").read_text()


def drawing() -> str:
    """The DAG's drawing: the fenced block under '## The DAG'."""
    section = ARCHITECTURE[ARCHITECTURE.index("## The DAG") :]
    return section[section.index("```\n") + 4 : section.index("\n```", section.index("```\n") + 4)]


@pytest.mark.parametrize("ensemble", SHIPPED_ENSEMBLES)
def test_the_drawing_names_every_step_and_the_tensors_it_maps(ensemble):
    config = parse_config(REPOSITORY / ensemble / "config.pbtxt")
    drawn = drawing()
    missing = []
    for step in config.ensemble_scheduling.step:
        if not re.search(rf"\b{re.escape(step.model_name)}\s{{2,}}Python", drawn):  # "classifier   Python+ONNX Rt"
            missing.append(f"step {step.model_name}")
        for tensor in [
            *step.input_map.keys(),
            *step.input_map.values(),
            *step.output_map.keys(),
            *step.output_map.values(),
        ]:
            if not re.search(rf"\b{re.escape(tensor)}\b", drawn):
                missing.append(f"{step.model_name}'s tensor {tensor}")
    assert not missing, f"docs/architecture.md's drawing lacks {missing} of {ensemble}"


@pytest.mark.parametrize("ensemble", SHIPPED_ENSEMBLES)
def test_the_drawing_lists_each_ensembles_outputs(ensemble):
    config = parse_config(REPOSITORY / ensemble / "config.pbtxt")
    lines = drawing().splitlines()
    start = next((i for i, line in enumerate(lines) if f"{ensemble} answers:" in line), None)
    assert start is not None, f"docs/architecture.md's drawing has no '{ensemble} answers:' line"
    listed = lines[start].split("answers:")[1]
    for line in lines[start + 1 :]:
        if not re.fullmatch(r"\s+[A-Z_, ]+", line):
            break
        listed += line
    assert re.findall(r"[A-Z_]+", listed) == [output.name for output in config.output]


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


def test_what_the_api_page_says_of_the_shipped_ensembles_extra_outputs_holds():
    extra = [o.name for o in parse_config(REPOSITORY / ENSEMBLE / "config.pbtxt").output if o.name not in CORE_OUTPUTS]
    if "declares the core contract alone" in API:
        assert extra == [], "docs/api.md says food11_pipeline declares no extra outputs"
    topk = parse_config(REPOSITORY / "food11_pipeline_topk" / "config.pbtxt")
    for name in (o.name for o in topk.output if o.name not in CORE_OUTPUTS):
        assert f"`{name}`" in API, f"docs/api.md does not name food11_pipeline_topk's {name}"
