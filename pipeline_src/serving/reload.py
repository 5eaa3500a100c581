"""Reload a step while Triton serves, when its files or the project code it imports change (``make serve``).

Why a watcher of our own, and what it refuses: docs/EXTENDING.md, "Editing a step while it serves". Triton 2.51
reloads a model on a load request only if a file in its folder is newer than at its last load, so for a changed
model this sets the modification time of its version folders to now (no file is written) before asking Triton to
load it: a full reload, in new stub processes, each a fresh interpreter. A change the validator rejects never
reaches Triton; where Triton still fails a load, every model that fell is loaded back with the config it served
with. Which code a step imports: ``pipeline_src.serving.step_imports``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from pipeline_src import PROJECT_ROOT
from pipeline_src.serving.repository_api import TritonRepositoryApi
from pipeline_src.serving.step_imports import ImportTracer, Signature, signature, version_folders

DEFAULT_PACKAGES = {"pipeline_src": PROJECT_ROOT / "pipeline_src"}  # name -> folder, as its editable install maps it
CONFIG = "config.pbtxt"


def ignored(name: str) -> bool:
    """Bytecode the stubs write and editors' swap and backup files: not edits."""
    return name == "__pycache__" or name.startswith(".") or name.endswith(("~", ".pyc", ".swp"))


def model_folders(repository: Path) -> dict[str, Path]:
    return {path.parent.name: path.parent for path in sorted(repository.glob(f"*/{CONFIG}"))}


def folder_files(folder: Path) -> Iterator[Path]:
    for parent, folders, files in os.walk(folder):
        folders[:] = [name for name in folders if not ignored(name)]
        yield from (Path(parent) / name for name in files if not ignored(name))


def is_ensemble(folder: Path) -> bool:
    try:
        return re.search(r'^\s*platform:\s*"ensemble"', (folder / CONFIG).read_text(), re.MULTILINE) is not None
    except OSError:
        return False


# --- what changed, once it settled ----------------------------------------------------------------------


@dataclass(frozen=True)
class Scan:
    snapshot: dict[Path, Signature]
    owners: dict[Path, set[str]]  # each watched file -> the models it belongs to or that import it


class ChangeWatch:
    """Which models' files changed, reported once a change has settled (two looks a poll apart agree), so that
    a file still being written is not loaded half-way."""

    def __init__(self, repository: Path, packages: Mapping[str, Path] = DEFAULT_PACKAGES):
        self.repository = Path(repository).resolve()
        self.tracer = ImportTracer(packages)
        self.roots = [self.repository, *(folder.parent for folder in packages.values())]  # what files are named from
        self._settled = self.scan()
        self._latest = self._settled.snapshot

    def scan(self) -> Scan:
        owners: dict[Path, set[str]] = {}
        for name, folder in model_folders(self.repository).items():
            for path in [*folder_files(folder), *self.tracer.step_sources(folder)]:
                owners.setdefault(path, set()).add(name)
        snapshot = {path: found for path in owners if (found := signature(path)) is not None}
        return Scan(snapshot, owners)

    def relative(self, path: Path) -> str:
        """``path`` from the repository, or from the folder above its package: how log lines and revisions name it."""
        root = next((root for root in self.roots if path.is_relative_to(root)), None)
        return str(path) if root is None else path.relative_to(root).as_posix()

    @property
    def watched_files(self) -> int:
        return len(self._settled.snapshot)

    def settled_changes(self) -> dict[str, list[Path]]:
        """Each model with the files that changed since the last report; empty while nothing did or still does."""
        scan = self.scan()
        if scan.snapshot != self._latest:
            self._latest = scan.snapshot
            return {}
        before, self._settled = self._settled, scan
        # A source file newly imported is no change of its own: the edit that imports it is.
        added = {path for path in scan.snapshot.keys() - before.snapshot.keys() if path.is_relative_to(self.repository)}
        kept = before.snapshot.keys() & scan.snapshot.keys()
        changed = {path for path in kept if before.snapshot[path] != scan.snapshot[path]}
        changed |= added | (before.snapshot.keys() - scan.snapshot.keys())
        affected: dict[str, list[Path]] = {}
        for path in sorted(changed):
            for model in sorted(before.owners.get(path, set()) | scan.owners.get(path, set())):
                affected.setdefault(model, []).append(path)
        return affected


def needs_forced_reload(folder: Path, changed: list[Path]) -> bool:
    """Triton decides alone for its config: an instance count changed updates in place, anything else reloads."""
    return any(path != folder / CONFIG for path in changed)


def mark_modified(folder: Path) -> None:
    """The version folders' modification time to now: Triton then sees the model as changed and reloads it
    fully, whatever the file that changed (its own check compares these times with the last load's)."""
    for version in version_folders(folder):
        os.utime(version)


def forget_bytecode(changed: list[Path]) -> None:
    """Python trusts a module's cached bytecode while the source's size and mtime, in whole seconds, match: an
    edit of the same size within the second of the last compile would load the old code. The stubs run this
    Python (TritonServer's steps_python is of the same version), so this is the cache they read."""
    for path in changed:
        if path.suffix == ".py":
            Path(importlib.util.cache_from_source(str(path))).unlink(missing_ok=True)


# --- before Triton: the validator -------------------------------------------------------------------------

VALIDATE_TIMEOUT_S = 300


def validator_errors(repository: Path) -> list[str]:
    """food11-validate's errors for ``repository``, one line each, from a fresh interpreter: the code it checks (a
    step's settings and declared tensors) may be what just changed, and this process holds its old modules."""
    command = [sys.executable, "-m", "pipeline_src.repository.validate", str(repository)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=VALIDATE_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [f"food11-validate did not run: {exc}"]
    errors = [line.removeprefix("ERROR ") for line in done.stdout.splitlines() if line.startswith("ERROR ")]
    if done.returncode not in (0, 1) or (done.returncode == 1 and not errors):
        last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        return [f"food11-validate failed: {last}"]
    return errors


# --- asking Triton ---------------------------------------------------------------------------------------


class StepReloader:
    """One ``poll()`` a second: reloads the models whose files changed, one log line each. ``validate``: the
    repository's errors (``validator_errors``), asked before each reload; None: no check (serve.py's
    --skip-validation). The repository had none when serving began (serve.py refuses to start otherwise)."""

    def __init__(
        self,
        repository: Path,
        triton: TritonRepositoryApi,
        packages: Mapping[str, Path] = DEFAULT_PACKAGES,
        report: Callable[[str], None] = print,
        before_reload: Callable[[], object] | None = None,
        after_reload: Callable[[], object] | None = None,
        validate: Callable[[Path], list[str]] | None = validator_errors,
    ):
        self.watch = ChangeWatch(repository, packages)
        self.triton = triton
        self.report = report
        self.before_reload = before_reload  # called before the changed models are asked to reload
        self.after_reload = after_reload  # and once they were
        self.validate = validate
        self.failed_reloads = 0  # Triton 2.51 then waits its whole exit timeout when it stops (serve.py says so)
        self.refused: dict[str, list[Path]] = {}  # changes the validator refused: loaded with the next one it passes
        self.served: set[str] = set()  # every model seen serving: one that fell is loaded at its next change

    def poll(self) -> bool:
        """Whether it asked Triton to reload anything (its stubs then changed)."""
        affected = self.watch.settled_changes()
        if not affected:
            return False
        try:
            loaded = self.triton.ready_models()
        except OSError as unreachable:
            self.report(f"reload: skipped, Triton's index did not answer: {unreachable}")
            return False
        self.served |= loaded
        for model, changed in self.refused.items():
            affected[model] = sorted({*affected.get(model, []), *changed})
        self.refused = {}
        if self.validate is not None and (errors := self.validate(self.watch.repository)):
            self.refuse(affected, errors)
            return False
        folders = model_folders(self.watch.repository)
        if self.before_reload is not None:
            self.before_reload()
        serving = self.serving_configs(loaded)
        # Steps first: an ensemble's new wiring may need its steps' new config.
        for model in sorted(affected, key=lambda name: (name in folders and is_ensemble(folders[name]), name)):
            self.reload(model, affected[model], folders.get(model), loaded)
            self.restore_fallen(serving)
        if self.after_reload is not None:
            self.after_reload()
        return True

    def refuse(self, affected: dict[str, list[Path]], errors: list[str]) -> None:
        more = f" (and {len(errors) - 1} more: food11-validate lists them)" if len(errors) > 1 else ""
        for model, changed in sorted(affected.items()):
            self.report(
                f"reload: {model} ({self.describe(changed)} changed): refused, the loaded version keeps serving: "
                f"{errors[0]}{more}"
            )
        self.refused = affected

    def reload(self, model: str, changed: list[Path], folder: Path | None, loaded: set[str]) -> None:
        why = f"reload: {model} ({self.describe(changed)} changed)"
        fallen = model in self.served - loaded  # it served, then a failed load took it down
        if folder is None or (model not in loaded and not fallen):
            self.report(f"{why}: skipped, not loaded in Triton")
            return
        started = time.monotonic()
        try:
            forget_bytecode(changed)
            if needs_forced_reload(folder, changed):
                mark_modified(folder)
        except OSError as exc:
            self.report(f"{why}: failed, the loaded version keeps serving: {exc}")
            return
        error = self.triton.load(model)
        took = f"{time.monotonic() - started:.1f} s"
        if error is None:
            self.report(f"{why}: ok in {took}{', loaded again' if fallen else ''}")
        else:
            self.failed_reloads += 1
            if self.is_ready(model):
                self.report(f"{why}: failed in {took}, the loaded version keeps serving: {error}")
            else:  # Triton's own reason, where the load's answer may be generic; restore_fallen follows
                self.report(f"{why}: failed in {took}: {self.triton.unavailable_reasons().get(model) or error}")

    def is_ready(self, model: str) -> bool:
        try:
            return model in self.triton.ready_models()
        except OSError:
            return False

    def serving_configs(self, loaded: set[str]) -> dict[str, str]:
        """Each serving model's config as Triton serves it (JSON): what it is loaded back with if a load takes it
        down."""
        configs = {}
        for model in sorted(loaded):
            with contextlib.suppress(OSError, ValueError):  # unloaded meanwhile: nothing to keep
                configs[model] = json.dumps(self.triton.model_config(model))
        return configs

    def restore_fallen(self, serving: dict[str, str]) -> None:
        """Loads back, with the config it served with, every model that was serving and no longer is."""
        try:
            fallen = sorted(serving.keys() - self.triton.ready_models())
        except OSError as unreachable:
            self.report(f"reload: Triton's index did not answer: {unreachable}")
            return
        for model in fallen:
            reason = self.triton.unavailable_reasons().get(model, "no reason in Triton's index")
            if (error := self.triton.load(model, config=serving[model])) is None:
                self.report(f"reload: {model} fell ({reason}): loaded back as it was, it serves")
            else:
                self.report(
                    f"reload: {model} fell ({reason}) and could not be loaded back ({error}): it does not serve "
                    "until the next change of its files loads it"
                )

    def describe(self, changed: list[Path]) -> str:
        shown = [self.watch.relative(path) for path in changed[:2]]
        return ", ".join(shown) + (f" and {len(changed) - 2} more" if len(changed) > 2 else "")
