"""The command line ``food11-new-step NAME``: its arguments, the step and layout they ask for, and the run
that creates the step and prints what to do next (``--help`` says it all)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pipeline_src import PROJECT_ROOT
from pipeline_src.repository.scaffold.files import create_step
from pipeline_src.repository.scaffold.onnx_file import create_onnx_step, read_spec
from pipeline_src.repository.scaffold.spec import (
    DATA_TYPES,
    DEFAULT_PACKAGE,
    Layout,
    ScaffoldError,
    StepSpec,
    Tensor,
    parse_dims,
    wire_type,
)
from pipeline_src.repository.scaffold.wiring import next_steps, onnx_next_steps

DEFAULT_REPOSITORY = PROJECT_ROOT / "model_repository"
DEFAULT_TESTS_DIR = PROJECT_ROOT / "tests" / "unit"  # the step's test needs no server
# Beside the repository (this project's, or a copy of its tree): its "Configuration" table gets a row per setting.
CONFIGURATION_DOC = Path("docs") / "configuration.md"

DESCRIPTION = """\
Add a new Python step to the model repository: ``food11-new-step NAME``.

Creates a step that loads and answers as created: its ``config.pbtxt`` (tensors, typed parameters, the
``settings`` parameter naming its settings class), a thin ``1/model.py`` on the shared step helpers, its
logic module with the ``StepSettings`` subclass, its ``INPUTS`` and ``OUTPUTS`` and ``compute`` (which
returns a dict, one array per output), a unit test, and a row per setting in docs/configuration.md. It
takes any number of inputs and outputs, each ``NAME:TYPE:DIMS`` (e.g. ``--input PIXELS:UINT8:3,384,384
--output BRIGHTNESS:FP32:1 --output SHARPNESS:FP32:1``); TYPE is a numeric type or BYTES, text (the config's
TYPE_STRING: object arrays of UTF-8 bytes in the step), e.g. ``--input TEXT:BYTES:1 --output SUMMARY:BYTES:1``.
The example computation (each output row is the mean of the row's inputs times ``scale``, a text counting as
its length; a text output holds that number written out) is there to be replaced; it shows the patterns every
step needs (requests stacked into one run and split back, a bad request failing alone with an error naming the
step).
Every file it writes passes ``make lint`` as written.

A step that is a model file: ``food11-new-step NAME --onnx FILE`` reads the graph's inputs and outputs and
writes the config from them (batched, max_batch_size 32 or --max-batch-size, where every tensor's first dim is
dynamic; else max_batch_size 0), copies FILE to NAME/1/model.onnx (git-ignored; NAME/model_source.json records
FILE, from which `make models` copies it again), with its manifest (so every answer's MODELS names it), a
1/model.py on the shared adapter pipeline_src.steps.onnx_file_step (ONNX Runtime inside the Python backend: the
local server has no onnxruntime backend), NAME/configs/onnxruntime.pbtxt for NVIDIA's image, and a unit test
holding the graph to the config. --input, --output, --source-dir and --package do not apply.

Where the logic module goes:
  default           ``pipeline_src/steps/NAME.py``, module ``pipeline_src.steps.NAME``
  --source-dir/--package   another importable package of yours
  --self-contained  ``<repository>/NAME/NAME_step.py``, top-level module ``NAME_step``: the step lives entirely
                    in the repository. The Python backend's stub appends the model's folder (and its version
                    folder) to ``sys.path`` before importing ``1/model.py`` (python_backend r24.10,
                    src/pb_stub.cc), so the server imports it; it ignores PYTHONPATH, so nothing else would.
"""


def _dims(text: str) -> tuple[int, ...]:
    try:
        return parse_dims(text)
    except ScaffoldError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="food11-new-step", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("name", help="the step's name: a Python identifier, new to the repository (e.g. top_labels)")
    parser.add_argument(
        "--repository", type=Path, default=DEFAULT_REPOSITORY, help="the model repository (default: %(default)s)"
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
        help="an input tensor, e.g. PIXELS:UINT8:3,384,384; repeat it for several (default: INPUT); "
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
        type=wire_type,
        choices=list(DATA_TYPES),
        help="element type of a tensor that does not say its own; BYTES: text, the config's TYPE_STRING "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--dims",
        type=_dims,
        default=(4,),
        help="one row's shape, without the batch dimension, of a tensor that does not say its own, "
        "e.g. 4 or 3,-1 (default: 4)",
    )
    parser.add_argument(
        "--onnx",
        type=Path,
        metavar="FILE",
        help="the step is this ONNX model file: its tensors, config and adapter are read from the graph",
    )
    parser.add_argument(
        "--max-batch-size",
        type=int,
        help=f"(default: {StepSpec.max_batch_size}; with --onnx, 0 for a graph whose tensors do not all batch)",
    )
    parser.add_argument(
        "--instances",
        type=int,
        default=StepSpec.instances,
        help="CPU instances, each its own process (default: %(default)s)",
    )
    parser.add_argument(
        "--no-docs",
        action="store_true",
        help="leave docs/configuration.md alone (by default a repository with docs/configuration.md beside it, "
        "as this project's, gets its settings' rows there)",
    )
    args = parser.parse_args(argv)
    if (args.source_dir is None) != (args.package is None):
        parser.error("--source-dir and --package go together")
    if args.onnx and (args.inputs or args.outputs or args.source_dir):
        parser.error(
            "--onnx reads the tensors from the file and needs no logic module: leave out "
            "--input, --output, --source-dir and --package"
        )
    return args


def spec_from_args(args: argparse.Namespace) -> StepSpec:
    def tensors(texts: list[str] | None, default: str) -> tuple[Tensor, ...]:
        return tuple(Tensor.parse(text, args.data_type, args.dims) for text in (texts or [default]))

    batch = StepSpec.max_batch_size if args.max_batch_size is None else args.max_batch_size
    return StepSpec(args.name, tensors(args.inputs, "INPUT"), tensors(args.outputs, "OUTPUT"), batch, args.instances)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    doc = None if args.no_docs else args.repository.resolve().parent / CONFIGURATION_DOC
    in_package = not (args.onnx or args.self_contained)  # else no logic module, or one in the model's folder
    source_dir = (args.source_dir or PROJECT_ROOT / "pipeline_src" / "steps") if in_package else None
    layout = Layout(args.repository, args.tests_dir, source_dir, args.package or DEFAULT_PACKAGE, configuration_doc=doc)
    try:
        if args.onnx:  # the step is the file (pipeline_src.repository.scaffold.onnx_file)
            onnx_spec = read_spec(args.name, args.onnx, args.max_batch_size, args.instances)
            print(onnx_next_steps(onnx_spec, layout, create_onnx_step(onnx_spec, layout)))
        else:
            spec = spec_from_args(args)
            print(next_steps(spec, layout, create_step(spec, layout)))
    except ScaffoldError as exc:
        print(f"food11-new-step: {exc}", file=sys.stderr)
        sys.exit(2)
