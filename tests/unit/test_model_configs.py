"""Every config.pbtxt parses as Triton's ModelConfig, and the ensemble's wiring is consistent.

The models, steps and ensembles are read from the repository, so a step added and wired into an ensemble
breaks none of these tests. What they freeze on purpose says so: the pipeline's own steps and the settings
class each names, and the wire contract (``pipeline_src.contract.CORE_OUTPUTS``, which every ensemble calling
itself a food11 pipeline declares alike; more outputs are fine)."""

from pathlib import Path

import pytest
from google.protobuf import text_format
from repository_checks import ensemble_wiring_problems, settings_class, tensors
from tritonclient.grpc import model_config_pb2

from pipeline_src import PROJECT_ROOT
from pipeline_src.contract import CLASSIFY_ENSEMBLE, CLASSIFY_OUTPUTS, CORE_OUTPUTS, ENSEMBLE
from pipeline_src.steps import settings
from pipeline_src.steps.top_labels import TopLabelsSettings, check_output_dims

REPOSITORY = PROJECT_ROOT / "model_repository"
CONFIG_FILES = sorted(REPOSITORY.glob("*/config.pbtxt"))
# The pipeline's own steps and the settings class each one's config names: frozen here on purpose (a step of
# yours needs no line here; its config and settings are checked like these by the tests below).
PIPELINE_STEPS = {
    "preprocess": settings.PreprocessSettings,
    "classifier": settings.ClassifierSettings,
    "vision_encoder": settings.VisionEncoderSettings,
    "label": settings.LabelSettings,
    "caption_with_label": settings.CaptionWithLabelSettings,
    "captioner": settings.CaptionerSettings,
    "top_labels": TopLabelsSettings,  # the worked example of docs/EXTENDING.md
    "model_manifests": settings.ModelManifestsSettings,
}


def load(path: Path) -> model_config_pb2.ModelConfig:
    return text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())


CONFIGS = {path.parent.name: load(path) for path in CONFIG_FILES}
ENSEMBLES = [name for name, config in CONFIGS.items() if config.platform == "ensemble"]
PYTHON_STEPS = sorted(name for name, config in CONFIGS.items() if config.backend == "python")
PIPELINE_ENSEMBLES = (ENSEMBLE, "food11_pipeline_topk")  # both answer the wire contract (the worked example)


def test_the_repository_holds_the_pipelines_steps_and_ensembles():
    """Frozen on purpose: the pipeline's steps, its two ensembles and the classify one (a repository may hold
    more)."""
    missing = sorted((set(PIPELINE_STEPS) | {*PIPELINE_ENSEMBLES, CLASSIFY_ENSEMBLE}) - set(CONFIGS))
    assert not missing, f"the pipeline's own models {missing} are missing from {REPOSITORY}"
    assert {*PIPELINE_ENSEMBLES, CLASSIFY_ENSEMBLE} <= set(ENSEMBLES)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_config_is_named_after_its_directory(name):
    assert CONFIGS[name].name == name


@pytest.mark.parametrize("name", PYTHON_STEPS)
def test_python_steps_have_a_model_file_and_valid_parameters(name):
    config = CONFIGS[name]
    assert (REPOSITORY / name / "1" / "model.py").is_file()
    parameters = {key: value.string_value for key, value in config.parameters.items()}
    declared = settings_class(REPOSITORY / name / "config.pbtxt")  # importable as the stub imports it
    assert declared is not None, f"{name}: no 'settings' parameter names its settings class"
    if name in PIPELINE_STEPS:
        assert declared is PIPELINE_STEPS[name], f"{name}: the pipeline's step names {declared}"
    declared.from_parameters(parameters)  # raises on an unknown key or a bad value


def test_cpu_only_steps_are_pinned_to_the_cpu_and_model_steps_follow_the_hardware():
    kinds = {name: {group.kind for group in CONFIGS[name].instance_group} for name in PIPELINE_STEPS}
    cpu, auto = model_config_pb2.ModelInstanceGroup.KIND_CPU, model_config_pb2.ModelInstanceGroup.KIND_AUTO
    assert kinds["preprocess"] == {cpu} and kinds["caption_with_label"] == {cpu} and kinds["top_labels"] == {cpu}
    assert kinds["model_manifests"] == kinds["label"] == {cpu}
    assert kinds["classifier"] == {auto} and kinds["vision_encoder"] == {auto} and kinds["captioner"] == {auto}


def test_bls_step_has_several_instances_so_it_never_serialises_the_pipeline():
    assert sum(group.count for group in CONFIGS["caption_with_label"].instance_group) >= 4


def test_batching_steps_batch_dynamically():
    batching = [name for name in PYTHON_STEPS if CONFIGS[name].max_batch_size > 0]
    assert set(PIPELINE_STEPS) - set(batching) == {"model_manifests"}  # answers one fixed string
    for name in batching:
        assert CONFIGS[name].HasField("dynamic_batching"), f"{name} batches, but not dynamically"


@pytest.mark.parametrize("ensemble", ENSEMBLES)
def test_ensemble_wiring_is_consistent(ensemble):
    """Every step a model of the repository, fed every input it requires with the type and dims it declares, from
    a tensor that something makes once; every ensemble output made as declared (tests/repository_checks.py)."""
    assert ensemble_wiring_problems(REPOSITORY, ensemble) == []


def test_top_labels_declares_k_labels_per_photo_and_the_topk_ensemble_returns_them():
    config = CONFIGS["top_labels"]
    k = TopLabelsSettings.from_parameters({key: value.string_value for key, value in config.parameters.items()}).k
    check_output_dims(k, {output.name: list(output.dims) for output in config.output})  # raises on a mismatch
    outputs = tensors(CONFIGS["food11_pipeline_topk"].output)
    assert outputs["TOP_LABELS"][1] == outputs["TOP_PROBABILITIES"][1] == [k]


@pytest.mark.parametrize("ensemble", PIPELINE_ENSEMBLES)
def test_the_pipelines_ensembles_declare_the_wire_contracts_outputs(ensemble):
    """The contract (pipeline_src.contract.CORE_OUTPUTS) every caller reads: each one row per photo, declared
    alike in both ensembles. An ensemble may declare more outputs; renaming or removing one of these breaks
    every caller, so change the contract, its callers and this test together."""
    outputs = tensors(CONFIGS[ensemble].output)
    pipeline = tensors(CONFIGS[ENSEMBLE].output)
    missing = [name for name in CORE_OUTPUTS if name not in outputs]
    assert not missing, f"{ensemble} no longer declares the core outputs {missing} (pipeline_src.contract)"
    for name in CORE_OUTPUTS:
        assert outputs[name][1] == [1], f"{ensemble}: {name} is one row per photo, dims [ 1 ]"
        assert outputs[name] == pipeline[name], f"{ensemble} declares {name} unlike {ENSEMBLE}"


def test_the_expensive_steps_refuse_under_load_before_their_callers_give_up():
    """The vision encoder (every config variant) and the captioner refuse at once past a bounded queue, and
    refuse a request that waited past its timeout: its caller's time left (the override), or the default guard
    rail, which comes before caption_with_label stops waiting for a caption: no step works for a caller that has
    gone. The captioner's execute returns at once, so its loop holds the queue (its parameters) and Triton's queue
    in front of it has no policy, but the same figures. It is not decoupled (model.py's docstring says why)."""
    caption_timeout_us = 1000 * int(CONFIGS["caption_with_label"].parameters["caption_timeout_ms"].string_value)
    variants = [
        CONFIGS["vision_encoder"],
        *(load(path) for path in sorted((REPOSITORY / "vision_encoder" / "configs").glob("*.pbtxt"))),
    ]
    policies = {text_format.MessageToString(config.dynamic_batching.default_queue_policy) for config in variants}
    assert len(policies) == 1, policies  # one policy, said alike everywhere
    policy = variants[0].dynamic_batching.default_queue_policy
    assert policy.max_queue_size > 0
    assert policy.timeout_action == model_config_pb2.ModelQueuePolicy.REJECT
    assert policy.allow_timeout_override  # the caller's time left, which the clients always send
    assert 0 < policy.default_timeout_microseconds < caption_timeout_us
    captioner = CONFIGS["captioner"]
    assert not captioner.model_transaction_policy.decoupled
    assert not captioner.dynamic_batching.HasField("default_queue_policy")
    parameters = {key: value.string_value for key, value in captioner.parameters.items()}
    assert int(parameters["max_waiting_requests"]) == policy.max_queue_size
    assert int(parameters["waiting_timeout_microseconds"]) == policy.default_timeout_microseconds


@pytest.mark.parametrize("name", [name for name, config in CONFIGS.items() if config.model_warmup])
def test_warm_up_requests_fit_their_step(name):
    """Triton refuses to load a model whose warm-up names an unknown input, a wrong shape or a missing file."""
    config = CONFIGS[name]
    inputs = tensors(config.input)
    for input_name, data in (item for warmup in config.model_warmup for item in warmup.inputs.items()):
        assert (model_config_pb2.DataType.Name(data.data_type), list(data.dims)) == inputs[input_name]
        if data.input_data_file:
            raw = (REPOSITORY / name / "warmup" / data.input_data_file).read_bytes()
            assert int.from_bytes(raw[:4], "little") == len(raw) - 4  # one BYTES element: length, then bytes


def test_the_classify_ensemble_declares_the_label_outputs_alone_as_the_pipeline_does():
    """What client.classify reads (contract.CLASSIFY_OUTPUTS), typed as food11_pipeline types them, and nothing
    more: every output of a cached ensemble is named by its callers (docs/api.md, "Answers from the cache")."""
    config = CONFIGS[CLASSIFY_ENSEMBLE]
    pipeline = tensors(CONFIGS[ENSEMBLE].output)
    assert tensors(config.output) == {name: pipeline[name] for name in CLASSIFY_OUTPUTS}
    assert tensors(config.input) == tensors(CONFIGS[ENSEMBLE].input)
    assert config.max_batch_size == CONFIGS[ENSEMBLE].max_batch_size
