"""constraints.txt (make lock) holds the whole tested set: every exact pin of pyproject.toml at its version,
so `make install` and the images install what CI tested and the audit read."""

from importlib import metadata

import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from pipeline_src import PROJECT_ROOT

# The CUDA build and its own packages are not installed where the lock is made (steps-gpu: images, GPU boxes).
NOT_LOCKED = {"onnxruntime-gpu"}


def locked() -> dict[str, str]:
    lines = (PROJECT_ROOT / "constraints.txt").read_text().splitlines()
    pins = (Requirement(line) for line in lines if line and not line.startswith("#"))
    return {canonicalize_name(pin.name): str(pin.specifier).removeprefix("==") for pin in pins}


def test_every_pin_of_pyproject_is_locked_at_its_version():
    lock = locked()
    for text in metadata.distribution("food11-pipeline").requires or []:
        requirement = Requirement(text)
        name = canonicalize_name(requirement.name)
        exact = [spec.version for spec in requirement.specifier if spec.operator == "=="]
        if not exact or name in NOT_LOCKED or name == "food11-pipeline":
            continue
        assert lock.get(name) == exact[0], (
            f"{name}: pyproject.toml pins {exact[0]}, constraints.txt has "
            f"{lock.get(name)}: run `make lock` after changing a pin"
        )


def test_the_lock_pins_exactly():
    assert all(version and not version.startswith(("<", ">", "~", "!")) for version in locked().values())


def test_every_pin_of_the_benchmarks_is_locked_at_its_version():
    """benchmarks/pyproject.toml, a distribution of its own, is part of the tested set (make lock installs it)."""
    lock = locked()
    project = tomllib.loads((PROJECT_ROOT / "benchmarks" / "pyproject.toml").read_text())["project"]
    pins = [Requirement(text) for text in project["dependencies"]]
    exact = {
        canonicalize_name(pin.name): spec.version for pin in pins for spec in pin.specifier if spec.operator == "=="
    }
    assert exact, "the benchmarks pin nothing?"
    assert {name: lock.get(name) for name in exact} == exact, "run `make lock` after changing a pin"
