"""Each step setting has one home, its settings class: every config that names the class, the
configuration table (docs/configuration.md) and the scaffold's template say what the class says, or
these fail."""

import re
import sys
from dataclasses import fields
from pathlib import Path

import pytest

from pipeline_src import PROJECT_ROOT
from pipeline_src.repository.loading import parse_config
from pipeline_src.repository.scaffold import Layout, StepSpec, create_step
from pipeline_src.steps.settings import SETTINGS_PARAMETER, StepSettings, declared_settings_class

REPOSITORY = PROJECT_ROOT / "model_repository"
STEP_CONFIGS = sorted(
    path for path in REPOSITORY.glob("*/config.pbtxt") if SETTINGS_PARAMETER in parse_config(path).parameters
)


def settings_and_parameters(config: Path) -> tuple[type[StepSettings], dict[str, str]]:
    parameters = {key: value.string_value for key, value in parse_config(config).parameters.items()}
    return declared_settings_class(parameters), parameters


def drift(config: Path) -> list[str]:
    """How ``config`` differs from its settings class: a setting it leaves out, or a value other than the
    class's default (a config shows every tunable of its step, at the value the code defaults to)."""
    cls, parameters = settings_and_parameters(config)
    parameters.pop(SETTINGS_PARAMETER)
    defaults = cls()
    problems = [
        f"{config}: no parameter {name!r} (default {getattr(defaults, name)!r})"
        for name in (field.name for field in fields(cls))
        if name not in parameters
    ]
    for name, text in parameters.items():
        value = getattr(cls.from_parameters({name: text}), name)
        if value != getattr(defaults, name):
            problems.append(f"{config}: {name}={text!r}, but {cls.__name__} defaults to {getattr(defaults, name)!r}")
    return problems


def shown(value) -> str:
    """A default as the configuration table writes it."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def readme_configuration_table() -> dict[tuple[str, str], str]:
    """(step, parameter) -> default, from the "Configuration" table of docs/configuration.md (a row may
    list several parameters, comma-separated in both columns)."""
    text = PROJECT_ROOT.joinpath("docs", "configuration.md").read_text()
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


@pytest.mark.parametrize("config", STEP_CONFIGS, ids=lambda path: path.parent.name)
def test_a_steps_config_shows_every_setting_at_its_default(config):
    assert drift(config) == []


def test_readme_configuration_table_says_what_the_settings_classes_say():
    expected = {}
    for config in STEP_CONFIGS:
        cls, _ = settings_and_parameters(config)
        expected.update({(config.parent.name, field.name): shown(getattr(cls(), field.name)) for field in fields(cls)})
    assert readme_configuration_table() == expected


def test_the_scaffolds_config_says_what_its_settings_class_says(tmp_path, monkeypatch):
    package = "drift_check_steps"
    (tmp_path / "src" / package).mkdir(parents=True)
    (tmp_path / "src" / package / "__init__.py").touch()
    (tmp_path / "repository").mkdir()
    create_step(
        StepSpec("drift_check"),
        Layout(tmp_path / "repository", tmp_path / "tests", tmp_path / "src" / package, package),
    )
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    try:
        assert drift(tmp_path / "repository" / "drift_check" / "config.pbtxt") == []
    finally:
        for name in [name for name in sys.modules if name.startswith(package)]:
            del sys.modules[name]


def test_drift_is_noticed(tmp_path):
    """The check itself: a changed value and a missing setting are both reported."""
    config = tmp_path / "config.pbtxt"
    text = (REPOSITORY / "captioner" / "config.pbtxt").read_text()
    config.write_text(text.replace('string_value: "20"', 'string_value: "30"'))
    assert any("max_new_tokens='30'" in problem for problem in drift(config))
    block = re.search(r'parameters \{\s*key: "warm_up".*?\n\}\n', text, re.S).group(0)
    config.write_text(text.replace(block, ""))
    assert any("no parameter 'warm_up'" in problem for problem in drift(config))
