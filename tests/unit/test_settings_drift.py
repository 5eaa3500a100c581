"""Each step setting has one home, its settings class: every config that names the class, the
configuration table (docs/configuration.md) and the scaffold's template say what the class says, or
these fail.

The steps are read from the repository. The table has a row per setting of every step, a step of yours too:
``food11-new-step`` writes its rows (for its example setting ``scale``); when you change your step's
settings, the failure names each row to add, fix or remove."""

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
CONFIGURATION_DOC = PROJECT_ROOT / "docs" / "configuration.md"
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


def readme_configuration_table(text: str | None = None) -> dict[tuple[str, str], str]:
    """(step, parameter) -> default, from the "Configuration" table of docs/configuration.md (a row may
    list several parameters, comma-separated in both columns)."""
    text = CONFIGURATION_DOC.read_text() if text is None else text
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


def table_drift(table: dict[tuple[str, str], str], configs: list[Path]) -> list[str]:
    """How the configuration table differs from the settings classes of the steps ``configs`` configure, each
    difference with what to do about it."""
    expected, classes = {}, {}
    for config in configs:
        cls, _ = settings_and_parameters(config)
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


def test_readme_configuration_table_says_what_the_settings_classes_say():
    problems = table_drift(readme_configuration_table(), STEP_CONFIGS)
    assert not problems, f"{CONFIGURATION_DOC}, table 'Configuration':\n" + "\n".join(problems)


def test_table_drift_says_which_row_to_add_fix_or_remove():
    config = REPOSITORY / "top_labels" / "config.pbtxt"
    assert table_drift({("top_labels", "k"): "3"}, [config]) == []
    assert table_drift({}, [config]) == [
        "no row for top_labels's `k` (TopLabelsSettings defaults to 3): add | top_labels | `k` | 3 | what it does |"
    ]
    assert table_drift({("top_labels", "k"): "4", ("top_labels", "j"): "1", ("gone", "x"): "1"}, [config]) == [
        "the row of top_labels's `k` says 4, but TopLabelsSettings defaults to 3: fix it",
        "a row for top_labels's `j`, which TopLabelsSettings does not have: remove it",
        "a row for gone's `x`, which is no step's setting in the repository: remove it",
    ]


def test_the_scaffolds_config_says_what_its_settings_class_says(tmp_path, monkeypatch):
    package = "drift_check_steps"
    (tmp_path / "src" / package).mkdir(parents=True)
    (tmp_path / "src" / package / "__init__.py").touch()
    (tmp_path / "repository").mkdir()
    doc = tmp_path / "configuration.md"
    doc.write_text(CONFIGURATION_DOC.read_text())
    create_step(
        StepSpec("drift_check"),
        Layout(tmp_path / "repository", tmp_path / "tests", tmp_path / "src" / package, package, configuration_doc=doc),
    )
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    try:
        config = tmp_path / "repository" / "drift_check" / "config.pbtxt"
        assert drift(config) == []
        # The scaffold wrote the new step's rows into the table, and they say what its settings class says.
        table = readme_configuration_table(doc.read_text())
        assert table_drift({key: value for key, value in table.items() if key[0] == "drift_check"}, [config]) == []
        assert set(table) - {("drift_check", "scale")} == set(readme_configuration_table())
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
