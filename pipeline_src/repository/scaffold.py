"""Add a new Python step to the model repository: ``food11-new-step NAME``.

Creates a step that loads and answers as created: its ``config.pbtxt`` (tensors, typed parameters, the
``settings`` parameter naming its settings class), a thin ``1/model.py`` on the shared step helpers, its
logic module with the ``StepSettings`` subclass, its ``INPUTS`` and ``OUTPUTS`` and ``compute`` (which
returns a dict, one array per output), a unit test, and a row per setting in docs/configuration.md. It
takes any number of inputs and outputs, each ``NAME:TYPE:DIMS`` (e.g. ``--input PIXELS:FP32:3,384,384
--output BRIGHTNESS:FP32:1 --output SHARPNESS:FP32:1``). The example computation (each output row is the
mean of the row's inputs times ``scale``) is there to be replaced; it shows the patterns every step needs
(requests stacked into one run and split back, a bad request failing alone with an error naming the step).
Every file it writes passes ``make lint`` as written.

Where the logic module goes:
  default           ``pipeline_src/steps/NAME.py``, module ``pipeline_src.steps.NAME``
  --source-dir/--package   another importable package of yours
  --self-contained  ``<repository>/NAME/NAME_step.py``, top-level module ``NAME_step``: the step lives entirely
                    in the repository. The Python backend's stub appends the model's folder (and its version
                    folder) to ``sys.path`` before importing ``1/model.py`` (python_backend r24.10,
                    src/pb_stub.cc), so the server imports it; it ignores PYTHONPATH, so nothing else would.
"""

from __future__ import annotations

import argparse
import keyword
import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from string import Template

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from pipeline_src import PROJECT_ROOT
from pipeline_src.repository.loading import parse_config

TEMPLATES = Path(__file__).parent / "templates"
DEFAULT_PACKAGE = "pipeline_src.steps"
DEFAULT_REPOSITORY = PROJECT_ROOT / "model_repository"
DEFAULT_TESTS_DIR = PROJECT_ROOT / "tests" / "unit"  # the step's test needs no server
CONFIGURATION_DOC = PROJECT_ROOT / "docs" / "configuration.md"  # its "Configuration" table: a row per setting
CONFIGURATION_SECTION = "\n## Configuration\n"
SELF_CONTAINED_SUFFIX = "_step"  # NAME_step.py: a module name unlikely to clash with an installed package
LINE_LENGTH = 120  # ruff's, pyproject.toml: every generated line fits it
FIRST_PARTY = ("pipeline_src", "food11_client", "food11_api", "benchmarks")  # pyproject.toml, [tool.ruff.lint.isort]
STDLIB = {"__future__", "collections", "dataclasses", "importlib", "math", "pathlib", "sys"}  # those used here

# The element types the example computation supports: config spelling (without TYPE_) -> numpy type.
NUMERIC_TYPES = {
    "FP16": "float16",
    "FP32": "float32",
    "FP64": "float64",
    "INT8": "int8",
    "INT16": "int16",
    "INT32": "int32",
    "INT64": "int64",
    "UINT8": "uint8",
    "UINT16": "uint16",
    "UINT32": "uint32",
    "UINT64": "uint64",
}


class ScaffoldError(ValueError):
    """The step cannot be created as asked; nothing was written."""


def _dims_text(dims: Sequence[int]) -> str:
    return f"[{', '.join(map(str, dims))}]"


@dataclass(frozen=True)
class Tensor:
    """One input or output of the step, as its config declares it."""

    name: str
    data_type: str = "FP32"  # spelled without TYPE_
    dims: tuple[int, ...] = (4,)  # one row's shape, without the batch dimension; -1: any size

    @classmethod
    def parse(cls, text: str, data_type: str = "FP32", dims: tuple[int, ...] = (4,)) -> Tensor:
        """``NAME``, ``NAME:TYPE`` or ``NAME:TYPE:DIMS`` (e.g. ``PIXELS:FP32:3,384,384``); what it leaves out
        is ``data_type`` and ``dims``."""
        name, _, rest = text.partition(":")
        type_text, _, dims_text = rest.partition(":")
        return cls(
            name,
            type_text.upper().removeprefix("TYPE_") if type_text else data_type,
            parse_dims(dims_text) if dims_text else dims,
        )

    @property
    def config_type(self) -> str:
        return f"TYPE_{self.data_type}"

    def describe(self) -> str:
        return f"{self.name} {self.config_type} {_dims_text(self.dims)}"

    def check(self, role: str) -> None:
        if not self.name.isidentifier():
            raise ScaffoldError(f"{role} tensor name {self.name!r} is not an identifier (e.g. {role.upper()})")
        if self.data_type not in NUMERIC_TYPES:
            raise ScaffoldError(
                f"{role} {self.name}: data type {self.data_type!r}: the example computation needs one of "
                f"{', '.join(NUMERIC_TYPES)} (add BYTES tensors by editing the generated files)"
            )
        if not self.dims or any(dim == 0 or dim < -1 for dim in self.dims):
            raise ScaffoldError(
                f"{role} {self.name}: dims {list(self.dims)}: each dim is a positive size or -1 (any size)"
            )


@dataclass(frozen=True)
class StepSpec:
    """What the new step declares in its config."""

    name: str
    inputs: tuple[Tensor, ...] = (Tensor("INPUT"),)
    outputs: tuple[Tensor, ...] = (Tensor("OUTPUT"),)
    max_batch_size: int = 32
    instances: int = 1

    @property
    def settings_class(self) -> str:
        return "".join(part.capitalize() for part in self.name.split("_") if part) + "Settings"

    def check(self) -> None:
        if not self.name.isidentifier() or keyword.iskeyword(self.name):
            raise ScaffoldError(f"step name {self.name!r} is not a valid Python identifier (e.g. top_labels)")
        if not self.inputs or not self.outputs:
            raise ScaffoldError("a step needs at least one input and one output")
        for role, tensors in (("input", self.inputs), ("output", self.outputs)):
            for tensor in tensors:
                tensor.check(role)
        names = [tensor.name for tensor in (*self.inputs, *self.outputs)]
        if repeated := sorted({name for name in names if names.count(name) > 1}):
            raise ScaffoldError(f"tensor name(s) {', '.join(map(repr, repeated))} used more than once")
        if self.max_batch_size < 1:
            raise ScaffoldError("max_batch_size must be >= 1: the step stacks requests along the batch dimension")
        if self.instances < 1:
            raise ScaffoldError("instances must be >= 1")


@dataclass(frozen=True)
class Layout:
    """Where the step's files go."""

    repository: Path
    tests_dir: Path
    source_dir: Path | None = None  # the directory of ``package``; None: self-contained (in the model folder)
    package: str = DEFAULT_PACKAGE  # the dotted package of the logic module (unused when self-contained)
    # The docs page whose "Configuration" table gets a row per setting of the new step; None: none
    # (``food11-new-step`` passes docs/configuration.md when it writes into this project's repository).
    configuration_doc: Path | None = field(default=None, kw_only=True)

    @property
    def self_contained(self) -> bool:
        return self.source_dir is None

    def model_dir(self, name: str) -> Path:
        return self.repository / name

    def module(self, name: str) -> str:
        """The logic module's import name."""
        return f"{name}{SELF_CONTAINED_SUFFIX}" if self.self_contained else f"{self.package}.{name}"

    def logic_file(self, name: str) -> Path:
        if self.source_dir is None:  # self-contained
            return self.model_dir(name) / f"{self.module(name)}.py"
        return self.source_dir / f"{name}.py"

    def test_file(self, name: str) -> Path:
        return self.tests_dir / f"test_step_{name}.py"


# --- rendering ----------------------------------------------------------------------------------------------


def _render(template: str, **values: object) -> str:
    return Template((TEMPLATES / template).read_text(encoding="utf-8")).substitute(values)


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


def _row_shape_literal(dims: Sequence[int], variable: int) -> str:
    """A Python tuple of one row's shape: the dims, ``variable`` for a variable one."""
    sizes = [str(variable if dim == -1 else dim) for dim in dims]
    return f"({sizes[0]},)" if len(sizes) == 1 else f"({', '.join(sizes)})"


def _config_tensors(tensors: Sequence[Tensor]) -> str:
    return ",\n".join(
        f'  {{ name: "{tensor.name}", data_type: {tensor.config_type}, dims: [ {", ".join(map(str, tensor.dims))} ] }}'
        for tensor in tensors
    )


def _logic_inputs(spec: StepSpec) -> str:
    return "\n".join(
        f'    "{tensor.name}": np.dtype(np.{NUMERIC_TYPES[tensor.data_type]}),  '
        f"# {tensor.config_type} {_dims_text(tensor.dims)}"
        for tensor in spec.inputs
    )


def _logic_outputs(spec: StepSpec) -> str:
    return "\n".join(
        f'    "{tensor.name}": (np.dtype(np.{NUMERIC_TYPES[tensor.data_type]}), '
        f"{_row_shape_literal(tensor.dims, 1)}),  # {tensor.config_type} {_dims_text(tensor.dims)}"
        for tensor in spec.outputs
    )


def _from_import(module: str, names: Sequence[str]) -> str:
    """``from module import names``, on one line where it fits, else one name a line (as ruff writes it)."""
    line = f"from {module} import {', '.join(names)}"
    if len(line) <= LINE_LENGTH:
        return line
    return f"from {module} import (\n" + "".join(f"    {name},\n" for name in names) + ")"


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


def _configuration_rows(spec: StepSpec) -> list[str]:
    """The rows docs/configuration.md's "Configuration" table gets for the new step's settings."""
    return [
        f"| {spec.name} | `scale` | 2.0 | the example computation's factor (food11-new-step's: replace it with "
        f"your settings, and this row with theirs) |"
    ]


def with_configuration_rows(text: str, rows: Sequence[str]) -> str | None:
    """``text`` (docs/configuration.md) with ``rows`` appended to its "Configuration" table; None when it has
    no such table."""
    head, found, section = text.partition(CONFIGURATION_SECTION)
    if not found:
        return None
    lines = section.split("\n")
    table = [index for index, line in enumerate(lines) if line.startswith("| ")]
    if not table:
        return None
    last = table[0]
    while last + 1 < len(lines) and lines[last + 1].startswith("| "):  # the first table, to its last row
        last += 1
    return head + found + "\n".join([*lines[: last + 1], *rows, *lines[last + 1 :]])


def plan_files(spec: StepSpec, layout: Layout) -> dict[Path, str]:
    """Every file of the new step and its text (docs/configuration.md too, when the layout names it);
    writes nothing."""
    spec.check()
    values = dict(
        name=spec.name,
        module=layout.module(spec.name),
        settings_class=spec.settings_class,
        config_inputs=_config_tensors(spec.inputs),
        config_outputs=_config_tensors(spec.outputs),
        logic_inputs=_logic_inputs(spec),
        logic_outputs=_logic_outputs(spec),
        max_batch_size=spec.max_batch_size,
        instances=spec.instances,
        model_imports=_model_imports(spec, layout),
        test_header=_test_header(spec, layout),
    )
    model_dir = layout.model_dir(spec.name)
    files = {
        model_dir / "config.pbtxt": _render("config.pbtxt.tmpl", **values),
        model_dir / "1" / "model.py": _render("model.py.tmpl", **values),
        layout.logic_file(spec.name): _render("logic.py.tmpl", **values),
        layout.test_file(spec.name): _render("test_step.py.tmpl", **values),
    }
    for path, text in files.items():
        long = [number for number, line in enumerate(text.splitlines(), 1) if len(line) > LINE_LENGTH]
        if path.suffix == ".py" and long:
            raise ScaffoldError(
                f"{path.name} would have line(s) {long} longer than {LINE_LENGTH} characters: shorten the names"
            )
    text_format.Parse(files[model_dir / "config.pbtxt"], model_config_pb2.ModelConfig())  # raises on a bad name
    doc = layout.configuration_doc
    if doc is not None and doc.is_file():
        updated = with_configuration_rows(doc.read_text(encoding="utf-8"), _configuration_rows(spec))
        if updated is not None:
            files[doc] = updated
    return files


def create_step(spec: StepSpec, layout: Layout) -> list[Path]:
    """Write the new step's files; refuses (ScaffoldError, nothing written) a bad name or one that exists."""
    files = plan_files(spec, layout)
    model_dir = layout.model_dir(spec.name)
    if model_dir.exists():
        raise ScaffoldError(f"model {spec.name!r} exists already: {model_dir}")
    taken = [path for path in files if path.exists() and path != layout.configuration_doc]
    if taken:
        raise ScaffoldError(f"step {spec.name!r}: {', '.join(map(str, taken))} exist(s) already")
    if layout.source_dir is not None and not (layout.source_dir / "__init__.py").is_file():
        raise ScaffoldError(
            f"{layout.source_dir} is not a package directory (no __init__.py), so "
            f"{layout.module(spec.name)} would not import"
        )
    if not layout.repository.is_dir():
        raise ScaffoldError(f"no model repository at {layout.repository}")
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return list(files)


# --- what to do next ----------------------------------------------------------------------------------------


def ensemble_tensors(repository: Path) -> list[tuple[str, str, str, str]]:
    """Every tensor a step produces inside an ensemble of ``repository``: (ensemble, tensor, producer, its
    type and dims as ``TYPE_FP32 [3, 384, 384]``); what a new step's input can be wired to."""
    configs = {}
    for path in sorted(repository.glob("*/config.pbtxt")):
        try:
            configs[path.parent.name] = parse_config(path)
        except (text_format.ParseError, OSError, UnicodeDecodeError):
            continue  # food11-validate reports it
    found = []
    for ensemble, config in configs.items():
        if config.platform != "ensemble":
            continue
        for tensor in config.input:
            found.append((ensemble, tensor.name, "the ensemble's input", _tensor_type(tensor)))
        for step in config.ensemble_scheduling.step:
            producer = configs.get(step.model_name)
            outputs = {tensor.name: tensor for tensor in producer.output} if producer else {}
            for key, value in step.output_map.items():
                if key in outputs:
                    found.append((ensemble, value, f"{step.model_name}'s {key}", _tensor_type(outputs[key])))
    return found


def _tensor_type(tensor) -> str:
    return f"{model_config_pb2.DataType.Name(tensor.data_type)} {_dims_text(list(tensor.dims))}"


def _wiring_hint(spec: StepSpec, layout: Layout) -> list[str]:
    available = ensemble_tensors(layout.repository)
    lines = [
        f'     model_name: "{spec.name}"',
        "     model_version: -1",
    ]
    for tensor in spec.inputs:
        wanted = f"{tensor.config_type} {_dims_text(tensor.dims)}"
        matches = [f"{value} ({ensemble}: {source})" for ensemble, value, source, kind in available if kind == wanted]
        lines.append(f'     input_map {{ key: "{tensor.name}", value: "<an ensemble tensor of {wanted}>" }}')
        if matches:
            lines.append(f"       # {wanted} in this repository: {', '.join(matches)}")
    lines += [f'     output_map {{ key: "{tensor.name}", value: "{tensor.name}" }}' for tensor in spec.outputs]
    return lines


def next_steps(spec: StepSpec, layout: Layout, created: list[Path]) -> str:
    """What ``food11-new-step`` prints: the files, then what to do with them."""

    def shown(path: Path) -> str:
        try:
            return str(path.resolve().relative_to(Path.cwd().resolve()))
        except ValueError:
            return str(path)

    logic, test = shown(layout.logic_file(spec.name)), shown(layout.test_file(spec.name))
    config = shown(layout.model_dir(spec.name) / "config.pbtxt")
    inputs = ", ".join(tensor.describe() for tensor in spec.inputs)
    outputs = ", ".join(tensor.describe() for tensor in spec.outputs)
    lines = [f"Created the step '{spec.name}' ({inputs} -> {outputs}):"]
    lines += [f"  {shown(path)}" for path in created]
    doc = layout.configuration_doc
    if doc is not None and doc in created:
        settings_docs = f"its row in {shown(doc)} (added for 'scale'; tests/unit/test_settings_drift.py checks it)"
    else:
        settings_docs = "a row per setting in docs/configuration.md, if this repository's tests check that table"
    lines += [
        "Next:",
        f"  1. Put your logic in {logic}: compute(batch, settings) gets every request's rows stacked, one array",
        "     per input, and returns a dict, one array per output with one row per input row (exactly OUTPUTS:",
        "     the server refuses anything else); find_problem refuses a request alone.",
        f"     Every tunable goes in {spec.settings_class}, the parameters of {config} and",
        f"     {settings_docs}.",
        f"  2. Test the logic:     .venv/bin/python -m pytest {test} -q   (and: make lint)",
        "  3. Wire it into an ensemble (docs/EXTENDING.md, 'Wiring it into an ensemble'): in its",
        "     ensemble_scheduling, a step",
        *_wiring_hint(spec, layout),
        "     and, for a caller to read them, its outputs in the ensemble's output list.",
        f"  4. Validate:           .venv/bin/food11-validate {shown(layout.repository)}",
        f"  5. Serve and call it:  make serve, then infer on model '{spec.name}' or your ensemble.",
        f"  6. Profile it:         .venv/bin/python scripts/perf_input.py   (writes build/perf_input/{spec.name}.json",
        "     from the ensemble's wiring once an ensemble feeds it, or says why not), then",
        f"     .venv/bin/food11-perf-analyzer -m {spec.name} -u 127.0.0.1:8001 -i grpc "
        f"--input-data build/perf_input/{spec.name}.json",
        "     (docs/EXTENDING.md, 'Profiling a step').",
    ]
    return "\n".join(lines)


# --- the command line ---------------------------------------------------------------------------------------


def parse_dims(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise ScaffoldError(f"dims {text!r} is not a comma-separated list of integers, e.g. 3,-1") from None


def _dims(text: str) -> tuple[int, ...]:
    try:
        return parse_dims(text)
    except ScaffoldError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="food11-new-step", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("name", help="the step's name: a Python identifier, new to the repository (e.g. top_labels)")
    parser.add_argument(
        "--repository",
        type=Path,
        default=DEFAULT_REPOSITORY,
        help="the model repository (default: %(default)s)",
    )
    place = parser.add_mutually_exclusive_group()
    place.add_argument(
        "--source-dir", type=Path, help=f"the directory of --package, for the logic module (default: {DEFAULT_PACKAGE})"
    )
    place.add_argument(
        "--self-contained",
        action="store_true",
        help="put the logic module in the model's folder (<repository>/NAME/NAME_step.py)",
    )
    parser.add_argument("--package", help=f"the dotted package of --source-dir (default: {DEFAULT_PACKAGE})")
    parser.add_argument(
        "--tests-dir", type=Path, default=DEFAULT_TESTS_DIR, help="where the unit test goes (default: %(default)s)"
    )
    parser.add_argument(
        "--input",
        dest="inputs",
        action="append",
        metavar="NAME[:TYPE[:DIMS]]",
        help="an input tensor, e.g. PIXELS:FP32:3,384,384; repeat it for several (default: INPUT); "
        "TYPE and DIMS left out are --data-type and --dims",
    )
    parser.add_argument(
        "--output",
        dest="outputs",
        action="append",
        metavar="NAME[:TYPE[:DIMS]]",
        help="an output tensor, e.g. BRIGHTNESS:FP32:1; repeat it for several (default: OUTPUT)",
    )
    parser.add_argument(
        "--data-type",
        default="FP32",
        type=str.upper,
        choices=list(NUMERIC_TYPES),
        help="element type of a tensor that does not say its own (default: %(default)s)",
    )
    parser.add_argument(
        "--dims",
        type=_dims,
        default=(4,),
        help="one row's shape, without the batch dimension, of a tensor that does not say its own, "
        "e.g. 4 or 3,-1 (default: 4)",
    )
    parser.add_argument("--max-batch-size", type=int, default=StepSpec.max_batch_size, help="(default: %(default)s)")
    parser.add_argument(
        "--instances",
        type=int,
        default=StepSpec.instances,
        help="CPU instances, each its own process (default: %(default)s)",
    )
    parser.add_argument(
        "--no-docs",
        action="store_true",
        help="leave docs/configuration.md alone (by default a step of this project's repository gets its "
        "settings' rows there)",
    )
    args = parser.parse_args(argv)
    if (args.source_dir is None) != (args.package is None):
        parser.error("--source-dir and --package go together")
    return args


def spec_from_args(args: argparse.Namespace) -> StepSpec:
    def tensors(texts: list[str] | None, default: str) -> tuple[Tensor, ...]:
        return tuple(Tensor.parse(text, args.data_type, args.dims) for text in (texts or [default]))

    return StepSpec(
        args.name, tensors(args.inputs, "INPUT"), tensors(args.outputs, "OUTPUT"), args.max_batch_size, args.instances
    )


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    documented = not args.no_docs and args.repository.resolve() == DEFAULT_REPOSITORY.resolve()
    doc = CONFIGURATION_DOC if documented else None
    if args.self_contained:
        layout = Layout(args.repository, args.tests_dir, configuration_doc=doc)
    else:
        layout = Layout(
            args.repository,
            args.tests_dir,
            args.source_dir or PROJECT_ROOT / "pipeline_src" / "steps",
            args.package or DEFAULT_PACKAGE,
            configuration_doc=doc,
        )
    try:
        spec = spec_from_args(args)
        created = create_step(spec, layout)
    except ScaffoldError as exc:
        print(f"food11-new-step: {exc}", file=sys.stderr)
        sys.exit(2)
    print(next_steps(spec, layout, created))


if __name__ == "__main__":
    main()
