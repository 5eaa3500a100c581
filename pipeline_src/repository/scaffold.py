"""Add a new Python step to the model repository: ``food11-new-step NAME``.

Creates a step that loads and answers as created: its ``config.pbtxt`` (tensors, typed parameters, the
``settings`` parameter naming its settings class), a thin ``1/model.py`` on the shared step helpers, its
logic module with the ``StepSettings`` subclass, and a unit test. The example computation,
``OUTPUT = INPUT * scale``, is there to be replaced; it shows the patterns every step needs (requests
stacked into one run and split back, a bad request failing alone with an error naming the step).

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
from dataclasses import dataclass
from pathlib import Path
from string import Template

from pipeline_src import PROJECT_ROOT

TEMPLATES = Path(__file__).parent / "templates"
DEFAULT_PACKAGE = "pipeline_src.steps"
DEFAULT_TESTS_DIR = PROJECT_ROOT / "tests" / "unit"  # the step's test needs no server
SELF_CONTAINED_SUFFIX = "_step"  # NAME_step.py: a module name unlikely to clash with an installed package

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


@dataclass(frozen=True)
class StepSpec:
    """What the new step declares in its config."""

    name: str
    input_name: str = "INPUT"
    output_name: str = "OUTPUT"
    data_type: str = "FP32"  # of the input and the output, spelled without TYPE_
    dims: tuple[int, ...] = (4,)  # one row's shape, without the batch dimension; -1: any size
    max_batch_size: int = 32
    instances: int = 1

    @property
    def settings_class(self) -> str:
        return "".join(part.capitalize() for part in self.name.split("_") if part) + "Settings"

    def check(self) -> None:
        if not self.name.isidentifier() or keyword.iskeyword(self.name):
            raise ScaffoldError(f"step name {self.name!r} is not a valid Python identifier (e.g. top_labels)")
        for role, tensor in (("input", self.input_name), ("output", self.output_name)):
            if not tensor.isidentifier():
                raise ScaffoldError(f"{role} tensor name {tensor!r} is not an identifier (e.g. {role.upper()})")
        if self.input_name == self.output_name:
            raise ScaffoldError(f"input and output are both named {self.input_name!r}")
        if self.data_type not in NUMERIC_TYPES:
            raise ScaffoldError(
                f"data type {self.data_type!r}: the example computation needs one of "
                f"{', '.join(NUMERIC_TYPES)} (edit the created step for BYTES/STRING)"
            )
        if not self.dims or any(dim == 0 or dim < -1 for dim in self.dims):
            raise ScaffoldError(f"dims {list(self.dims)}: each dim is a positive size or -1 (any size)")
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


def _render(template: str, **values: object) -> str:
    return Template((TEMPLATES / template).read_text(encoding="utf-8")).substitute(values)


def _import_path_setup(spec: StepSpec, layout: Layout) -> str:
    """For a self-contained step, the lines that let its unit test import the logic from the model folder."""
    if not layout.self_contained:
        return ""
    relative = Path(os.path.relpath(layout.model_dir(spec.name).resolve(), layout.tests_dir.resolve()))
    return (
        "\nimport sys\nfrom pathlib import Path\n\n"
        "# The logic lives in the model folder, which Triton's Python stub puts on sys.path; so does this test.\n"
        f'sys.path.insert(0, str(Path(__file__).resolve().parent / "{relative.as_posix()}"))\n'
    )


def _row_shape_literal(dims: tuple[int, ...]) -> str:
    """A Python tuple of one test row's shape: the dims, 2 for a variable one."""
    sizes = [str(2 if dim == -1 else dim) for dim in dims]
    return f"({sizes[0]},)" if len(sizes) == 1 else f"({', '.join(sizes)})"


def plan_files(spec: StepSpec, layout: Layout) -> dict[Path, str]:
    """Every file of the new step and its text; writes nothing."""
    spec.check()
    values = dict(
        name=spec.name,
        module=layout.module(spec.name),
        settings_class=spec.settings_class,
        input_name=spec.input_name,
        output_name=spec.output_name,
        data_type=f"TYPE_{spec.data_type}",
        numpy_type=NUMERIC_TYPES[spec.data_type],
        dims=", ".join(map(str, spec.dims)),
        row_shape=_row_shape_literal(spec.dims),
        max_batch_size=spec.max_batch_size,
        instances=spec.instances,
        import_path_setup=_import_path_setup(spec, layout),
    )
    model_dir = layout.model_dir(spec.name)
    return {
        model_dir / "config.pbtxt": _render("config.pbtxt.tmpl", **values),
        model_dir / "1" / "model.py": _render("model.py.tmpl", **values),
        layout.logic_file(spec.name): _render("logic.py.tmpl", **values),
        layout.test_file(spec.name): _render("test_step.py.tmpl", **values),
    }


def create_step(spec: StepSpec, layout: Layout) -> list[Path]:
    """Write the new step's files; refuses (ScaffoldError, nothing written) a bad name or one that exists."""
    files = plan_files(spec, layout)
    model_dir = layout.model_dir(spec.name)
    if model_dir.exists():
        raise ScaffoldError(f"model {spec.name!r} exists already: {model_dir}")
    taken = [path for path in files if path.exists()]
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


def next_steps(spec: StepSpec, layout: Layout, created: list[Path]) -> str:
    """What ``food11-new-step`` prints: the files, then what to do with them."""

    def shown(path: Path) -> str:
        try:
            return str(path.resolve().relative_to(Path.cwd().resolve()))
        except ValueError:
            return str(path)

    logic, test = shown(layout.logic_file(spec.name)), shown(layout.test_file(spec.name))
    lines = [
        f"Created the step '{spec.name}' ({spec.input_name} -> {spec.output_name}, "
        f"TYPE_{spec.data_type} [{', '.join(map(str, spec.dims))}]):"
    ]
    lines += [f"  {shown(path)}" for path in created]
    lines += [
        "Next:",
        f"  1. Put your logic in {logic} (compute, find_problem) and every tunable in {spec.settings_class}",
        f"     and the parameters of {shown(layout.model_dir(spec.name) / 'config.pbtxt')}.",
        f"  2. Test the logic:     .venv/bin/python -m pytest {test} -q",
        f'  3. Wire it into an ensemble: a step with model_name: "{spec.name}", its input_map and output_map'
        " (docs/EXTENDING.md).",
        f"  4. Validate:           food11-validate {shown(layout.repository)}",
        f"  5. Serve and call it:  make serve, then infer on model '{spec.name}' or your ensemble.",
    ]
    return "\n".join(lines)


def _dims(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers, e.g. 3,-1") from None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="food11-new-step", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("name", help="the step's name: a Python identifier, new to the repository (e.g. top_labels)")
    parser.add_argument(
        "--repository",
        type=Path,
        default=PROJECT_ROOT / "model_repository",
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
        "--input", dest="input_name", default=StepSpec.input_name, help="input tensor name (default: %(default)s)"
    )
    parser.add_argument(
        "--output", dest="output_name", default=StepSpec.output_name, help="output tensor name (default: %(default)s)"
    )
    parser.add_argument(
        "--data-type",
        default=StepSpec.data_type,
        type=str.upper,
        choices=list(NUMERIC_TYPES),
        help="element type of input and output (default: %(default)s)",
    )
    parser.add_argument(
        "--dims",
        type=_dims,
        default=StepSpec.dims,
        help="one row's shape, without the batch dimension, e.g. 4 or 3,-1 (default: 4)",
    )
    parser.add_argument("--max-batch-size", type=int, default=StepSpec.max_batch_size, help="(default: %(default)s)")
    parser.add_argument(
        "--instances",
        type=int,
        default=StepSpec.instances,
        help="CPU instances, each its own process (default: %(default)s)",
    )
    args = parser.parse_args(argv)
    if (args.source_dir is None) != (args.package is None):
        parser.error("--source-dir and --package go together")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    spec = StepSpec(
        args.name, args.input_name, args.output_name, args.data_type, args.dims, args.max_batch_size, args.instances
    )
    if args.self_contained:
        layout = Layout(args.repository, args.tests_dir)
    else:
        layout = Layout(
            args.repository,
            args.tests_dir,
            args.source_dir or PROJECT_ROOT / "pipeline_src" / "steps",
            args.package or DEFAULT_PACKAGE,
        )
    try:
        created = create_step(spec, layout)
    except ScaffoldError as exc:
        print(f"food11-new-step: {exc}", file=sys.stderr)
        sys.exit(2)
    print(next_steps(spec, layout, created))


if __name__ == "__main__":
    main()
