"""Each step setting has one home, its settings class: every config that names the class, the
configuration table (docs/configuration.md) and the scaffold's template say what the class says, or
these fail.

The steps are read from the repository. The table has a row per setting of every step, a step of yours too:
``food11-new-step`` writes its rows (for its example setting ``scale``); when you change your step's
settings, the failure names each row to add, fix or remove. A config shows its step's settings at the class's
defaults; it may leave one out that the table shows at its default (so a step may leave an ONNX step's
``intra_op_threads`` to the table), never one the table does not show. The checks live in
tests/repository_checks.py, which tests/unit/test_added_steps_pass_the_suite_checks.py runs on a repository
copy with steps added."""

import re
import sys

from repository_checks import configuration_table, python_models, settings_drift, step_configs, table_drift

from pipeline_src import PROJECT_ROOT
from pipeline_src.repository.scaffold import Layout, StepSpec, create_step

REPOSITORY = PROJECT_ROOT / "model_repository"
CONFIGURATION_DOC = PROJECT_ROOT / "docs" / "configuration.md"
TABLE = configuration_table(CONFIGURATION_DOC.read_text())
STEP_CONFIGS = step_configs(REPOSITORY)


def test_every_python_step_is_checked_here():
    """The checked configs are read from the repository: every Python-backend model's, as each names its
    settings class. Fails for a Python step that names none (its settings would go unchecked)."""
    python_steps = sorted(REPOSITORY / name / "config.pbtxt" for name in python_models(REPOSITORY))
    assert python_steps and python_steps == STEP_CONFIGS


def test_every_steps_config_shows_its_settings_at_their_defaults():
    """Fails for a config value other than its class's default, or a setting neither the config nor the table
    shows."""
    assert [problem for config in STEP_CONFIGS for problem in settings_drift(config, TABLE)] == []


def test_readme_configuration_table_says_what_the_settings_classes_say():
    problems = table_drift(TABLE, STEP_CONFIGS)
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
        assert settings_drift(config, {}) == []  # every setting in the config, none left to the table
        # The scaffold wrote the new step's rows into the table, and they say what its settings class says.
        table = configuration_table(doc.read_text())
        assert table_drift({key: value for key, value in table.items() if key[0] == "drift_check"}, [config]) == []
        assert set(table) - {("drift_check", "scale")} == set(TABLE)
    finally:
        for name in [name for name in sys.modules if name.startswith(package)]:
            del sys.modules[name]


def test_drift_is_noticed(tmp_path):
    """The check itself: a changed value and a missing setting are both reported; a setting left out is
    accepted only where the table shows it at the class's default."""
    config = tmp_path / "captioner" / "config.pbtxt"
    config.parent.mkdir()
    text = (REPOSITORY / "captioner" / "config.pbtxt").read_text()
    config.write_text(text.replace('string_value: "20"', 'string_value: "30"'))
    assert any("max_new_tokens='30'" in problem for problem in settings_drift(config, TABLE))
    block = re.search(r'parameters \{\s*key: "warm_up".*?\n\}\n', text, re.S).group(0)
    config.write_text(text.replace(block, ""))
    assert any("no parameter 'warm_up'" in problem for problem in settings_drift(config, {}))
    assert any(
        "no parameter 'warm_up'" in problem for problem in settings_drift(config, {("captioner", "warm_up"): "false"})
    )
    assert settings_drift(config, {("captioner", "warm_up"): "true"}) == []
