"""What to do once a step is created (``next_steps``, which ``food11-new-step`` prints), with a hint for wiring
it into an ensemble: the tensors of the repository's ensembles each of its inputs can take (``ensemble_tensors``)."""

from __future__ import annotations

from pathlib import Path

from tritonclient.grpc import model_config_pb2

from pipeline_src.repository.loading import load_models
from pipeline_src.repository.report import Report
from pipeline_src.repository.scaffold.onnx_file import OnnxFileSpec
from pipeline_src.repository.scaffold.spec import Layout, StepSpec, dims_text


def _tensor_type(tensor) -> str:
    return f"{model_config_pb2.DataType.Name(tensor.data_type)} {dims_text(list(tensor.dims))}"


def ensemble_tensors(repository: Path) -> list[tuple[str, str, str, str]]:
    """What a new step's input can be wired to in each ensemble of ``repository``: (ensemble, tensor, where it
    comes from, its type and dims as ``TYPE_FP32 [3, 384, 384]``). Never an ensemble output: Triton leaves out a
    step from a call that names none of the ensemble outputs it maps, even when another step reads one
    (pipeline_src/ensemble_pruning.py). An output of a step that its ensemble does not map yet is offered
    with the output_map line that maps it."""
    models = load_models(repository, Report(repository))  # what does not load, food11-validate reports
    configs = {name: entry.config for name, entry in models.items() if entry.config is not None}
    found = []
    for ensemble, config in configs.items():
        if config.platform != "ensemble":
            continue
        ensemble_outputs = {tensor.name for tensor in config.output}
        for tensor in config.input:
            found.append((ensemble, tensor.name, "the ensemble's input", _tensor_type(tensor)))
        for step in config.ensemble_scheduling.step:
            producer = configs.get(step.model_name)
            for output in producer.output if producer else ():
                mapped = step.output_map.get(output.name)
                if mapped is None:
                    value = output.name.lower()
                    mapping = f'output_map {{ key: "{output.name}", value: "{value}" }}'
                    where = f"{step.model_name}'s {output.name}, once its step maps it: {mapping}"
                elif mapped in ensemble_outputs:
                    continue
                else:
                    value, where = mapped, f"{step.model_name}'s {output.name}"
                found.append((ensemble, value, where, _tensor_type(output)))
    return found


def _wiring_hint(spec: StepSpec, layout: Layout) -> list[str]:
    available = ensemble_tensors(layout.repository)
    lines = [f'     model_name: "{spec.name}"', "     model_version: -1"]
    for tensor in spec.inputs:
        wanted = f"{tensor.config_type} {dims_text(tensor.dims)}"
        matches = [f"{value} ({ensemble}: {source})" for ensemble, value, source, kind in available if kind == wanted]
        lines.append(f'     input_map {{ key: "{tensor.name}", value: "<an ensemble tensor of {wanted}>" }}')
        if matches:
            lines.append(f"       # {wanted} in this repository: {'; '.join(matches)}")
    lines += [f'     output_map {{ key: "{tensor.name}", value: "{tensor.name}" }}' for tensor in spec.outputs]
    lines.append("     (never an ensemble output as an input: docs/EXTENDING.md, 'A step after another')")
    return lines


def shown(path: Path) -> str:
    """A path as the printed text names it: relative to the working directory where it lies under it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def next_steps(spec: StepSpec, layout: Layout, created: list[Path]) -> str:
    """What ``food11-new-step`` prints: the files, then what to do with them."""
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


def onnx_next_steps(spec: OnnxFileSpec, layout: Layout, created: list[Path]) -> str:
    """What ``food11-new-step NAME --onnx FILE`` prints: the files, then what to do with them."""
    model_dir = layout.model_dir(spec.name)
    inputs = ", ".join(tensor.describe() for tensor in spec.inputs)
    outputs = ", ".join(tensor.describe() for tensor in spec.outputs)
    lines = [
        f"Created the step '{spec.name}' from {shown(spec.source)} ({inputs} -> {outputs}, "
        f"max_batch_size {spec.max_batch_size}):",
        *(f"  {shown(path)}" for path in created),
        "Next:",
        f"  1. Test it:            .venv/bin/python -m pytest {shown(layout.test_file(spec.name))} -q",
        f"  2. The model file:     {shown(model_dir / '1' / 'model.onnx')} is a copy, git-ignored (this project's",
        "     .gitignore: model_repository/*/1/model.onnx). model_source.json records where it came from: on a",
        "     fresh clone, or once you change the file there, `make models` copies it again and rewrites",
        "     1/manifest.json (kind 'user'), through which every answer's MODELS names it. Commit config.pbtxt,",
        "     configs/, 1/model.py and model_source.json; keep the file where the record says (inside the project,",
        "     the path is relative to its root).",
        "  3. Wire it into an ensemble (docs/EXTENDING.md, 'A step that is a model file'): in its",
        "     ensemble_scheduling, a step",
        *_wiring_hint(spec, layout),
        f"  4. Validate:           .venv/bin/food11-validate {shown(layout.repository)}",
        "  5. Serve:              make serve runs it through 1/model.py (ONNX Runtime in the Python backend);",
        "     NVIDIA's image runs configs/onnxruntime.pbtxt natively (tritonserver --model-config-name=onnxruntime).",
        "     Its settings (onnx_file, intra_op_threads, gpu_batch_sizes, refuse_non_finite) are config.pbtxt's",
        "     parameters.",
    ]
    return "\n".join(lines)
