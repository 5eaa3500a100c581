"""What can be checked here of the containers and the Kubernetes manifests without Docker, a GPU or a
cluster: the classifier's native-backend configs, the Dockerfiles' bases, extras and paths, the Triton
image's extra against NVIDIA's Python, compose against the compose-spec schema (and what the container check
changes of it), the manifests against Kubernetes'. The images themselves are built and run by
`make container-check` (deploy/containers/check.py), which needs a Docker engine."""

import json
import re
import shlex
import subprocess
import sys
import urllib.request
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from ruamel.yaml import YAML

from pipeline_src import PROJECT_ROOT
from pipeline_src.repository.loading import parse_config
from pipeline_src.repository.validate import validate_repository
from pipeline_src.serving.launcher import TritonServer, TritonStartError, free_ports

REPOSITORY = PROJECT_ROOT / "model_repository"
NATIVE_MODELS = ("classifier", "vision_encoder")  # the ONNX steps, with configs for Triton's native backend
VARIANTS = sorted(REPOSITORY.glob("*/configs/*.pbtxt"))
VARIANT_NAMES = sorted({path.stem for path in VARIANTS})
K8S = PROJECT_ROOT / "deploy" / "kubernetes"
KUBERNETES_VERSION = "1.33.0"  # the oldest release still supported upstream when this was written
TRITON_IMAGE_PYTHON = "3.12"  # nvcr.io/nvidia/tritonserver:25.08-py3 (Dockerfile.triton says why)


def interface(config) -> tuple:
    tensors = lambda items: [(t.name, t.data_type, list(t.dims)) for t in items]  # noqa: E731
    return config.name, config.max_batch_size, tensors(config.input), tensors(config.output)


# The ONNX steps on Triton's native onnxruntime backend -------------------------------------------------


@pytest.mark.parametrize("model", NATIVE_MODELS)
def test_there_is_a_native_variant_and_one_with_tensorrt(model):
    configs = REPOSITORY / model / "configs"
    assert sorted(path.stem for path in configs.glob("*.pbtxt")) == ["onnxruntime", "onnxruntime_tensorrt"]
    tensorrt = parse_config(configs / "onnxruntime_tensorrt.pbtxt")
    (accelerator,) = tensorrt.optimization.execution_accelerators.gpu_execution_accelerator
    assert accelerator.name == "tensorrt" and accelerator.parameters["precision_mode"] == "FP16"


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda path: f"{path.parent.parent.name}-{path.stem}")
def test_each_variant_declares_the_python_backend_configs_interface(variant):
    native, python = parse_config(variant), parse_config(variant.parent.parent / "config.pbtxt")
    assert native.backend == "onnxruntime" and python.backend == "python"
    assert interface(native) == interface(python)
    assert [group.kind for group in native.instance_group] == [native.instance_group[0].KIND_GPU]


@pytest.mark.parametrize("variant", [None, *VARIANT_NAMES])
def test_the_validator_accepts_the_repository_with_each_variant(model_repository, variant):
    report = validate_repository(model_repository, config_name=variant)
    assert report.ok, report.text()


@pytest.mark.integration
def test_tritonserver_reads_the_switch(model_repository, tmp_path):
    """--model-config-name=onnxruntime makes Triton load configs/onnxruntime.pbtxt: the pip server has no
    onnxruntime backend, so the classifier then fails to load, naming that backend."""
    server = TritonServer(
        model_repository,
        tmp_path,
        free_ports(),
        extra_args=(
            "--model-config-name=onnxruntime",
            "--model-control-mode=explicit",
            "--load-model=classifier",
            "--exit-on-error=true",
        ),
    )
    with pytest.raises(TritonStartError, match=r"classifier: .*onnxruntime"):
        server.start(ready_timeout_s=120)


# Dockerfiles -----------------------------------------------------------------------------------------
# Built and run for real by `make container-check` (deploy/containers/check.py) on stand-in bases; here, what
# holds without Docker: the real bases by default, the project installed with one extra, the copied paths.

ARG_DEFAULT = re.compile(r"^ARG (\w+)=(\S+)$", flags=re.MULTILINE)


def dockerfile(name: str) -> str:
    return (PROJECT_ROOT / name).read_text()


def pip_installs(name: str) -> list[str]:
    """The pip install commands of a Dockerfile's RUN lines (continuation lines joined)."""
    text = dockerfile(name).replace("\\\n", " ")
    return [
        command.strip()
        for line in text.splitlines()
        if line.startswith("RUN ")
        for command in line.removeprefix("RUN ").split("&&")
        if "pip install" in command
    ]


def optional_dependencies() -> dict[str, list[str]]:
    return tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def extra_requirements(extra: str) -> list[str]:
    """An extra's requirements, the project's own extras it names expanded (food11-pipeline[step-libs])."""
    project = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]["name"]
    requirements = []
    for spec in optional_dependencies()[extra]:
        requirement = Requirement(spec)
        if canonicalize_name(requirement.name) == canonicalize_name(project):
            for inner in sorted(requirement.extras):
                requirements += extra_requirements(inner)
        else:
            requirements.append(spec)
    return requirements


def test_the_dockerfiles_name_the_real_bases_by_default():
    triton, api = (
        dict(ARG_DEFAULT.findall(dockerfile("Dockerfile.triton"))),
        dict(ARG_DEFAULT.findall(dockerfile("Dockerfile.api"))),
    )
    assert triton["TRITON_IMAGE"] == "nvcr.io/nvidia/tritonserver:25.08-py3"
    assert triton["PYTHON_VERSION"] == TRITON_IMAGE_PYTHON  # asserted against the base's python3 at build time
    assert triton["STEPS_EXTRA"] == "steps-gpu"
    assert api["PYTHON_IMAGE"] == "python:3.11-slim"
    assert "FROM ${TRITON_IMAGE} AS code" in dockerfile("Dockerfile.triton")
    assert "FROM ${PYTHON_IMAGE}" in dockerfile("Dockerfile.api")


@pytest.mark.parametrize(("name", "extras"), [("Dockerfile.triton", {"${STEPS_EXTRA}"}), ("Dockerfile.api", {"api"})])
def test_the_images_install_the_project_with_its_extra_and_nothing_pinned_apart(name, extras):
    installs = pip_installs(name)
    assert installs
    for command in installs:
        assert "--no-deps" not in command and "==" not in command, f"{name}: {command}"
        assert set(re.findall(r'"\.\[([^]]+)\]"', command)) == extras, f"{name}: {command}"


def test_the_extras_the_images_take_exist():
    extras = optional_dependencies()
    assert {"steps", "steps-gpu", "api"} <= extras.keys()
    gpu, cpu = extra_requirements("steps-gpu"), extra_requirements("steps")
    assert [spec.replace("onnxruntime-gpu", "onnxruntime") for spec in gpu] == cpu  # the same steps, ORT's GPU build
    assert not any(Requirement(spec).name == "tritonclient" for spec in gpu)  # NVIDIA's image has none


@pytest.mark.parametrize("name", ["Dockerfile.triton", "Dockerfile.api"])
def test_every_path_a_dockerfile_copies_exists_and_is_not_docker_ignored(name):
    ignored = {
        line.strip()
        for line in (PROJECT_ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    sources = [
        source
        for line in dockerfile(name).splitlines()
        if line.startswith("COPY ")
        for source in shlex.split(line)[1:-1]
        if not source.startswith("--")
    ]
    assert sources
    for source in sources:
        assert (PROJECT_ROOT / source).exists(), f"{name} copies {source}, which does not exist"
        assert source not in ignored, f"{name} copies {source}, which .dockerignore leaves out"


def pypi_reachable() -> bool:
    try:
        with urllib.request.urlopen("https://pypi.org/simple/pip/", timeout=10):
            return True
    except OSError:
        return False


def dry_run_install(python_version: str, requirements: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    """Would pip find wheels for these requirements and everything they need, for this Python on manylinux
    x86-64? Metadata only."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--ignore-installed",
            "--only-binary=:all:",
            "--python-version",
            python_version,
            "--platform",
            "manylinux_2_28_x86_64",
            "--platform",
            "manylinux_2_17_x86_64",
            "--target",
            str(tmp_path / "target"),
            *requirements,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.skipif(not pypi_reachable(), reason="PyPI is not reachable from this machine")
def test_the_triton_images_extra_installs_for_its_python_and_not_for_24_10s(tmp_path):
    """The container check builds the image on Python 3.11; NVIDIA's image has 3.12: the `steps-gpu` extra and
    everything it pulls in must have wheels for that Python too."""
    requirements = extra_requirements("steps-gpu")
    result = dry_run_install(TRITON_IMAGE_PYTHON, requirements, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    for spec in requirements:
        name, version = spec.split("==")
        assert f"{name}-{version}" in result.stdout.replace("_", "-")
    older = dry_run_install("3.10", ["onnxruntime-gpu==1.31.1"], tmp_path)  # Triton 24.10's Python
    assert older.returncode != 0 and "No matching distribution found for onnxruntime-gpu==1.31.1" in older.stderr


# compose ---------------------------------------------------------------------------------------------


CHECK_OVERRIDE = "deploy/containers/compose.check.yaml"  # the container check's changes (make container-check)


def load_compose(name: str) -> dict:
    yaml = YAML(typ="safe")
    # Compose's merge tags: `!reset` kept as a marker so that the merge below can apply it; `!override` replaces
    # instead of merging, which the merge below does for every sequence anyway.
    yaml.constructor.add_constructor("!reset", lambda loader, node: {"__reset__": True})
    yaml.constructor.add_constructor("!override", lambda loader, node: loader.construct_sequence(node, deep=True))
    return json.loads(json.dumps(yaml.load((PROJECT_ROOT / name).read_text())))


def compose_schema() -> dict:
    import check_jsonschema

    vendored = Path(check_jsonschema.__file__).parent / "builtin_schemas" / "vendor" / "compose-spec.json"
    return json.loads(vendored.read_text())


def without_reset_markers(value):
    if isinstance(value, dict):
        return {key: without_reset_markers(item) for key, item in value.items() if item != {"__reset__": True}}
    return value


def merge(base, override):
    """Compose's merge for mappings (later file wins, `!reset` removes); enough for these two files."""
    if override == {"__reset__": True}:
        return None
    if isinstance(base, dict) and isinstance(override, dict):
        merged = dict(base)
        for key, value in override.items():
            merged[key] = merge(base.get(key), value)
            if merged[key] is None:
                del merged[key]
        return merged
    return override


@pytest.mark.parametrize("name", ["compose.yaml", "compose.cpu.yaml", CHECK_OVERRIDE])
def test_compose_files_validate_against_the_compose_spec(name):
    jsonschema.validate(without_reset_markers(load_compose(name)), compose_schema())


def test_compose_runs_triton_on_a_gpu_and_the_api_after_it_is_healthy():
    services = load_compose("compose.yaml")["services"]
    triton, api = services["triton"], services["api"]
    (device,) = triton["deploy"]["resources"]["reservations"]["devices"]
    assert device["capabilities"] == ["gpu"] and triton["shm_size"] == "1gb"
    assert "v2/health/ready" in " ".join(triton["healthcheck"]["test"])
    assert api["depends_on"]["triton"]["condition"] == "service_healthy"
    assert api["environment"]["FOOD11_API_TRITON_URL"] == "triton:8001"
    # the image's non-root user on a read-only root, /tmp in memory, no capabilities (the container check runs it so)
    assert "USER nobody" in dockerfile("Dockerfile.api") and "user" not in api
    assert api["read_only"] is True and api["tmpfs"] == ["/tmp:size=64m"]
    assert api["cap_drop"] == ["ALL"] and api["security_opt"] == ["no-new-privileges:true"]
    for port in triton["ports"] + api["ports"]:  # published on loopback unless FOOD11_PUBLISH says otherwise
        assert port.startswith("${FOOD11_PUBLISH:-127.0.0.1}:")


def test_the_cpu_variant_is_the_same_stack_without_the_gpu():
    merged = merge(load_compose("compose.yaml"), load_compose("compose.cpu.yaml"))
    triton = merged["services"]["triton"]
    assert "deploy" not in triton
    assert triton["environment"]["TRITON_CONFIG"] == ""  # the Python-backend classifier, on the CPU
    assert merged["services"]["api"] == load_compose("compose.yaml")["services"]["api"]


def test_the_container_check_changes_only_bases_network_and_models():
    """What `make container-check` runs is compose.yaml + compose.cpu.yaml as they are, but for the stand-in
    bases, the host network (servers on 127.0.0.1, `triton` resolving there) and the tiny models' mount."""
    cpu = merge(load_compose("compose.yaml"), load_compose("compose.cpu.yaml"))
    checked = merge(cpu, load_compose(CHECK_OVERRIDE))
    changed = {"build", "image", "network_mode", "ports", "volumes", "environment", "extra_hosts"}
    for name, service in cpu["services"].items():
        ours = checked["services"][name]
        assert {key: value for key, value in ours.items() if key not in changed} == {
            key: value for key, value in service.items() if key not in changed
        }
        assert ours["network_mode"] == "host" and "ports" not in ours  # `!reset`: no published ports
        assert ours["image"] == f"{service['image']}:standin"  # never tagged as the real image
        assert ours["build"]["network"] == "host"
        assert {k: v for k, v in ours["build"].items() if k not in ("args", "network", "labels")} == {
            k: v for k, v in service["build"].items() if k != "args"
        }
        added = {key for key in ours["environment"] if ours["environment"][key] != service["environment"].get(key)}
        assert added == {"triton": {"TRITON_ARGS"}, "api": {"FOOD11_API_HOST"}}[name]
        assert "127.0.0.1" in ours["environment"][next(iter(added))]
    triton, api = checked["services"]["triton"], checked["services"]["api"]
    assert triton["build"]["args"] == {
        "MODELS": "mounted",
        "TRITON_IMAGE": "local/tritonserver-standin",
        "PYTHON_VERSION": "3.11",
        "STEPS_EXTRA": "steps",
    }
    assert api["build"]["args"] == {"PYTHON_IMAGE": "local/python:3.11-slim-standin"}
    assert [volume.rsplit("}", 1)[1] for volume in triton["volumes"]] == [":/models:ro"]  # ${FOOD11_CHECK_MODELS...}
    assert api["extra_hosts"] == ["triton:127.0.0.1"]


# Kubernetes ------------------------------------------------------------------------------------------


def manifests() -> list[tuple[Path, dict]]:
    yaml = YAML(typ="safe")
    return [
        (path, document)
        for path in sorted(K8S.glob("*.yaml"))
        if path.name != "kustomization.yaml"
        for document in yaml.load_all(path.read_text())
        if document
    ]


def by_kind(kind: str) -> dict[str, dict]:
    return {document["metadata"]["name"]: document for _, document in manifests() if document["kind"] == kind}


# kustomization.yaml is kustomize's own kind, not in the Kubernetes schemas: checked further down.
@pytest.mark.parametrize(
    "path", sorted(set(K8S.glob("*.yaml")) - {K8S / "kustomization.yaml"}), ids=lambda path: path.name
)
def test_every_manifest_validates_against_the_kubernetes_schemas(path):
    for document in YAML(typ="safe").load_all(path.read_text()):
        kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)


def test_the_strict_schema_check_catches_a_misspelt_field():
    deployment = json.loads(json.dumps(by_kind("Deployment")["food11-triton"]))
    deployment["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = deployment["spec"]["template"]["spec"][
        "containers"
    ][0].pop("readinessProbe")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)


def test_the_kustomization_lists_exactly_the_manifests():
    kustomization = YAML(typ="safe").load((K8S / "kustomization.yaml").read_text())
    assert sorted(kustomization["resources"]) == sorted({path.name for path, _ in manifests()})
    assert {image["name"] for image in kustomization["images"]} == {"food11-triton", "food11-api"}


def test_services_select_their_pods_and_name_ports_the_pods_have():
    deployments = by_kind("Deployment")
    for service in by_kind("Service").values():
        (target,) = [
            d
            for d in deployments.values()
            if service["spec"]["selector"].items() <= d["spec"]["template"]["metadata"]["labels"].items()
        ]
        container_ports = {
            port["name"] for c in target["spec"]["template"]["spec"]["containers"] for port in c["ports"]
        }
        assert {port["targetPort"] for port in service["spec"]["ports"]} <= container_ports


def test_the_api_balances_per_request_over_the_headless_triton_service():
    grpc = by_kind("Service")["food11-triton-grpc"]
    assert grpc["spec"]["clusterIP"] == "None"
    (api,) = by_kind("Deployment")["food11-api"]["spec"]["template"]["spec"]["containers"]
    env = {item["name"]: item["value"] for item in api["env"]}
    assert (
        env["FOOD11_API_TRITON_URL"]
        == f"dns:///food11-triton-grpc.food11.svc.cluster.local:{grpc['spec']['ports'][0]['port']}"
    )
    assert env["FOOD11_API_GRPC_LB_POLICY"] == "round_robin"
    assert api["image"] == "food11-api"


def test_triton_pods_have_gpu_probes_shm_and_an_autoscaler_on_their_queue():
    triton = by_kind("Deployment")["food11-triton"]
    pod = triton["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == "food11-triton"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert container["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    (shm,) = [volume for volume in pod["volumes"] if volume["name"] == "shm"]
    assert shm["emptyDir"]["medium"] == "Memory"
    assert {"name": "shm", "mountPath": "/dev/shm"} in container["volumeMounts"]
    assert pod["containers"][0]["ports"][2] == {"name": "metrics", "containerPort": 8002}
    assert triton["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"] == "8002"
    hpa = by_kind("HorizontalPodAutoscaler")["food11-triton"]
    assert hpa["spec"]["scaleTargetRef"]["name"] == "food11-triton"
    (metric,) = hpa["spec"]["metrics"]
    adapter = by_kind("ConfigMap")["food11-prometheus-adapter-rules"]["data"]["config.yaml"]
    assert metric["pods"]["metric"]["name"] in adapter
