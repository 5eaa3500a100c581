"""The text of a new step's files: the values that fill the placeholders of ``templates/*.tmpl``, and the
filling. The Python it writes (imports sorted as ruff sorts them, lines within ruff's length) passes
``make lint`` as written."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from string import Template

from pipeline_src import PROJECT_ROOT
from pipeline_src.repository.scaffold.spec import BYTES, NUMERIC_TYPES, Layout, StepSpec, Tensor, dims_text

TEMPLATES = Path(__file__).parent.parent / "templates"  # pipeline_src/repository/templates: package data
LINE_LENGTH = 120  # ruff's, pyproject.toml: every generated line fits it
FIRST_PARTY = ("pipeline_src", "food11_client", "food11_api", "benchmarks")  # pyproject.toml, [tool.ruff.lint.isort]
STDLIB = {"__future__", "collections", "dataclasses", "importlib", "math", "pathlib", "sys"}  # those used here


def render(template: str, values: Mapping[str, object]) -> str:
    """The template (a file name in ``TEMPLATES``) with its placeholders filled from ``values``."""
    return Template((TEMPLATES / template).read_text(encoding="utf-8")).substitute(values)


def template_values(spec: StepSpec, layout: Layout) -> dict[str, object]:
    """Every placeholder of the templates and its text for this step; ``spec`` is checked already."""
    return dict(
        name=spec.name,
        module=layout.module(spec.name),
        settings_class=spec.settings_class,
        config_inputs=_config_tensors(spec.inputs),
        config_outputs=_config_tensors(spec.outputs),
        logic_inputs=_logic_tensors(spec.inputs, with_row_shape=False),
        logic_outputs=_logic_tensors(spec.outputs, with_row_shape=True),
        max_batch_size=spec.max_batch_size,
        instances=spec.instances,
        model_imports=_model_imports(spec, layout),
        test_header=_test_header(spec, layout),
        text_tests=_text_tests(spec),
    )


def _section(module: str) -> int:
    """ruff's isort section of an import: 0 future, 1 standard library, 2 third party, 3 first party.
    First party: this project's packages, and any top-level module in ruff's ``src`` roots (by default the
    project's root and its ``src/``), where ruff finds it first party too."""
    top = module.split(".")[0]
    if top == "__future__":
        return 0
    if top in STDLIB:
        return 1
    roots = (PROJECT_ROOT, PROJECT_ROOT / "src")
    if top in FIRST_PARTY or any((root / top).is_dir() or (root / f"{top}.py").is_file() for root in roots):
        return 3
    return 2


def _imports(statements: Iterable[str]) -> str:
    """Import statements sorted as ruff's isort sorts them: by section, blank lines between; in each,
    ``import x`` before ``from x import y``, each by module name."""
    sections: dict[int, list[str]] = {}
    for statement in statements:
        module = statement.split()[1]
        sections.setdefault(_section(module), []).append(statement)

    def key(statement: str) -> tuple[bool, str]:
        return statement.startswith("from "), statement.split()[1].lower()

    return "\n\n".join("\n".join(sorted(sections[section], key=key)) for section in sorted(sections))


def _from_import(module: str, names: Sequence[str]) -> str:
    """``from module import names``, on one line where it fits, else one name a line (as ruff writes it)."""
    line = f"from {module} import {', '.join(names)}"
    if len(line) <= LINE_LENGTH:
        return line
    return f"from {module} import (\n" + "".join(f"    {name},\n" for name in names) + ")"


def _config_tensors(tensors: Sequence[Tensor]) -> str:
    return ",\n".join(
        f'  {{ name: "{tensor.name}", data_type: {tensor.config_type}, dims: [ {", ".join(map(str, tensor.dims))} ] }}'
        for tensor in tensors
    )


def _logic_tensors(tensors: Sequence[Tensor], with_row_shape: bool) -> str:
    """The logic module's ``INPUTS`` (each tensor's numpy type) or ``OUTPUTS`` (with one row's shape, a variable
    dim as 1) entries; text's numpy type is its ``BYTES`` (object arrays)."""
    entries = []
    for tensor in tensors:
        value = BYTES if tensor.data_type == BYTES else f"np.dtype(np.{NUMERIC_TYPES[tensor.data_type]})"
        if with_row_shape:
            value = f"({value}, {tuple(1 if dim == -1 else dim for dim in tensor.dims)})"
        entries.append(f'    "{tensor.name}": {value},  # {tensor.config_type} {dims_text(tensor.dims)}')
    return "\n".join(entries)


def _text_tests(spec: StepSpec) -> str:
    """The generated test's tests of text inputs (``test_step_text.py.tmpl``), for a step that has any."""
    if not any(tensor.data_type == BYTES for tensor in spec.inputs):
        return ""
    tests = render("test_step_text.py.tmpl", {"settings_class": spec.settings_class})
    return "\n\n\n" + tests.strip("\n")  # placed right after the previous test's last line


def _model_imports(spec: StepSpec, layout: Layout) -> str:
    return _imports(
        [
            _from_import(layout.module(spec.name), ["INPUTS", spec.settings_class, "compute", "find_problem"]),
            "from pipeline_src.steps.triton_step import StepContext, answer_stacked",
        ]
    )


def _relative(target: Path, start: Path) -> str:
    return Path(os.path.relpath(target.resolve(), start.resolve())).as_posix()


def _test_header(spec: StepSpec, layout: Layout) -> str:
    """The unit test's imports, its import of the logic module as ``step``, and ``CONFIG``."""
    statements = [
        "from pathlib import Path",
        "import numpy as np",
        "import pytest",
        "from tritonclient.grpc import model_config_pb2",
        "from tritonclient.utils import triton_to_np_dtype",
        "from pipeline_src.repository.loading import parse_config",
        "from pipeline_src.steps.settings import SettingsError",
    ]
    model_dir = _relative(layout.model_dir(spec.name), layout.tests_dir)
    config = f'CONFIG = Path(__file__).resolve().parent / "{model_dir}" / "config.pbtxt"'
    if not layout.self_contained:
        package, _, module = layout.module(spec.name).rpartition(".")
        return _imports([*statements, f"from {package} import {module} as step"]) + f"\n\n{config}"
    return (
        _imports(["import importlib", "import sys", *statements])
        + f"\n\n{config}\n"
        + "# The logic lives in the model folder, which Triton's Python stub puts on sys.path; so does this test.\n"
        + "sys.path.insert(0, str(CONFIG.parent))\n"
        + f'step = importlib.import_module("{layout.module(spec.name)}")'
    )
