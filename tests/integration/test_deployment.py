"""What can be checked here of the containers and the Kubernetes manifests, without Docker, a GPU or a
cluster: the classifier's native-backend configs, the Dockerfiles' paths and pins, the pins against the
Triton image's Python, compose against the compose-spec schema, the manifests against Kubernetes'."""

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


def project_pins() -> dict[str, str]:
    project = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]
    specs = project["dependencies"] + [spec for extra in project["optional-dependencies"].values() for spec in extra]
    return dict(re.fullmatch(r"([A-Za-z0-9_.-]+)(?:\[[^]]*\])?==(\S+)", spec).groups() for spec in specs)


def dockerfile_pins(name: str) -> dict[str, str]:
    return dict(re.findall(r'"([A-Za-z0-9_.-]+)(?:\[[^]]*\])?==([^"]+)"', (PROJECT_ROOT / name).read_text()))


@pytest.mark.parametrize("dockerfile", ["Dockerfile.triton", "Dockerfile.api"])
def test_the_images_pins_equal_the_projects(dockerfile):
    pins, ours = dockerfile_pins(dockerfile), project_pins()
    assert pins
    for name, version in pins.items():
        # The Triton image takes ONNX Runtime's GPU build, at the version the project pins.
        assert version == ours[name.removesuffix("-gpu")], f"{dockerfile}: {name}=={version}"


@pytest.mark.parametrize("dockerfile", ["Dockerfile.triton", "Dockerfile.api"])
def test_every_path_a_dockerfile_copies_exists_and_is_not_docker_ignored(dockerfile):
    ignored = {
        line.strip()
        for line in (PROJECT_ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    sources = [
        source
        for line in (PROJECT_ROOT / dockerfile).read_text().splitlines()
        if line.startswith("COPY ")
        for source in shlex.split(line)[1:-1]
        if not source.startswith("--")
    ]
    assert sources
    for source in sources:
        assert (PROJECT_ROOT / source).exists(), f"{dockerfile} copies {source}, which does not exist"
        assert source not in ignored, f"{dockerfile} copies {source}, which .dockerignore leaves out"


def pypi_reachable() -> bool:
    try:
        with urllib.request.urlopen("https://pypi.org/simple/pip/", timeout=10):
            return True
    except OSError:
        return False


def dry_run_install(python_version: str, requirements: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    """Would pip find a wheel of each requirement for this Python on manylinux x86-64? Metadata only."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--ignore-installed",
            "--no-deps",
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
def test_the_triton_images_pins_have_wheels_for_its_python_and_not_for_24_10s(tmp_path):
    """Each pin's own wheel (--no-deps): the image's Python must install every one."""
    requirements = [f"{name}=={version}" for name, version in dockerfile_pins("Dockerfile.triton").items()]
    result = dry_run_install(TRITON_IMAGE_PYTHON, requirements, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert all(f"{name}-{version}" in result.stdout for name, version in dockerfile_pins("Dockerfile.triton").items())
    older = dry_run_install("3.10", ["onnxruntime-gpu==1.31.1"], tmp_path)  # Triton 24.10's Python
    assert older.returncode != 0 and "No matching distribution found for onnxruntime-gpu==1.31.1" in older.stderr


# compose ---------------------------------------------------------------------------------------------


def load_compose(name: str) -> dict:
    yaml = YAML(typ="safe")
    # Compose's merge tags (`!reset`, `!override`): kept as markers so that the merge below can apply them.
    yaml.constructor.add_constructor("!reset", lambda loader, node: {"__reset__": True})
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


@pytest.mark.parametrize("name", ["compose.yaml", "compose.cpu.yaml"])
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
    for port in triton["ports"] + api["ports"]:  # published on loopback unless FOOD11_PUBLISH says otherwise
        assert port.startswith("${FOOD11_PUBLISH:-127.0.0.1}:")


def test_the_cpu_variant_is_the_same_stack_without_the_gpu():
    merged = merge(load_compose("compose.yaml"), load_compose("compose.cpu.yaml"))
    triton = merged["services"]["triton"]
    assert "deploy" not in triton
    assert triton["environment"]["TRITON_CONFIG"] == ""  # the Python-backend classifier, on the CPU
    assert merged["services"]["api"] == load_compose("compose.yaml")["services"]["api"]


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
