"""The house's rules, read from the source (docs/architecture.md, "The code's layout"): imports point one way
(each area imports only the areas below it; the product never imports its measurement), no module takes part
in an import circle, no product file is long without saying why, and neither the product's distribution nor
its images carry measurement code."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest
import tomllib
from setuptools import find_packages

from pipeline_src import PROJECT_ROOT

PACKAGES = {
    "pipeline_src": PROJECT_ROOT / "pipeline_src",
    "food11_client": PROJECT_ROOT / "client" / "food11_client",
    "food11_api": PROJECT_ROOT / "client" / "food11_api",
    "benchmarks": PROJECT_ROOT / "benchmarks",
    "scripts": PROJECT_ROOT / "scripts",  # entry points and the GPU route's staging: run, never imported
}
PRODUCT = ("pipeline_src", "food11_client", "food11_api", "model_repository")
# scripts/ are the product's commands but for the GPU route's staging (scripts/device_*.py: it stages and runs
# benchmarks/gpu_serve.py on a lent GPU machine), which is measurement's.
MEASUREMENT_SCRIPTS = "scripts.device_"

# What each area may import, besides itself. An area is a folder of pipeline_src (its top-level modules,
# contract.py and PROJECT_ROOT, are the area "pipeline_src"), a client package, the steps' model.py files, or
# the measurement, which may import all of the product; the product imports none of it.
ALLOWED = {
    "pipeline_src": set(),
    "pipeline_src.steps": {"pipeline_src"},
    "pipeline_src.provenance": {"pipeline_src"},
    "pipeline_src.model_build": {"pipeline_src", "pipeline_src.steps", "pipeline_src.provenance"},
    "pipeline_src.repository": {"pipeline_src", "pipeline_src.steps", "pipeline_src.provenance"},
    "pipeline_src.profiling": {
        "pipeline_src",
        "pipeline_src.repository",
        "pipeline_src.steps",
        "pipeline_src.provenance",
    },
    "pipeline_src.serving": {
        "pipeline_src",
        "pipeline_src.repository",
        "pipeline_src.steps",
        "pipeline_src.provenance",
    },
    "pipeline_src.tuning": {
        "pipeline_src",
        "pipeline_src.repository",
        "pipeline_src.serving",
        "pipeline_src.profiling",
    },
    "model_repository": {"pipeline_src", "pipeline_src.steps", "pipeline_src.provenance"},
    "food11_client": {"pipeline_src"},  # the wire contract (pipeline_src/contract.py) only
    "food11_api": {"pipeline_src", "pipeline_src.provenance", "food11_client"},
    "benchmarks": {"pipeline_src", "food11_client", "food11_api"},  # and each folder of pipeline_src, below
}
ALLOWED["benchmarks"] |= {folder for folder in ALLOWED if folder.startswith("pipeline_src.")}
ALLOWED["scripts"] = set(ALLOWED) - {"model_repository"}
MAX_LINES = 350
LONG_FILE_REASON = "Longer than most:"  # how a long file's opening docstring says why it stays one file


def module_files() -> Iterator[tuple[str, Path]]:
    for package, folder in PACKAGES.items():
        for path in sorted(folder.rglob("*.py")):
            parts = [package, *path.relative_to(folder).with_suffix("").parts]
            yield ".".join(parts[:-1] if parts[-1] == "__init__" else parts), path
    for path in sorted(PROJECT_ROOT.glob("model_repository/*/1/model.py")):
        yield f"model_repository.{path.parts[-3]}", path


@cache
def modules() -> dict[str, Path]:
    return dict(module_files())


def area(module: str) -> str:
    package, _, rest = module.partition(".")
    folder = rest.partition(".")[0]
    if package == "pipeline_src" and folder and (PACKAGES[package] / folder).is_dir():
        return f"{package}.{folder}"
    return package


def imported(path: Path) -> set[str]:
    """The project's modules ``path`` imports, wherever the import stands (a late import counts)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    known = modules()
    found = set()
    for name in names:
        while name and name not in known:  # `from package import NAME`: NAME may be a module or a name in it
            name = name.rpartition(".")[0]
        if name:
            found.add(name)
    return found


@cache
def import_graph() -> dict[str, set[str]]:
    return {module: imported(path) - {module} for module, path in modules().items()}


def test_every_area_is_known():
    assert {area(module) for module in modules()} <= set(ALLOWED), "give a new folder its place in ALLOWED"


def test_imports_point_one_way():
    wrong = sorted(
        f"{module} imports {target}"
        for module, targets in import_graph().items()
        for target in targets
        if area(target) != area(module) and area(target) not in ALLOWED[area(module)]
    )
    assert not wrong, "\n".join(wrong)


def test_the_product_imports_no_measurement():
    product = [
        module
        for module in modules()
        if module.startswith((*PRODUCT, "scripts.")) and not module.startswith(MEASUREMENT_SCRIPTS)
    ]
    assert len(product) > 50 and "scripts.perf_input" in product
    wrong = [module for module in product if any(t.startswith("benchmarks") for t in import_graph()[module])]
    assert not wrong


def test_the_products_distribution_carries_no_measurement():
    """What setuptools finds for the product's wheel (pyproject.toml's package discovery), and what its commands
    run: benchmarks/ is a distribution of its own (benchmarks/pyproject.toml)."""
    project = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())
    find = project["tool"]["setuptools"]["packages"]["find"]
    packages = [
        package
        for where in find["where"]
        for package in find_packages(
            str(PROJECT_ROOT / where), include=find["include"], exclude=find.get("exclude", ())
        )
    ]
    assert "pipeline_src.profiling" in packages and "food11_api" in packages
    assert not [package for package in packages if package.startswith("benchmarks")]
    commands = project["project"]["scripts"]
    assert commands["food11-perf-analyzer"].startswith("pipeline_src.profiling.")
    assert commands["food11-tune"].startswith("pipeline_src.tuning.")
    assert not [name for name, target in commands.items() if target.startswith("benchmarks")]


def strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's components with more than one module: each is an import circle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = set()
            while (member := stack.pop()) != node:
                component.add(member)
            component.add(node)
            if len(component) > 1:
                circles.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return circles


def test_no_import_circle():
    # A package's __init__ re-exporting its modules makes no circle with them: arrows into one are left out.
    graph = {
        module: {target for target in targets if modules()[target].name != "__init__.py"}
        for module, targets in import_graph().items()
    }
    assert strongly_connected(graph) == []


def test_the_circle_finder_finds_one():
    assert strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]


@pytest.mark.parametrize("folder", ["pipeline_src", "client"])
def test_no_long_file_without_its_reason(folder):
    long = []
    for path in sorted((PROJECT_ROOT / folder).rglob("*.py")):
        text = path.read_text()
        docstring = ast.get_docstring(ast.parse(text)) or ""
        if text.count("\n") > MAX_LINES and LONG_FILE_REASON not in docstring:
            long.append(f"{path.relative_to(PROJECT_ROOT)}: {text.count(chr(10))} lines")
    assert not long, f"split these, or say why in the opening docstring ({LONG_FILE_REASON!r}): {long}"


@pytest.mark.parametrize("dockerfile", ["Dockerfile.triton", "Dockerfile.api"])
def test_images_copy_the_product_only(dockerfile):
    copied = set()
    for line in (PROJECT_ROOT / dockerfile).read_text().splitlines():
        if match := re.match(r"COPY\s+(?!--from)(.+)\s+\S+$", line):
            copied.update(match.group(1).split())
    assert copied, f"{dockerfile} copies nothing?"
    assert copied <= {"pyproject.toml", "README.md", "constraints.txt", "pipeline_src", "client", "model_repository"}
