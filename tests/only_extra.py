"""Run Python as if only some extras of this project were installed: ``python tests/only_extra.py
EXTRA[,EXTRA] -c CODE``.

The development virtualenv holds every extra at once, which hides a process importing what its own extra
lacks (a Triton step importing tritonclient, which NVIDIA's image does not have). This runner computes the
distributions the named extras need (the project's requirements, followed through their own) and makes any
other installed distribution's top-level modules fail to import, as they would where they are absent.
Modules of no installed distribution (the standard library, this project's own packages) stay visible.
A fake ``triton_python_backend_utils`` stands in for the module only the Python backend's stub provides.
"""

from __future__ import annotations

import importlib.abc
import importlib.metadata as metadata
import sys
import types
from pathlib import Path

import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

PROJECT = "food11-pipeline"
PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def project_requirements() -> list[str]:
    """This checkout's own requirements, as its installed metadata states them (each extra's with its marker), but
    from its pyproject.toml: the installed metadata is as old as the last install."""
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    extras = project["optional-dependencies"]
    return [
        *project["dependencies"],
        *(f'{spec}; extra == "{extra}"' for extra, specs in extras.items() for spec in specs),
    ]


def needed_distributions(extras: set[str]) -> set[str]:
    """Canonical names of the distributions that installing ``PROJECT[extras]`` brings in."""
    needed: set[str] = set()
    pending = [(PROJECT, frozenset(extras))]
    seen = set()
    while pending:
        name, wanted = pending.pop()
        if (name, wanted) in seen:
            continue
        seen.add((name, wanted))
        needed.add(name)
        try:
            requirements = project_requirements() if name == PROJECT else metadata.distribution(name).requires or []
        except metadata.PackageNotFoundError:
            continue  # not installed here: nothing of it can be imported anyway
        for text in requirements:
            requirement = Requirement(text)
            marker = requirement.marker
            if marker is None or any(marker.evaluate({"extra": extra}) for extra in {"", *wanted}):
                pending.append((canonicalize_name(requirement.name), frozenset(requirement.extras)))
    return needed


class HideOtherDistributions(importlib.abc.MetaPathFinder):
    def __init__(self, extras: set[str]):
        needed = needed_distributions(extras)
        self.extras = ",".join(sorted(extras))
        self.hidden = {
            module
            for module, distributions in metadata.packages_distributions().items()
            if not {canonicalize_name(distribution) for distribution in distributions} & needed
        }

    def find_spec(self, fullname, path=None, target=None):
        top = fullname.partition(".")[0]
        if top in self.hidden:
            raise ModuleNotFoundError(
                f"No module named '{top}' (installed here, but not by the '{self.extras}' extra)", name=top
            )
        return None


def fake_triton_python_backend_utils() -> types.ModuleType:
    """Enough of the stub's module for a ``model.py`` to import; nothing in it runs."""
    module = types.ModuleType("triton_python_backend_utils")
    module.__getattr__ = lambda name: type(name, (), {})  # type: ignore[attr-defined]
    return module


def main() -> None:
    extras = set(sys.argv[1].split(","))
    sys.argv = [sys.argv[0], *sys.argv[2:]]
    sys.meta_path.insert(0, HideOtherDistributions(extras))
    sys.modules["triton_python_backend_utils"] = fake_triton_python_backend_utils()
    if sys.argv[1:2] != ["-c"]:
        sys.exit("usage: only_extra.py EXTRA[,EXTRA] -c CODE")
    exec(compile(sys.argv[2], "<only_extra>", "exec"), {"__name__": "__main__"})


if __name__ == "__main__":
    main()
