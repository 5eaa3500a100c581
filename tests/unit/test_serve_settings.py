"""The serving settings (pipeline_src/serving/settings.py) are every knob of `make serve` and of the Triton image:
each variable the Makefile's serve target passes and each variable compose, Dockerfile.triton and the Kubernetes
manifests set for the Triton container is one field, and docs/configuration.md's table lists every field once, as
the class says it. Flags and variables are read as a user sets them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from pipeline_src import PROJECT_ROOT
from pipeline_src.serving.settings import (
    EXIT_BAD_SETTING,
    ContainerSettings,
    ServeSettings,
    command_line_fields,
    described_default,
    environment_names,
    flag,
    settings_from,
)

# Set for the Triton container, but no setting of ours: Hugging Face's cache, for a build at start.
NOT_OURS = {"HF_HOME"}
DOCS = PROJECT_ROOT / "docs" / "configuration.md"
TABLE_HEADER = "| flag | environment | `make serve` | default | in the Triton image | |"


def field_of(settings: type[ServeSettings], variable: str) -> list[str]:
    """The fields read from ``variable`` (case as pydantic-settings reads it: insensitive)."""
    return [
        name
        for name in settings.model_fields
        if variable.upper() in (env.upper() for env in environment_names(settings, name))
    ]


def make_serve_flags() -> dict[str, str]:
    """``--flag`` -> the Makefile variable the serve target passes to it; every variable it passes is in one."""
    makefile = (PROJECT_ROOT / "Makefile").read_text().replace("\\\n", " ")
    (recipe,) = re.findall(r"^serve:.*\n\t(.*)", makefile, flags=re.M)
    passed = dict(re.findall(r'(--[a-z-]+) "?\$\(([A-Z_]+)\)"?', recipe))
    others = set(re.findall(r"\$\(([A-Z_]+)\)", recipe)) - set(passed.values())
    assert others == {"BIN", "SERVE_ARGS", "CURDIR"}, f"make serve passes {others} to no flag"
    return passed


def test_every_variable_make_serve_passes_is_one_field():
    flags = {flag(name): name for name in command_line_fields(ServeSettings)}
    passed = make_serve_flags()
    assert passed
    for option, variable in passed.items():
        assert option in flags, f"make serve passes {variable} as {option}, which is no setting of serve.py"


def triton_container_variables() -> dict[str, set[str]]:
    """Each variable set for the Triton container -> the files setting it: compose's files, Dockerfile.triton's
    ENV, the Kubernetes manifests (patches of kustomize components included)."""
    yaml = YAML(typ="safe")
    yaml.constructor.add_constructor("!reset", lambda loader, node: None)
    yaml.constructor.add_constructor("!override", lambda loader, node: loader.construct_sequence(node))
    found: dict[str, set[str]] = {}

    def add(names, source: Path) -> None:
        for name in names:
            found.setdefault(name, set()).add(str(source.relative_to(PROJECT_ROOT)))

    for compose in [*PROJECT_ROOT.glob("compose*.yaml"), PROJECT_ROOT / "tests" / "containers" / "compose.check.yaml"]:
        triton = yaml.load(compose.read_text())["services"].get("triton") or {}
        add(triton.get("environment") or {}, compose)
    dockerfile = (PROJECT_ROOT / "Dockerfile.triton").read_text().replace("\\\n", " ")
    for line in re.findall(r"^ENV (.*)$", dockerfile, flags=re.M):
        add(re.findall(r"(\w+)=", line), PROJECT_ROOT / "Dockerfile.triton")
    for manifest in (PROJECT_ROOT / "deploy" / "kubernetes").rglob("*.yaml"):
        for document in list(yaml.load_all(manifest.read_text())):
            if not document:
                continue
            if document.get("kind") == "Deployment" and document["metadata"]["name"] == "food11-triton":
                (triton,) = [c for c in document["spec"]["template"]["spec"]["containers"] if c["name"] == "triton"]
                add([variable["name"] for variable in triton.get("env", [])], manifest)
            for patch in document.get("patches", []):
                if patch.get("target", {}).get("name") == "food11-triton":
                    operations = yaml.load(patch["patch"])
                    add([op["value"]["name"] for op in operations if "/env" in op["path"]], manifest)
    return found


def test_every_variable_set_for_the_triton_container_is_one_field():
    variables = triton_container_variables()
    # what the files are known to set: this test reads them all
    assert {"TRITON_CONFIG", "TRITON_ARGS", "FOOD11_TRITON_ADMIN_KEY", "FOOD11_BLIP", "FOOD11_CLASSIFIER"} <= set(
        variables
    )
    assert "deploy/kubernetes/redis-cache/kustomization.yaml" in variables["TRITON_ARGS"]
    for variable, sources in variables.items():
        if variable in NOT_OURS:
            continue
        fields = field_of(ContainerSettings, variable)
        assert len(fields) == 1, f"{variable} (set in {', '.join(sorted(sources))}) is read by {fields or 'no field'}"
        assert fields[0] not in ContainerSettings.not_read, f"{variable}: the Triton image does not read it"


def shown(text: str) -> str:
    return f"`{text}`"


def table_rows() -> list[str]:
    """docs/configuration.md's serving table, one row a field, as the classes say it."""
    make_variables = make_serve_flags()
    rows = []
    for name, field in ServeSettings.model_fields.items():
        on_command_line = name in command_line_fields(ServeSettings) or name in command_line_fields(ContainerSettings)
        option = "after `--`" if name == "triton_args" else shown(flag(name)) if on_command_line else "none"
        if field.annotation is bool and field.default:
            option += f", {shown(flag('no_' + name))}"
        serve_default = "not read" if name in ServeSettings.not_read else shown(described_default(ServeSettings, name))
        image_default = (
            "not read" if name in ContainerSettings.not_read else shown(described_default(ContainerSettings, name))
        )
        variable = shown(make_variables[flag(name)]) if flag(name) in make_variables else ""
        environment = ", ".join(
            [shown(env) for env in environment_names(ServeSettings, name)]
            + [f"{shown(env)} (the image)" for env in environment_names(ContainerSettings, name)[1:]]
        )
        rows.append(
            f"| {option} | {environment} | {variable} | {serve_default} | {image_default} | {field.description} |"
        )
    return rows


def test_the_docs_list_every_setting_once_as_the_class_says():
    lines = DOCS.read_text().splitlines()
    assert lines.count(TABLE_HEADER) == 1, f"docs/configuration.md: one table headed {TABLE_HEADER}"
    start = lines.index(TABLE_HEADER) + 2
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    expected = table_rows()
    assert lines[start:end] == expected, "docs/configuration.md's serving table should read:\n" + "\n".join(expected)


# Read as a user sets them --------------------------------------------------------------------------------------


def test_a_flag_wins_over_its_variable(monkeypatch):
    monkeypatch.setenv("FOOD11_HTTP_PORT", "9000")
    monkeypatch.setenv("FOOD11_TRITON_ARGS", "--log-verbose=1  --exit-timeout-secs=5")
    assert settings_from(ServeSettings, [], None).http_port == 9000
    settings = settings_from(ServeSettings, ["--http-port", "9100", "--", "--log-verbose=2"], None)
    assert (settings.http_port, settings.triton_args) == (9100, ("--log-verbose=2",))
    assert ServeSettings().triton_args == ("--log-verbose=1", "--exit-timeout-secs=5")  # split on spaces


def test_the_image_reads_the_names_its_compose_files_and_manifests_set_and_make_serve_does_not(monkeypatch):
    monkeypatch.setenv("TRITON_CONFIG", "onnxruntime")  # also what a shell sets for compose's ${TRITON_CONFIG}
    monkeypatch.setenv("TRITON_ARGS", "--log-verbose=1")
    monkeypatch.setenv("FOOD11_READY_TIMEOUT_S", "20")  # the Triton image's earlier name
    image, serve = ContainerSettings(), ServeSettings()
    assert (image.triton_config, image.triton_args, image.ready_timeout) == ("onnxruntime", ("--log-verbose=1",), 20.0)
    assert (serve.triton_config, serve.triton_args, serve.ready_timeout) == ("", (), 600.0)


def test_the_container_has_its_own_defaults(monkeypatch):
    for name in ("FOOD11_MODEL_REPOSITORY", "FOOD11_HOST", "FOOD11_RESTART_LIMIT", "FOOD11_LOG_FILE"):
        monkeypatch.delenv(name, raising=False)
    image, serve = ContainerSettings(), ServeSettings()
    assert (image.model_repository, image.host, image.restart_limit, image.log_file) == (
        Path("/models"),
        "0.0.0.0",
        0,
        None,
    )
    assert (serve.model_repository, serve.host, serve.restart_limit) == (
        PROJECT_ROOT / "model_repository",
        "127.0.0.1",
        5,
    )


@pytest.mark.parametrize(
    ("settings", "variable", "value", "said"),
    [
        (ServeSettings, "FOOD11_HTTP_PORT", "eighty", "--http-port, FOOD11_HTTP_PORT: Input should be a valid integer"),
        (ServeSettings, "FOOD11_BLIP", "Salesforce/blip", "FOOD11_BLIP: the Triton image's setting"),
        (ContainerSettings, "FOOD11_RELOAD", "false", "FOOD11_RELOAD: make serve's setting"),
        (ContainerSettings, "FOOD11_TRITON_ADMIN_KEY", "secret:key", "FOOD11_TRITON_ADMIN_KEY: a non-empty key"),
    ],
)
def test_a_setting_this_process_cannot_run_with_ends_it_naming_the_setting(
    monkeypatch, capsys, settings, variable, value, said
):
    monkeypatch.setenv(variable, value)
    with pytest.raises(SystemExit) as ended:
        settings_from(settings, [], None)
    assert ended.value.code == EXIT_BAD_SETTING
    error = capsys.readouterr().err
    assert error.startswith(f"error: {said}") and value not in error  # never the value: it may be the key


def test_the_key_is_never_a_flag():
    assert "triton_admin_key" in ServeSettings.model_fields
    assert "triton_admin_key" not in command_line_fields(ServeSettings)
    assert "triton_admin_key" not in command_line_fields(ContainerSettings)
