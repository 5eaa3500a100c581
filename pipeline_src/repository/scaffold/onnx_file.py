"""A step that is a model file: ``food11-new-step NAME --onnx FILE``. The graph's inputs and outputs (read with
the ``onnx`` package, initializers excluded) become the step's config; the file is copied into the version folder,
served by the shared adapter ``pipeline_src.steps.onnx_file_step`` on the local server and natively in NVIDIA's
image (``configs/onnxruntime.pbtxt``); its manifest names it in every answer, and ``model_source.json`` lets
``make models`` copy it again on a fresh clone (the copy is git-ignored)."""

from __future__ import annotations

import hashlib
import re
import textwrap
from dataclasses import asdict, dataclass
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from pipeline_src.provenance.manifest import MANIFEST_FILE, Manifest
from pipeline_src.provenance.model_source import SOURCE_RECORD, USER_KIND, ModelSource, recorded_source
from pipeline_src.repository.onnx_io import ONNX_TO_TRITON
from pipeline_src.repository.scaffold.files import plan_configuration_rows, write_new_files
from pipeline_src.repository.scaffold.render import LINE_LENGTH, _config_tensors, _imports, _relative, render
from pipeline_src.repository.scaffold.spec import NUMERIC_TYPES, Layout, ScaffoldError, StepSpec, Tensor
from pipeline_src.steps.settings import OnnxFileSettings

MODEL_FILE = "model.onnx"  # the copy's name in the version folder, the settings' default onnx_file
NATIVE_CONFIG = Path("configs") / "onnxruntime.pbtxt"  # what tritonserver --model-config-name=onnxruntime reads
SERVABLE_TYPES = (*NUMERIC_TYPES, "BOOL")  # what Triton hands the Python adapter as numpy and ONNX Runtime takes
# What each setting does: the config's comment and the docs row's last cell.
SETTING_NOTES = {
    "onnx_file": "relative to the version folder: the copy of your file (model_source.json says from where)",
    "intra_op_threads": "ONNX Runtime threads (0: its default, one per physical core)",
    "gpu_batch_sizes": "on a GPU instance, e.g. 1,8,32: each batch zero-padded to the smallest that holds it, on "
    "a session of its own (no session sees a new shape); empty: batches as they come",
    "refuse_non_finite": "a request with NaN or infinity in a float input fails alone, naming the row",
}


@dataclass(frozen=True)
class OnnxFileSpec(StepSpec):
    """The step as the graph declares it; ``max_batch_size`` 0 where not every tensor batches."""

    source: Path = Path()
    graph: bytes = b""  # the file's bytes, copied as they are

    def check(self) -> None:
        if not self.name.isidentifier():
            raise ScaffoldError(f"step name {self.name!r} is not a valid Python identifier (e.g. colourfulness)")
        if self.max_batch_size < 0 or self.instances < 1:
            raise ScaffoldError("max_batch_size must be >= 0 and instances >= 1")


def _graph_tensor(value, onnx) -> tuple[str, str, list[int]]:
    """(name, data type as the scaffold spells it, every dim with -1 for a dynamic one) of a graph input or output."""
    if not re.fullmatch(r'[^"\\\s]+', value.name):
        raise ScaffoldError(f"tensor name {value.name!r}: a config cannot name it (quotes, backslashes or spaces)")
    if value.type.WhichOneof("value") != "tensor_type":
        raise ScaffoldError(f"{value.name} is not a tensor (a sequence or map): the adapter feeds tensors only")
    tensor_type = value.type.tensor_type
    onnx_type = onnx.TensorProto.DataType.Name(tensor_type.elem_type)
    data_type = ONNX_TO_TRITON.get(onnx_type, "").removeprefix("TYPE_")
    if data_type not in SERVABLE_TYPES:
        raise ScaffoldError(f"{value.name} is {onnx_type}: the adapter serves {', '.join(SERVABLE_TYPES)} tensors")
    if not tensor_type.HasField("shape") or not tensor_type.shape.dim:
        raise ScaffoldError(f"{value.name} has no known rank: export the graph with its tensors' shapes")
    dims = [dim.dim_value if dim.HasField("dim_value") and dim.dim_value > 0 else -1 for dim in tensor_type.shape.dim]
    return value.name, data_type, dims


def read_spec(name: str, source: Path, max_batch_size: int | None = None, instances: int = 1) -> OnnxFileSpec:
    """The step ``source`` makes: batched (``max_batch_size``, default 32 as the ensembles) where every tensor's
    first dim is dynamic and it has another, the config's dims then without it; else max_batch_size 0."""
    import onnx  # the build extra, as food11-validate's ONNX check

    try:
        graph = source.read_bytes()
        model = onnx.load_from_string(graph)
    except Exception as exc:  # OSError, DecodeError, ...: the reason, not a traceback
        raise ScaffoldError(f"{source} is not a readable ONNX file: {exc}") from None
    if any(tensor.data_location == onnx.TensorProto.EXTERNAL for tensor in model.graph.initializer):
        raise ScaffoldError(f"{source} keeps weights in external files: save it whole (save_as_external_data=False)")
    initializers = {tensor.name for tensor in model.graph.initializer}
    inputs = [_graph_tensor(value, onnx) for value in model.graph.input if value.name not in initializers]
    outputs = [_graph_tensor(value, onnx) for value in model.graph.output]
    if not inputs or not outputs:
        raise ScaffoldError(f"{source}: a step needs at least one graph input and one output")
    batchable = all(len(dims) > 1 and dims[0] == -1 for _, _, dims in (*inputs, *outputs))
    if max_batch_size and not batchable:
        raise ScaffoldError(
            f"{source}: --max-batch-size {max_batch_size}, but not every tensor has a dynamic first dim and another "
            "(leave the option out: the step then takes each request as one run, max_batch_size 0)"
        )
    batch = (32 if max_batch_size is None else max_batch_size) if batchable else 0

    def tensors(found: list[tuple[str, str, list[int]]]) -> tuple[Tensor, ...]:
        return tuple(Tensor(name, data_type, tuple(dims[1:] if batch else dims)) for name, data_type, dims in found)

    return OnnxFileSpec(name, tensors(inputs), tensors(outputs), batch, instances, source=source, graph=graph)


def _settings() -> list[tuple[str, str, str]]:
    """Each setting of OnnxFileSettings: its name, its default as configs and the docs table write it (a bool in
    lower case), what it does."""
    return [
        (name, str(value).lower() if isinstance(value, bool) else str(value), SETTING_NOTES[name])
        for name, value in asdict(OnnxFileSettings()).items()
    ]


def _settings_parameters() -> str:
    """Every setting at its default, as the settings-drift check wants a config to show them (what it does as the
    block's comment lines)."""
    blocks = []
    for name, default, note in _settings():
        comment = "\n".join(f"  # {line}" for line in textwrap.wrap(note, LINE_LENGTH - 4))
        blocks.append(f'parameters {{\n{comment}\n  key: "{name}"\n  value: {{ string_value: "{default}" }}\n}}')
    return "\n".join(blocks)


def _test_header(spec: OnnxFileSpec, layout: Layout) -> str:
    imports = _imports(
        [
            "from pathlib import Path",
            "import numpy as np",
            "import onnxruntime as ort",
            "from google.protobuf.json_format import MessageToDict",
            "from tritonclient.grpc import model_config_pb2",
            "from tritonclient.utils import triton_to_np_dtype",
            "from pipeline_src.repository.loading import parse_config",
            "from pipeline_src.steps.onnx_contract import graph_mismatches",
            "from pipeline_src.steps.settings import OnnxFileSettings",
        ]
    )
    model_dir = _relative(layout.model_dir(spec.name), layout.tests_dir)
    return f'{imports}\n\nMODEL_DIR = Path(__file__).resolve().parent / "{model_dir}"'


def plan_onnx_files(spec: OnnxFileSpec, layout: Layout) -> dict[Path, str | bytes]:
    """Every file of the step and its content (docs/configuration.md too, when the layout names it); writes
    nothing."""
    spec.check()
    model_dir = layout.model_dir(spec.name)
    recorded = recorded_source(spec.source, layout.repository)
    values = dict(
        name=spec.name,
        source=recorded,
        max_batch_size=spec.max_batch_size,
        instances=spec.instances,
        config_inputs=_config_tensors(spec.inputs),
        config_outputs=_config_tensors(spec.outputs),
        # Triton's dynamic batcher needs a batch dimension: a step without takes each request as it comes.
        batching="dynamic_batching { max_queue_delay_microseconds: 500 }" if spec.max_batch_size else "",
        settings=OnnxFileSettings.reference(),
        settings_parameters=_settings_parameters(),
        test_header=_test_header(spec, layout),
    )
    manifest = Manifest(spec.name, USER_KIND, recorded, {MODEL_FILE: hashlib.sha256(spec.graph).hexdigest()})
    files: dict[Path, str | bytes] = {
        model_dir / "config.pbtxt": render("onnx_config.pbtxt.tmpl", values),
        model_dir / NATIVE_CONFIG: render("onnx_native.pbtxt.tmpl", values),
        model_dir / "1" / "model.py": render("onnx_model.py.tmpl", values),
        model_dir / "1" / MODEL_FILE: spec.graph,
        model_dir / "1" / MANIFEST_FILE: manifest.to_json(),
        model_dir / SOURCE_RECORD: ModelSource(MODEL_FILE, recorded).to_json(),
        layout.test_file(spec.name): render("onnx_test_step.py.tmpl", values),
    }
    for config in (model_dir / "config.pbtxt", model_dir / NATIVE_CONFIG):
        text_format.Parse(str(files[config]), model_config_pb2.ModelConfig())  # raises on a name Triton refuses
    rows = [f"| {spec.name} | `{name}` | {default} | {note} |" for name, default, note in _settings()]
    plan_configuration_rows(files, layout, rows)
    return files


def create_onnx_step(spec: OnnxFileSpec, layout: Layout) -> list[Path]:
    """Write the step's files; refuses (ScaffoldError, nothing written) a name or test that exists."""
    return write_new_files(spec.name, plan_onnx_files(spec, layout), layout)
