"""The reload watcher's logic without Triton (pipeline_src/serving/reload.py), on real files in tmp_path: which
files a step imports, which models a change touches and when it is reported, what is done to the files before
a reload; and serve.py's model control and --reload flag. tests/integration/test_reload.py runs it for real."""

from __future__ import annotations

import importlib.util
import json
import os
import py_compile
from pathlib import Path

import pytest

from pipeline_src.serving.launcher import EXPLICIT_MODEL_CONTROL, chosen_model_control, model_control_args
from pipeline_src.serving.reload import (
    DEFAULT_PACKAGES,
    ChangeWatch,
    StepReloader,
    forget_bytecode,
    mark_modified,
    needs_forced_reload,
)
from pipeline_src.serving.settings import ServeSettings, settings_from
from pipeline_src.serving.step_imports import ImportTracer

ENSEMBLE_CONFIG = 'name: "pipeline"\nplatform: "ensemble"\n'


def write(path: Path, text: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def edit(path: Path, text: str) -> None:
    """Rewrite ``path`` and move its mtime a second on, as a later save would (writes in one clock tick can
    share an mtime)."""
    before = path.stat().st_mtime_ns
    path.write_text(text)
    os.utime(path, ns=(before + 1_000_000_000, before + 1_000_000_000))


def step(repository: Path, name: str, model_py: str) -> Path:
    write(repository / name / "config.pbtxt", f'name: "{name}"\nbackend: "python"\n')
    return write(repository / name / "1" / "model.py", model_py)


@pytest.fixture
def project(tmp_path):
    """A repository of two Python steps and an ensemble, and a package ``steplib`` they import from."""
    lib = tmp_path / "src" / "steplib"
    write(lib / "__init__.py")
    write(lib / "shared.py", "import numpy as np\n")
    write(lib / "resize.py", "from . import shared\nfrom .shared import np\n")
    write(lib / "colour" / "__init__.py")
    write(lib / "colour" / "space.py", "def convert():\n    from steplib import shared\n")
    write(lib / "unused.py", "")
    repository = tmp_path / "repository"
    step(repository, "resizer", "import os\nfrom steplib.resize import shared\n")
    step(repository, "painter", "import steplib.colour.space\nimport painter_step\n")
    write(repository / "painter" / "painter_step.py", "from steplib import unused as _\n")
    write(repository / "pipeline" / "config.pbtxt", ENSEMBLE_CONFIG)
    (repository / "pipeline" / "1").mkdir()
    return repository, lib


def settle(watch: ChangeWatch) -> dict[str, list[Path]]:
    """What a poll reports once the files stopped changing: the first look sees them change, the next agrees."""
    assert watch.settled_changes() == {}
    return watch.settled_changes()


def test_a_step_imports_its_modules_transitively_with_their_packages_and_its_own_folder(project):
    repository, lib = project
    tracer = ImportTracer({"steplib": lib})
    assert tracer.step_sources(repository / "resizer") == {
        repository / "resizer" / "1" / "model.py",
        lib / "__init__.py",
        lib / "resize.py",
        lib / "shared.py",  # relative imports; numpy and os are not followed
    }
    assert tracer.step_sources(repository / "painter") == {
        repository / "painter" / "1" / "model.py",
        repository / "painter" / "painter_step.py",  # from the model's folder, on the stub's sys.path
        lib / "__init__.py",
        lib / "colour" / "__init__.py",
        lib / "colour" / "space.py",
        lib / "shared.py",  # a late import, inside a function
        lib / "unused.py",  # `from steplib import unused`: a module, not a name of steplib
    }
    assert tracer.step_sources(repository / "pipeline") == set()  # an ensemble runs no Python


def test_the_project_steps_import_pipeline_src_files_that_exist(tmp_path):
    step(tmp_path, "adapter", "from pipeline_src.steps.triton_step import StepContext\n")
    sources = ImportTracer(DEFAULT_PACKAGES).step_sources(tmp_path / "adapter")
    package = DEFAULT_PACKAGES["pipeline_src"]
    assert {package / "__init__.py", package / "steps" / "__init__.py", package / "steps" / "triton_step.py"} <= sources
    assert all(path.is_file() for path in sources)


def test_an_edit_of_a_module_reloads_exactly_the_steps_that_import_it(project):
    repository, lib = project
    watch = ChangeWatch(repository, {"steplib": lib})
    edit(lib / "resize.py", "from . import shared  # edited\n")
    assert settle(watch) == {"resizer": [lib / "resize.py"]}
    edit(lib / "shared.py", "import numpy\n")
    assert settle(watch) == {"painter": [lib / "shared.py"], "resizer": [lib / "shared.py"]}
    write(lib / "not_imported.py", "x = 1\n")
    assert settle(watch) == {}


def test_an_edit_in_a_model_folder_reloads_that_model_alone(project):
    repository, lib = project
    watch = ChangeWatch(repository, {"steplib": lib})
    edit(repository / "pipeline" / "config.pbtxt", ENSEMBLE_CONFIG + "max_batch_size: 8\n")
    assert settle(watch) == {"pipeline": [repository / "pipeline" / "config.pbtxt"]}
    write(repository / "painter" / "1" / "weights.bin", "new")
    assert settle(watch) == {"painter": [repository / "painter" / "1" / "weights.bin"]}
    (repository / "painter" / "1" / "weights.bin").unlink()
    assert settle(watch) == {"painter": [repository / "painter" / "1" / "weights.bin"]}


def test_bytecode_swap_and_backup_files_are_no_edits(project):
    repository, lib = project
    watch = ChangeWatch(repository, {"steplib": lib})
    py_compile.compile(str(repository / "resizer" / "1" / "model.py"))  # as the stub writes __pycache__
    py_compile.compile(str(lib / "resize.py"))
    write(repository / "resizer" / "1" / ".model.py.swp", "vim")
    write(repository / "resizer" / "1" / "model.py~", "backup")
    assert settle(watch) == {}


def test_a_change_is_reported_once_it_has_settled_and_only_once(project):
    repository, lib = project
    watch = ChangeWatch(repository, {"steplib": lib})
    edit(lib / "resize.py", "x = 1\n")
    assert watch.settled_changes() == {}  # changing: a file may be half-written
    edit(lib / "resize.py", "x = 12\n")
    assert watch.settled_changes() == {}  # still changing
    assert watch.settled_changes() == {"resizer": [lib / "resize.py"]}
    assert watch.settled_changes() == {}


def test_a_new_import_is_watched_from_the_edit_that_adds_it(project):
    repository, lib = project
    watch = ChangeWatch(repository, {"steplib": lib})
    extra = write(lib / "extra.py", "")
    assert settle(watch) == {}  # imported by no step
    model_py = repository / "resizer" / "1" / "model.py"
    edit(model_py, model_py.read_text() + "import steplib.extra\n")
    assert settle(watch) == {"resizer": [model_py]}
    edit(extra, "# now imported\n")
    assert settle(watch) == {"resizer": [extra]}


def test_a_module_that_does_not_parse_mid_edit_still_counts_as_changed(project):
    repository, lib = project
    watch = ChangeWatch(repository, {"steplib": lib})
    edit(lib / "resize.py", "from . import (\n")
    assert settle(watch) == {"resizer": [lib / "resize.py"]}  # Triton's load will name the SyntaxError
    edit(lib / "resize.py", "from . import shared\n")
    assert settle(watch) == {"resizer": [lib / "resize.py"]}


def test_only_a_config_change_is_left_to_triton_anything_else_forces_a_full_reload(project):
    repository, lib = project
    folder = repository / "resizer"
    assert not needs_forced_reload(folder, [folder / "config.pbtxt"])  # an instance count is updated in place
    assert needs_forced_reload(folder, [folder / "config.pbtxt", folder / "1" / "model.py"])
    assert needs_forced_reload(folder, [lib / "resize.py"])


def test_marking_a_model_modified_moves_its_version_folders_mtime_and_writes_no_file(project):
    repository, _ = project
    folder = repository / "resizer"
    (folder / "2").mkdir()
    long_ago = 1_000_000_000
    for path in (folder / "1", folder / "2", folder / "1" / "model.py", folder / "config.pbtxt"):
        os.utime(path, (long_ago, long_ago))
    mark_modified(folder)
    assert (folder / "1").stat().st_mtime > long_ago and (folder / "2").stat().st_mtime > long_ago
    assert (folder / "1" / "model.py").stat().st_mtime == long_ago
    assert (folder / "config.pbtxt").stat().st_mtime == long_ago


def test_the_bytecode_of_a_changed_module_is_forgotten(project):
    """Python would trust it if the edit kept the size within the second of its compile."""
    _, lib = project
    cached = Path(importlib.util.cache_from_source(str(lib / "resize.py")))
    py_compile.compile(str(lib / "resize.py"))
    py_compile.compile(str(lib / "shared.py"))
    forget_bytecode([lib / "resize.py"])
    assert not cached.exists()
    assert Path(importlib.util.cache_from_source(str(lib / "shared.py"))).exists()
    forget_bytecode([lib / "resize.py", lib.parent.parent / "repository" / "resizer" / "config.pbtxt"])  # no-op


def test_serve_runs_triton_under_explicit_model_control_unless_told_otherwise():
    assert model_control_args(("--trace-config=triton,file=t.json",)) == EXPLICIT_MODEL_CONTROL
    assert EXPLICIT_MODEL_CONTROL == ("--model-control-mode=explicit", "--load-model=*")
    assert chosen_model_control(EXPLICIT_MODEL_CONTROL) == "explicit"
    for chosen in (("--model-control-mode=none",), ("--log-verbose=1", "--model-control-mode", "poll")):
        assert model_control_args(chosen) == ()
    assert chosen_model_control(("--model-control-mode", "poll")) == "poll"


def test_serve_reloads_by_default_and_not_when_told():
    assert settings_from(ServeSettings, [], None).reload is True
    assert settings_from(ServeSettings, ["--no-reload"], None).reload is False
    assert settings_from(ServeSettings, ["--reload-package", "src/mine"], None).reload_package == (Path("src/mine"),)


class TritonTakingDownAnEnsemble:
    """Triton's repository API as the watcher calls it, with the one fault the integration tests cannot produce
    (the validator catches every mistake they can make): a step's load that Triton fails and that takes an
    ensemble over it down. A load with a config override (loading back) succeeds."""

    def __init__(self, ready: set[str], takes_down: dict[str, str]):
        self.ready, self.takes_down, self.loads = set(ready), takes_down, []

    def ready_models(self) -> set[str]:
        return set(self.ready)

    def model_config(self, model: str) -> dict:
        return {"name": model, "platform": "ensemble" if model == "pipeline" else ""}

    def unavailable_reasons(self) -> dict[str, str]:
        return {model: f"ensemble '{model}' could not be reloaded" for model in self.takes_down.values()}

    def load(self, model: str, config: str | None = None) -> str | None:
        self.loads.append((model, config))
        if config is None and model in self.takes_down:
            self.ready.discard(self.takes_down[model])
            return f"failed to load '{model}'"
        self.ready.add(model)
        return None


def poll(reloader: StepReloader) -> bool:
    """The poll that reports the settled change (the one before sees it changing)."""
    assert reloader.poll() is False
    return reloader.poll()


def test_a_load_that_takes_an_ensemble_down_loads_it_back_with_the_config_it_served_with(project):
    repository, lib = project
    triton = TritonTakingDownAnEnsemble({"resizer", "painter", "pipeline"}, takes_down={"resizer": "pipeline"})
    lines: list[str] = []
    reloader = StepReloader(repository, triton, {"steplib": lib}, report=lines.append, validate=None)
    edit(lib / "resize.py", "x = 1\n")
    assert poll(reloader)
    served_config = json.dumps(triton.model_config("pipeline"))
    assert triton.loads == [("resizer", None), ("pipeline", served_config)]
    assert triton.ready == {"resizer", "painter", "pipeline"}
    assert lines[0].startswith("reload: resizer (steplib/resize.py changed): failed in ")
    assert lines[0].endswith("the loaded version keeps serving: failed to load 'resizer'")
    assert lines[1] == (
        "reload: pipeline fell (ensemble 'pipeline' could not be reloaded): loaded back as it was, it serves"
    )


def test_a_model_that_fell_is_loaded_again_at_the_next_change_of_its_files(project):
    repository, lib = project
    triton = TritonTakingDownAnEnsemble({"resizer", "painter", "pipeline"}, takes_down={})
    lines: list[str] = []
    reloader = StepReloader(repository, triton, {"steplib": lib}, report=lines.append, validate=None)
    edit(lib / "resize.py", "x = 1\n")
    assert poll(reloader)
    triton.ready.discard("pipeline")  # down, whatever the reason
    edit(repository / "pipeline" / "config.pbtxt", ENSEMBLE_CONFIG + "# fixed\n")
    assert poll(reloader)
    assert triton.loads[-1] == ("pipeline", None) and "pipeline" in triton.ready
    assert lines[-1].startswith("reload: pipeline (pipeline/config.pbtxt changed): ok in ")
    assert lines[-1].endswith(", loaded again")
    write(repository / "never_served" / "config.pbtxt", 'name: "never_served"\nbackend: "python"\n')
    assert poll(reloader)
    assert lines[-1] == "reload: never_served (never_served/config.pbtxt changed): skipped, not loaded in Triton"


def test_a_change_the_validator_rejects_is_refused_with_its_reason_then_loaded_with_the_fix(project):
    repository, lib = project
    triton = TritonTakingDownAnEnsemble({"resizer", "painter", "pipeline"}, takes_down={})
    verdicts = [["pipeline: step 1 (resizer): output_map key 'Z' is not an output of model 'resizer'"], []]
    lines: list[str] = []
    reloader = StepReloader(
        repository, triton, {"steplib": lib}, report=lines.append, validate=lambda repository: verdicts.pop(0)
    )
    edit(repository / "pipeline" / "config.pbtxt", ENSEMBLE_CONFIG + "# wrong\n")
    assert poll(reloader) is False
    assert triton.loads == []
    assert lines == [
        "reload: pipeline (pipeline/config.pbtxt changed): refused, the loaded version keeps serving: "
        "pipeline: step 1 (resizer): output_map key 'Z' is not an output of model 'resizer'"
    ]
    edit(lib / "resize.py", "x = 2\n")  # the next change the validator passes loads the refused one too
    assert poll(reloader)
    assert sorted(model for model, _ in triton.loads) == ["pipeline", "resizer"]


def test_the_validator_runs_in_a_fresh_interpreter_and_names_the_repositorys_errors(tmp_path):
    from pipeline_src.serving.reload import validator_errors

    write(tmp_path / "broken" / "config.pbtxt", 'name: "other"\nbackend: "python"\n')
    errors = validator_errors(tmp_path)
    assert errors and all(error.startswith("broken: ") for error in errors), errors
    assert any("other" in error for error in errors), errors
