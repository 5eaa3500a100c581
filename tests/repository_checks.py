"""The suite's checks that read the model repository and the docs, as functions of a repository folder (and a
docs folder), each returning the problems it finds: empty when there are none.

No step set is written down here. The steps are read from the repository: the model folders and their
``config.pbtxt``, each ensemble's ``ensemble_scheduling`` steps, the settings classes the configs name (their
BLS calls). Where a check holds the docs to the project's own steps, those are the steps the docs name (the
DAG drawing of docs/architecture.md), so a step of yours, which no page names, is checked where it is wired and
left out of the pages. Each check still fails for a real problem: its docstring says which.

The tests in tests/unit and tests/integration run these on this tree; tests/unit/
test_added_steps_pass_the_suite_checks.py runs them on a copy with steps added by ``food11-new-step`` and wired
as docs/EXTENDING.md says, which pass with no other edit. Imported as ``repository_checks`` (pytest's
``pythonpath`` puts tests/ on sys.path)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import fields
from pathlib import Path

from google.protobuf.json_format import MessageToDict
from tritonclient.grpc import model_config_pb2

from food11_api.ensemble_graph import EnsembleCall, EnsembleGraph, bls_callees, output_names, steps_of
from food11_api.routes.captioning import ensemble_calls
from food11_api.settings import ApiSettings
from food11_api.step_health import Readiness
from pipeline_src.contract import CLASSIFY_ENSEMBLE, CLASSIFY_OUTPUTS, CORE_OUTPUTS, ENSEMBLE
from pipeline_src.ensemble_pruning import Step, pruned_steps, starved_calls
from pipeline_src.repository.loading import ModelEntry, parse_config
from pipeline_src.repository.step_settings import stub_import_path
from pipeline_src.steps.settings import SETTINGS_PARAMETER, StepSettings, declared_settings_class

ModelConfig = model_config_pb2.ModelConfig

# Reading the repository ---------------------------------------------------------------------------------------


def model_configs(repository: Path) -> dict[str, ModelConfig]:
    """Every model of the repository by name: its folder's ``config.pbtxt``."""
    return {path.parent.name: parse_config(path) for path in sorted(repository.glob("*/config.pbtxt"))}


def ensemble_names(repository: Path) -> list[str]:
    return [name for name, config in model_configs(repository).items() if config.platform == "ensemble"]


def contract_ensembles(repository: Path) -> list[str]:
    """The ensembles that answer the wire contract: every one declaring all of ``CORE_OUTPUTS``."""
    return [name for name in ensemble_names(repository) if set(CORE_OUTPUTS) <= set(ensemble_outputs(repository, name))]


def ensemble_steps(repository: Path, ensemble: str) -> list[Step]:
    """The ensemble's steps in its config's order, each with the ensemble tensors it reads and makes."""
    config = parse_config(repository / ensemble / "config.pbtxt")
    return [
        Step(step.model_name, frozenset(step.input_map.values()), tuple(step.output_map.values()))
        for step in config.ensemble_scheduling.step
    ]


def ensemble_inputs(repository: Path, ensemble: str) -> list[str]:
    return [tensor.name for tensor in parse_config(repository / ensemble / "config.pbtxt").input]


def ensemble_outputs(repository: Path, ensemble: str) -> list[str]:
    return [tensor.name for tensor in parse_config(repository / ensemble / "config.pbtxt").output]


def parameters(config: ModelConfig) -> dict[str, str]:
    return {key: value.string_value for key, value in config.parameters.items()}


def settings_class(config_path: Path) -> type[StepSettings] | None:
    """The settings class a step's config names, imported as the Python backend's stub imports it: with the
    model's folders on sys.path, so that a step whose logic lives in its model folder (``--self-contained``)
    imports too."""
    directory = config_path.parent
    versions = sorted(path for path in directory.iterdir() if path.is_dir() and path.name.isdigit())
    entry = ModelEntry(directory.name, directory, parse_config(config_path), versions)
    with stub_import_path(entry):
        return declared_settings_class(parameters(entry.parsed_config))


def declared_bls_callees(repository: Path, model: str) -> tuple[str, ...]:
    """The models ``model`` calls by BLS, as its settings class declares them (``BLS_CALLS``) with its config's
    values: read apart from the API's way (its ``*_model`` parameters), so that each holds the other."""
    config_path = repository / model / "config.pbtxt"
    cls = settings_class(config_path)
    if cls is None or not cls.BLS_CALLS:
        return ()
    settings = cls.from_parameters(parameters(parse_config(config_path)))
    return tuple(dict.fromkeys(call.callee(settings) for call in cls.BLS_CALLS))


def models_built_from(repository: Path, ensemble: str) -> tuple[str, ...]:
    """Every model a call of ``ensemble`` naming all its outputs needs: each step in the config's order, followed
    by the models it calls by BLS, then the ensemble (what /readyz needs ready for it)."""
    models = [
        model
        for step in ensemble_steps(repository, ensemble)
        for model in (step.model, *declared_bls_callees(repository, step.model))
    ]
    return tuple(dict.fromkeys([*models, ensemble]))


def models_run_for(repository: Path, ensemble: str, requested: Iterable[str]) -> list[str]:
    """The step models a call of ``ensemble`` naming ``requested`` runs: Triton leaves out the others
    (``pipeline_src.ensemble_pruning``)."""
    steps = ensemble_steps(repository, ensemble)
    pruned = pruned_steps(steps, ensemble_outputs(repository, ensemble), requested)
    return [step.model for index, step in enumerate(steps) if index not in pruned]


def makers_of(steps: Sequence[Step], wanted: Iterable[str]) -> set[str]:
    """The step models the ``wanted`` tensors need, by the tensors alone: their makers, and those of what they
    read."""
    maker = {tensor: step for step in steps for tensor in step.outputs}
    needed: set[str] = set()
    waiting = list(wanted)
    while waiting:
        step = maker.get(waiting.pop())
        if step is not None and step.model not in needed:
            needed.add(step.model)
            waiting.extend(step.inputs)
    return needed


# The config checks (tests/unit/test_model_configs.py) -------------------------------------------------------------


def tensors(tensor_list) -> dict[str, tuple[str, list[int]]]:
    """Each tensor's (data type, dims), the type by its config name (TYPE_FP32), so that a mismatch reads as such."""
    return {
        tensor.name: (model_config_pb2.DataType.Name(tensor.data_type), list(tensor.dims)) for tensor in tensor_list
    }


def ensemble_wiring_problems(repository: Path, ensemble: str) -> list[str]:
    """Every step is a model of the repository, maps outputs it has and feeds every input it requires from a
    tensor something makes, of the same type and dims; every ensemble output is made as declared; no tensor is
    made twice; no step batches less than the ensemble."""
    configs = model_configs(repository)
    config = configs[ensemble]
    steps = list(config.ensemble_scheduling.step)
    unknown = [f"unknown model {step.model_name}" for step in steps if step.model_name not in configs]
    if unknown:
        return unknown
    problems = []
    # Every ensemble tensor -> (dtype, dims): the inputs, then what each step makes, whatever the order of the
    # steps in the config (Triton schedules by the tensors).
    available = tensors(config.input)
    for step in steps:
        model_outputs = tensors(configs[step.model_name].output)
        for model_output, ensemble_tensor in step.output_map.items():
            if model_output not in model_outputs:
                problems.append(f"{step.model_name} has no output {model_output}")
            elif ensemble_tensor in available:
                problems.append(f"{ensemble_tensor} made twice")
            else:
                available[ensemble_tensor] = model_outputs[model_output]
    for step in steps:
        model = configs[step.model_name]
        if model.max_batch_size < config.max_batch_size:
            problems.append(f"{step.model_name} batches less than the ensemble")
        model_inputs = tensors(model.input)
        required = {tensor.name for tensor in model.input if not tensor.optional}
        if not required <= set(step.input_map) <= set(model_inputs):
            problems.append(f"{step.model_name}: inputs {sorted(step.input_map)}, needs {sorted(required)}")
        for model_input, ensemble_tensor in step.input_map.items():
            if ensemble_tensor not in available:
                problems.append(f"{step.model_name} reads {ensemble_tensor}, which no one makes")
            elif available[ensemble_tensor] != model_inputs.get(model_input):
                problems.append(
                    f"{step.model_name}.{model_input} is {model_inputs.get(model_input)}, fed {ensemble_tensor}"
                )
    problems += [
        f"ensemble output {name} not made as declared ({available.get(name)}, declared {spec})"
        for name, spec in tensors(config.output).items()
        if available.get(name) != spec
    ]
    return problems


def python_step_problems(repository: Path, name: str) -> list[str]:
    """A Python-backend model has its ``1/model.py`` and a ``settings`` parameter naming a class that takes its
    parameters (an unknown key or a bad value fails)."""
    config_path = repository / name / "config.pbtxt"
    problems = [] if (repository / name / "1" / "model.py").is_file() else [f"{name}: no 1/model.py"]
    declared = settings_class(config_path)
    if declared is None:
        return [*problems, f"{name}: no 'settings' parameter names its settings class"]
    try:
        declared.from_parameters(parameters(parse_config(config_path)))
    except Exception as exc:  # SettingsError, or whatever a user's validate() raises
        problems.append(f"{name}: its parameters do not pass {declared.__name__}: {exc}")
    return problems


# Triton's pruning (tests/unit/test_pruning.py) --------------------------------------------------------------------


def starved_call_problems(repository: Path, ensemble: str) -> list[str]:
    """No call of ``ensemble`` naming some of its outputs is one Triton cannot answer (a step reading an ensemble
    output that a call leaves unnamed: docs/EXTENDING.md, "A step after another")."""
    steps = ensemble_steps(repository, ensemble)
    starved = starved_calls(steps, ensemble_inputs(repository, ensemble), ensemble_outputs(repository, ensemble))
    return [
        f"{ensemble}: a call naming {list(call.requested)} drops {steps[call.dropped].model}, which makes {call.tensor}"
        for call in starved
    ]


def classify_call_problems(repository: Path) -> list[str]:
    """A call of the pipeline naming only the label's outputs (``CLASSIFY_OUTPUTS``) runs exactly the steps of
    the classify ensemble, so neither the vision encoder nor the captioning; a caption call needs those too (the
    caption is prompted by the label); a call naming every output runs every step."""
    classify = [step.model for step in ensemble_steps(repository, CLASSIFY_ENSEMBLE)]
    every_step = [step.model for step in ensemble_steps(repository, ENSEMBLE)]
    problems = []
    if (ran := models_run_for(repository, ENSEMBLE, CLASSIFY_OUTPUTS)) != classify:
        problems.append(f"a call of {ENSEMBLE} naming {list(CLASSIFY_OUTPUTS)} runs {ran}, not {classify}")
    if not set(classify) < set(captioned := models_run_for(repository, ENSEMBLE, ["CAPTION"])):
        problems.append(f"a call of {ENSEMBLE} naming CAPTION runs {captioned}, not more than {classify}")
    if (ran := models_run_for(repository, ENSEMBLE, ensemble_outputs(repository, ENSEMBLE))) != every_step:
        problems.append(f"a call of {ENSEMBLE} naming every output runs {ran}, not every step {every_step}")
    return problems


# What the API needs ready (tests/unit/test_step_health.py) -----------------------------------------------------


def config_json(repository: Path, model: str) -> dict:
    """A config as Triton's get_model_config(as_json=True) answers it (MessageToJson, proto field names)."""
    return MessageToDict(parse_config(repository / model / "config.pbtxt"), preserving_proto_field_name=True)


def api_graph(repository: Path, ensemble: str) -> EnsembleGraph:
    """What the API's monitor reads from Triton for ``ensemble``, read from the files."""
    config = config_json(repository, ensemble)
    steps = steps_of(config)
    callees = {step.model: bls_callees(config_json(repository, step.model)) for step in steps}
    return EnsembleGraph(ensemble, output_names(config), steps, callees)


def api_graph_problems(repository: Path, ensemble: str) -> list[str]:
    """The API reads ``ensemble`` from Triton's JSON as the files say: its steps in order, its outputs, each
    step's BLS callees as its settings class declares them, and so every model it is built from."""
    graph = api_graph(repository, ensemble)
    problems = []
    if (read := [step.model for step in graph.steps]) != [step.model for step in ensemble_steps(repository, ensemble)]:
        problems.append(f"the API reads the steps of {ensemble} as {read}")
    if graph.outputs != tuple(ensemble_outputs(repository, ensemble)):
        problems.append(f"the API reads the outputs of {ensemble} as {graph.outputs}")
    declared = {step.model: declared_bls_callees(repository, step.model) for step in graph.steps}
    read_callees = {step: callees for step, callees in graph.callees.items() if callees}
    if read_callees != {step: callees for step, callees in declared.items() if callees}:
        problems.append(f"the API reads the BLS callees of {ensemble} as {read_callees}, the settings say {declared}")
    if graph.models != models_built_from(repository, ensemble):
        problems.append(
            f"the API needs {graph.models} for {ensemble}, the files say {models_built_from(repository, ensemble)}"
        )
    return problems


def route_needs_problems(repository: Path, ensemble: str) -> list[str]:
    """With ``ensemble`` as the API's caption ensemble: /caption and /predict need every model it is built
    from, /classify (its own ensemble) the classify ensemble's, a caption-ensemble call naming only the label's
    outputs only the classify steps, and /readyz all of them."""
    graphs = (api_graph(repository, ensemble), api_graph(repository, CLASSIFY_ENSEMBLE))
    readiness, calls = Readiness(0.0, graphs), ensemble_calls(ApiSettings(model_name=ensemble))
    everything, classify = models_built_from(repository, ensemble), models_built_from(repository, CLASSIFY_ENSEMBLE)
    expected = {
        "/caption": everything,
        "/predict": everything,
        "/classify": classify,
        f"{ensemble} naming {list(CLASSIFY_OUTPUTS)}": (*classify[:-1], ensemble),
        "/readyz": tuple(dict.fromkeys([*everything, *classify])),
    }
    needed = {
        **{path: readiness.needed(calls[path]) for path in ("/caption", "/predict", "/classify")},
        f"{ensemble} naming {list(CLASSIFY_OUTPUTS)}": readiness.needed(EnsembleCall(ensemble, CLASSIFY_OUTPUTS)),
        "/readyz": readiness.needed(),
    }
    return [f"{what} needs {needed[what]}, not {models}" for what, models in expected.items() if needed[what] != models]


def rate_limiter_problems(repository: Path) -> list[str]:
    """The vision encoder holds one global ``cpu_cores`` (it runs one at a time under --rate-limit), and every
    other model the pipeline is built from holds none: caption_with_label waits on the captioner, so a resource
    held there would deadlock; the captioner's work runs in its loop's thread, which the limiter does not see."""

    def resources(model: str) -> list[tuple[str, bool, int]]:
        config = parse_config(repository / model / "config.pbtxt")
        return [
            (resource.name, getattr(resource, "global"), resource.count)
            for group in config.instance_group
            for resource in group.rate_limiter.resources
        ]

    problems = (
        [] if resources("vision_encoder") == [("cpu_cores", True, 1)] else ["vision_encoder: not one global core"]
    )
    others = [model for model in models_built_from(repository, ENSEMBLE)[:-1] if model != "vision_encoder"]
    return problems + [f"{model} holds {resources(model)}" for model in others if resources(model)]


# Native-backend variants (tests/integration/test_deployment.py) --------------------------------------------------

NATIVE_VARIANT = "onnxruntime"  # what Dockerfile.triton and compose select (TRITON_CONFIG)
TENSORRT_VARIANT = "onnxruntime_tensorrt"


def variant_configs(repository: Path) -> list[Path]:
    """Every config a ``--model-config-name`` selects: ``<model>/configs/<name>.pbtxt``."""
    return sorted(repository.glob("*/configs/*.pbtxt"))


def models_with_variants(repository: Path) -> list[str]:
    return sorted({path.parent.parent.name for path in variant_configs(repository)})


def interface(config: ModelConfig) -> tuple:
    tensor_list = lambda items: [(t.name, t.data_type, list(t.dims)) for t in items]  # noqa: E731
    return config.name, config.max_batch_size, tensor_list(config.input), tensor_list(config.output)


def runs_on_onnxruntime(config: ModelConfig) -> bool:
    """Triton's native ONNX Runtime backend, named either way Triton takes: ``backend: "onnxruntime"`` or
    ``platform: "onnxruntime_onnx"``."""
    return config.backend == "onnxruntime" or config.platform == "onnxruntime_onnx"


def model_variants_problems(repository: Path, model: str) -> list[str]:
    """A model with variants has the native one (what the container selects); a TensorRT one runs TensorRT in
    FP16. Without the native one, the container would run its Python-backend config unnoticed."""
    configs = repository / model / "configs"
    problems = (
        [] if (configs / f"{NATIVE_VARIANT}.pbtxt").is_file() else [f"{model}: no configs/{NATIVE_VARIANT}.pbtxt"]
    )
    if (configs / f"{TENSORRT_VARIANT}.pbtxt").is_file():
        accelerators = parse_config(configs / f"{TENSORRT_VARIANT}.pbtxt").optimization.execution_accelerators
        found = [(a.name, a.parameters.get("precision_mode")) for a in accelerators.gpu_execution_accelerator]
        if found != [("tensorrt", "FP16")]:
            problems.append(f"{model}: {TENSORRT_VARIANT} runs {found}, not TensorRT in FP16")
    return problems


def variant_problems(variant: Path) -> list[str]:
    """A variant runs on ONNX Runtime natively, on GPU instances, with the interface of the Python-backend config
    beside it (same name, batching and tensors, so the ensembles do not change)."""
    native, python = parse_config(variant), parse_config(variant.parent.parent / "config.pbtxt")
    where = f"{variant.parent.parent.name}/configs/{variant.name}"
    problems = [] if runs_on_onnxruntime(native) else [f"{where}: not on the onnxruntime backend"]
    if python.backend != "python":
        problems.append(f"{where}: its config.pbtxt is not the Python backend's")
    if interface(native) != interface(python):
        problems.append(f"{where}: {interface(native)} differs from config.pbtxt's {interface(python)}")
    if [group.kind for group in native.instance_group] != [model_config_pb2.ModelInstanceGroup.KIND_GPU]:
        problems.append(f"{where}: not one GPU instance group")
    return problems


def documented_variant_problems(repository: Path, docs: Path) -> list[str]:
    """Every model the docs name with variants (``classifier/configs/``, ``vision_encoder/configs/``: the ONNX
    steps the container runs natively) has them, the native one among them: the shipped ONNX steps, read from
    the docs, so that one losing its variants fails while a step of yours needs none."""
    named = sorted(
        {match for page in sorted(docs.glob("*.md")) for match in re.findall(r"(\w+)/configs/", page.read_text())}
    )
    return [
        f"the docs name {model}/configs/, but {model} has no configs/{NATIVE_VARIANT}.pbtxt"
        for model in named
        if not (repository / model / "configs" / f"{NATIVE_VARIANT}.pbtxt").is_file()
    ]


def native_variant_problems(repository: Path) -> list[str]:
    return [
        *(
            problem
            for model in models_with_variants(repository)
            for problem in model_variants_problems(repository, model)
        ),
        *(problem for variant in variant_configs(repository) for problem in variant_problems(variant)),
    ]


# Settings: configs and docs/configuration.md (tests/unit/test_settings_drift.py) -------------------------------


def step_configs(repository: Path) -> list[Path]:
    """The configs that name a settings class."""
    return sorted(
        path for path in repository.glob("*/config.pbtxt") if SETTINGS_PARAMETER in parse_config(path).parameters
    )


def shown(value) -> str:
    """A default as the configuration table writes it."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def configuration_table(text: str) -> dict[tuple[str, str], str]:
    """(step, parameter) -> default, from the "Configuration" table of docs/configuration.md (a row may list
    several parameters, comma-separated in both columns)."""
    section = text.split("\n## Configuration\n", 1)[1].split("\n## ", 1)[0]
    table = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not line.startswith("| ") or cells[0] in ("step", "---"):
            continue
        step, names, defaults = cells[0], re.findall(r"`([^`]+)`", cells[1]), cells[2]
        values = (
            [defaults.strip("`")] if len(names) == 1 else [value.strip().strip("`") for value in defaults.split(", ")]
        )
        assert len(values) == len(names), line
        for name, value in zip(names, values):
            assert (step, name) not in table, f"docs/configuration.md lists {step}'s {name} twice"
            table[step, name] = value
    return table


def settings_drift(config: Path, documented: Mapping[tuple[str, str], str]) -> list[str]:
    """How ``config`` differs from its settings class: a value other than the class's default (a config shows
    its step's settings at the values the code defaults to), or a setting it leaves out that the table
    (``documented``, by step folder and setting) does not show at its default either. So a step's config may
    leave a setting to its documented default (an ONNX step's ``intra_op_threads``), never to an undocumented one."""
    cls = settings_class(config)
    assert cls is not None, f"{config} names no settings class"
    values = parameters(parse_config(config))
    values.pop(SETTINGS_PARAMETER)
    defaults, step = cls(), config.parent.name
    problems = [
        f"{config}: no parameter {name!r} (default {getattr(defaults, name)!r}), and no row of the table shows it"
        for name in (field.name for field in fields(cls))
        if name not in values and documented.get((step, name)) != shown(getattr(defaults, name))
    ]
    for name, text in values.items():
        value = getattr(cls.from_parameters({name: text}), name)
        if value != getattr(defaults, name):
            problems.append(f"{config}: {name}={text!r}, but {cls.__name__} defaults to {getattr(defaults, name)!r}")
    return problems


def table_drift(table: Mapping[tuple[str, str], str], configs: Iterable[Path]) -> list[str]:
    """How the configuration table differs from the settings classes of the steps ``configs`` configure, each
    difference with what to do about it."""
    expected, classes = {}, {}
    for config in configs:
        cls = settings_class(config)
        assert cls is not None, f"{config} names no settings class"
        classes[config.parent.name] = cls.__name__
        expected.update({(config.parent.name, field.name): shown(getattr(cls(), field.name)) for field in fields(cls)})
    problems = [
        f"no row for {step}'s `{name}` ({classes[step]} defaults to {default}): add "
        f"| {step} | `{name}` | {default} | what it does |"
        for (step, name), default in expected.items()
        if (step, name) not in table
    ]
    problems += [
        f"the row of {step}'s `{name}` says {table[step, name]}, but {classes[step]} defaults to {default}: fix it"
        for (step, name), default in expected.items()
        if (step, name) in table and table[step, name] != default
    ]
    problems += [
        f"a row for {step}'s `{name}`, which "
        + (f"{classes[step]} does not have" if step in classes else "is no step's setting in the repository")
        + ": remove it"
        for step, name in table
        if (step, name) not in expected
    ]
    return problems


def settings_problems(repository: Path, docs: Path) -> list[str]:
    """Every step's config and the table of ``docs``/configuration.md say what the step's settings class says."""
    table = configuration_table((docs / "configuration.md").read_text())
    configs = step_configs(repository)
    return [*(problem for config in configs for problem in settings_drift(config, table)), *table_drift(table, configs)]


# The DAG drawing of docs/architecture.md (tests/unit/test_docs_match_the_repository.py) --------------------------

DRAWN_STEP = re.compile(r"\b([a-z][a-z0-9_]*)\s{2,}Python")  # "classifier          Python+ONNX Rt"


def dag_drawing(docs: Path) -> str:
    """The DAG's drawing: the fenced block under '## The DAG' of docs/architecture.md."""
    text = (docs / "architecture.md").read_text()
    section = text[text.index("## The DAG") :]
    start = section.index("```\n") + 4
    return section[start : section.index("\n```", start)]


def drawn_steps(drawing: str) -> list[str]:
    """The steps the drawing draws, each as its name followed by its backend ("classifier   Python+ONNX Rt"):
    the project's own steps, as far as the docs are concerned."""
    return list(dict.fromkeys(DRAWN_STEP.findall(drawing)))


def drawn_ensembles(repository: Path, drawing: str) -> list[str]:
    """The repository's ensembles the drawing names."""
    return [name for name in ensemble_names(repository) if re.search(rf"\b{re.escape(name)}\b", drawing)]


def answers_listed(drawing: str, ensemble: str) -> list[str] | None:
    """The outputs the drawing's '<ensemble> answers:' line lists (with its continuation lines); None: no line."""
    lines = drawing.splitlines()
    start = next((i for i, line in enumerate(lines) if f"{ensemble} answers:" in line), None)
    if start is None:
        return None
    listed = lines[start].split("answers:")[1]
    for line in lines[start + 1 :]:
        if not re.fullmatch(r"\s+[A-Z_, ]+", line):
            break
        listed += line
    return re.findall(r"[A-Z_]+", listed)


def drawing_names_problems(repository: Path, docs: Path) -> list[str]:
    """Every step the drawing draws is a model of the repository (a step renamed or removed fails), and it draws
    the contract's two ensembles (``ENSEMBLE``, ``CLASSIFY_ENSEMBLE``)."""
    drawing = dag_drawing(docs)
    problems = [
        f"the drawing draws a step {name}, which is no model of the repository"
        for name in drawn_steps(drawing)
        if not (repository / name / "config.pbtxt").is_file()
    ]
    ensembles = drawn_ensembles(repository, drawing)
    return problems + [
        f"the drawing does not name {name}" for name in (ENSEMBLE, CLASSIFY_ENSEMBLE) if name not in ensembles
    ]


def drawing_tensor_problems(repository: Path, docs: Path, ensemble: str) -> list[str]:
    """Each drawn step of ``ensemble`` is drawn with every tensor it maps there: its own tensor names, and the
    ensemble tensors it reads and makes, but for a tensor only undrawn steps read (caption_with_label's
    ``caption_after_prompt`` mapped for a step of yours), which is your step's wiring. The BLS callees of its
    drawn steps are drawn too. A step of yours, undrawn, is held to nothing here."""
    drawing = dag_drawing(docs)
    drawn = set(drawn_steps(drawing))
    config = parse_config(repository / ensemble / "config.pbtxt")
    outputs = {output.name for output in config.output}
    read_by_drawn = {
        tensor
        for step in config.ensemble_scheduling.step
        if step.model_name in drawn
        for tensor in step.input_map.values()
    }
    missing = []
    for step in config.ensemble_scheduling.step:
        if step.model_name not in drawn:
            continue
        own = [*step.input_map.keys(), *step.input_map.values(), *step.output_map.keys()]
        made = [tensor for tensor in step.output_map.values() if tensor in outputs or tensor in read_by_drawn]
        missing += [
            f"{step.model_name}'s tensor {tensor}"
            for tensor in dict.fromkeys([*own, *made])
            if not re.search(rf"\b{re.escape(tensor)}\b", drawing)
        ]
        missing += [
            f"{step.model_name}'s BLS callee {callee}"
            for callee in declared_bls_callees(repository, step.model_name)
            if callee not in drawn
        ]
    return [f"docs/architecture.md's drawing lacks {name} of {ensemble}" for name in missing]


def drawing_answers_problems(repository: Path, docs: Path, ensemble: str) -> list[str]:
    """The drawing's '<ensemble> answers:' list is, in the config's order, exactly the outputs the drawn steps
    make; it holds every contract output the ensemble declares; and every step those outputs need is drawn. So a
    drawn step's new or renamed output, or a contract output left out, fails; your step's outputs are not listed."""
    drawing = dag_drawing(docs)
    listed = answers_listed(drawing, ensemble)
    if listed is None:
        return [f"docs/architecture.md's drawing has no '{ensemble} answers:' line"]
    drawn, steps = set(drawn_steps(drawing)), ensemble_steps(repository, ensemble)
    maker = {tensor: step.model for step in steps for tensor in step.outputs}
    declared = ensemble_outputs(repository, ensemble)
    made_by_drawn = [output for output in declared if maker.get(output) in drawn]
    problems = [] if listed == made_by_drawn else [f"{ensemble} answers {listed}; its drawn steps make {made_by_drawn}"]
    contract = [output for output in (*CORE_OUTPUTS, *CLASSIFY_OUTPUTS) if output in declared]
    problems += [
        f"{ensemble} answers no {output}, a contract output"
        for output in dict.fromkeys(contract)
        if output not in listed
    ]
    undrawn = sorted(makers_of(steps, listed) - drawn)
    return problems + (
        [f"{ensemble}'s listed answers need steps {undrawn}, which the drawing lacks"] if undrawn else []
    )


def drawing_problems(repository: Path, docs: Path) -> list[str]:
    drawing = dag_drawing(docs)
    return [
        *drawing_names_problems(repository, docs),
        *(
            problem
            for ensemble in drawn_ensembles(repository, drawing)
            for problem in (
                *drawing_tensor_problems(repository, docs, ensemble),
                *drawing_answers_problems(repository, docs, ensemble),
            )
        ),
    ]


# docs/api.md's outputs beyond the core contract (tests/unit/test_docs_match_the_repository.py) ---------------


def extra_outputs_section(docs: Path) -> str:
    text = (docs / "api.md").read_text()
    section = text[text.index("### Outputs beyond the core contract") :]
    return section[: section.index("\n#", 1)]


def api_page_extra_output_problems(repository: Path, docs: Path) -> list[str]:
    """The section "Outputs beyond the core contract" names the pipeline ensemble, and, for each ensemble it
    names, every output beyond ``CORE_OUTPUTS`` that the project's own steps (the drawn ones) make there. An
    output of a drawn step added or renamed without the page fails; your step's outputs need no line."""
    section = extra_outputs_section(docs)
    documented = set(drawn_steps(dag_drawing(docs)))
    named = [name for name in ensemble_names(repository) if f"`{name}`" in section]
    problems = [] if ENSEMBLE in named else [f"docs/api.md's section does not name {ENSEMBLE}"]
    for ensemble in named:
        maker = {tensor: step.model for step in ensemble_steps(repository, ensemble) for tensor in step.outputs}
        problems += [
            f"docs/api.md does not name {ensemble}'s {output}, made by {maker[output]}"
            for output in ensemble_outputs(repository, ensemble)
            if output not in CORE_OUTPUTS and maker.get(output) in documented and f"`{output}`" not in section
        ]
    return problems


# Every check above on one repository and its docs -------------------------------------------------------------


SuiteCheck = Callable[[Path, Path], list[str]]  # (repository, docs) -> the problems found


def _each(names: Callable[[Path], Iterable[str]], check: Callable[[Path, str], list[str]]) -> SuiteCheck:
    """A check of one model or ensemble, run on every one ``names`` reads from the repository."""
    return lambda repository, docs: [problem for name in names(repository) for problem in check(repository, name)]


def python_models(repository: Path) -> list[str]:
    return [name for name, config in model_configs(repository).items() if config.backend == "python"]


# Every check of this module as a function of (repository, docs): what a step added to them must pass.
SUITE_CHECKS: dict[str, SuiteCheck] = {
    "ensemble wiring": _each(ensemble_names, ensemble_wiring_problems),
    "python steps": _each(python_models, python_step_problems),
    "starved calls": _each(ensemble_names, starved_call_problems),
    "classify call": lambda repository, docs: classify_call_problems(repository),
    "api graphs": _each(ensemble_names, api_graph_problems),
    "route needs": _each(contract_ensembles, route_needs_problems),
    "rate limiter": lambda repository, docs: rate_limiter_problems(repository),
    "native variants": lambda repository, docs: native_variant_problems(repository),
    "documented variants": documented_variant_problems,
    "settings": settings_problems,
    "dag drawing": drawing_problems,
    "api page": api_page_extra_output_problems,
}
