"""Where every benchmark's figures go, and what they say of their origin.

``write_results`` writes ``name.json`` and ``name.md`` under benchmarks/results/, both headed by the same
provenance: the machine, the commit, whether the tree was clean, the date and the command. A figure is
worth quoting only if it names the code that made it, so a benchmark refuses to start on a tree with
uncommitted changes (``require_clean_tree``, at its start, before minutes are spent) unless given
``--allow-dirty``, and then its results say so at the top. Files under benchmarks/results/ are the
benchmarks' outputs, not code: they never make a tree dirty. No absolute path of this machine is
written: the command's and any path inside the checkout are relative to its root.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pipeline_src import PROJECT_ROOT
from pipeline_src.profiling.report import machine_description

RESULTS_RELATIVE = "benchmarks/results"
RESULTS_DIR = PROJECT_ROOT / RESULTS_RELATIVE
# A copy of the working tree sent elsewhere (the device machine's) is told its commit by whoever sent it;
# ``abc1234+dirty`` for a tree with uncommitted changes. Where set, it wins over the copy's own .git.
COMMIT_VARIABLE = "FOOD11_COMMIT"
PROVENANCE_KEYS = ("machine", "commit", "clean", "dirty", "uncommitted", "date", "command")
NAMED_CHANGES = 5  # in the markdown's warning; the JSON lists them all


@dataclass(frozen=True)
class Provenance:
    machine: str
    commit: str  # short hash, or "unknown"
    uncommitted: tuple[str, ...]  # paths changed or added outside benchmarks/results/
    date: str  # ISO
    command: str
    unknown_tree: str = ""  # why git could not say what the tree was: such a tree counts as dirty

    @property
    def clean(self) -> bool:
        return not (self.uncommitted or self.unknown_tree)

    def dirt(self) -> str:
        """What makes the tree dirty, in words ("" for a clean one)."""
        if self.unknown_tree:
            return self.unknown_tree
        if not self.uncommitted:
            return ""
        named = ", ".join(self.uncommitted[:NAMED_CHANGES])
        more = len(self.uncommitted) - NAMED_CHANGES
        return f"uncommitted changes to {named}" + (f" and {more} more" if more > 0 else "")

    def as_dict(self) -> dict:
        header = {"machine": self.machine, "commit": self.commit, "clean": self.clean}
        if not self.clean:
            header |= {"dirty": self.dirt(), "uncommitted": list(self.uncommitted)}
        return {**header, "date": self.date, "command": self.command}

    def markdown(self) -> str:
        measured = f"Measured at commit {self.commit}, {self.date}, on {self.machine}. Command: `{self.command}`."
        if self.clean:
            return measured
        return f"**DIRTY TREE: {self.dirt()}; these figures do not name a commit.**\n\n{measured}"


def _git(root: Path, *args: str) -> subprocess.CompletedProcess | None:
    try:  # cwd: a benchmark may have changed its own working directory
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
    except OSError:  # no git on this machine
        return None


def is_checkout(root: Path = PROJECT_ROOT) -> bool:
    """Whether ``root`` is the top of a git work tree (not a folder inside some other one)."""
    done = _git(root, "rev-parse", "--show-toplevel")
    return done is not None and done.returncode == 0 and Path(done.stdout.strip()).resolve() == root.resolve()


def uncommitted_changes(root: Path = PROJECT_ROOT) -> list[str]:
    """Tracked files changed (staged or not) and untracked files git does not ignore, outside
    benchmarks/results/, relative to ``root``."""
    done = _git(
        root, "status", "--porcelain", "-z", "--untracked-files=normal", "--", ".", f":(exclude){RESULTS_RELATIVE}"
    )
    if done is None or done.returncode != 0:
        raise RuntimeError(f"git status failed in {root}: {done.stderr.strip() if done else 'no git'}")
    entries, paths = iter(done.stdout.split("\0")), []
    for entry in entries:
        if entry:
            paths.append(entry[3:])  # "XY path"
            if {"R", "C"} & set(entry[:2]):
                next(entries, None)  # a rename's or copy's origin follows
    return paths


def _tree_state(root: Path) -> tuple[str, tuple[str, ...], str]:
    """(commit, uncommitted paths, why the tree's state is unknown). FOOD11_COMMIT, where set, wins: a copy of
    the working tree sent to another machine may carry a .git whose HEAD is not the tree it holds."""
    told = os.environ.get(COMMIT_VARIABLE, "").strip()
    if told:
        commit, dirty = told.removesuffix("+dirty"), told.endswith("+dirty")
        return commit, (), f"{COMMIT_VARIABLE}={told} (a tree with uncommitted changes)" if dirty else ""
    if is_checkout(root):
        head = _git(root, "rev-parse", "--short", "HEAD")
        committed = head is not None and head.returncode == 0
        commit = head.stdout.strip() if head is not None and committed else "unknown"
        return commit, tuple(uncommitted_changes(root)), "" if committed else "no commit yet"
    return "unknown", (), f"not a git checkout, and {COMMIT_VARIABLE} unset"


def portable_path(path: str | Path, root: Path = PROJECT_ROOT) -> str:
    """A path as results record it: relative to the checkout's root; one outside the checkout only by its
    last two parts (this machine's own folders mean nothing elsewhere)."""
    path = Path(path)
    if not path.is_absolute():
        return str(path)
    for candidate in (path, path.resolve()):
        if candidate.is_relative_to(root.resolve()):
            return str(candidate.relative_to(root.resolve()))
    return str(Path("...", *path.parts[1:][-2:]))


def command_line(argv: Sequence[str] | None = None, root: Path = PROJECT_ROOT) -> str:
    """``python -m benchmarks.x --flag value`` for ``argv`` (default ``sys.argv``), absolute paths made portable."""
    if argv is None:  # __main__'s file is absolute, whatever the working directory has become since
        argv = [getattr(sys.modules["__main__"], "__file__", sys.argv[0]), *sys.argv[1:]]
    script = portable_path(Path(argv[0]).resolve(), root) if argv and argv[0] else ""
    run = [script] if script else []
    if script.endswith(".py") and (root / script).parent.joinpath("__init__.py").is_file():
        run = ["-m", script.removesuffix(".py").replace("/", ".")]  # a module of a package runs as such

    def portable(argument: str) -> str:
        option, equals, value = argument.partition("=") if argument.startswith("-") else ("", "", argument)
        return option + equals + portable_path(value, root) if value.startswith("/") else argument

    return shlex.join(["python", *run, *map(portable, argv[1:])])


def collect_provenance(root: Path = PROJECT_ROOT, argv: Sequence[str] | None = None) -> Provenance:
    commit, uncommitted, unknown_tree = _tree_state(root)
    return Provenance(
        machine_description(),
        commit,
        uncommitted,
        datetime.date.today().isoformat(),
        command_line(argv, root),
        unknown_tree,
    )


class DirtyTree(SystemExit):
    """A benchmark's refusal to measure code no commit names (exit status 1, the reason on stderr)."""


def require_clean_tree(allow_dirty: bool, root: Path = PROJECT_ROOT) -> Provenance:
    """At a benchmark's start: refuse a dirty tree unless ``allow_dirty`` (then say so and go on)."""
    provenance = collect_provenance(root)
    if not provenance.clean:
        if not allow_dirty:
            raise DirtyTree(
                f"refusing to measure: {provenance.dirt()}. Figures must name a commit: commit "
                "first, or pass --allow-dirty (make: in the target's *_ARGS) to mark them as dirty."
            )
        print(f"warning: {provenance.dirt()}; the results will say so", file=sys.stderr, flush=True)
    return provenance


def benchmark_cli(doc: str | None, name: str, repository: bool = False) -> argparse.ArgumentParser:
    """A benchmark's command line: its docstring as the description, ``--name`` (its results' file names) and,
    for one that measures a built repository, ``--repository``."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--name", default=name, help="results file names, without extension")
    if repository:
        default = PROJECT_ROOT / "model_repository"
        parser.add_argument(
            "--repository", type=Path, default=default, help="a built repository (make models); default: %(default)s"
        )
    return parser


def parse_benchmark_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> argparse.Namespace:
    """A benchmark's arguments, ``--allow-dirty`` among them; refused at once on a dirty tree without it."""
    parser.add_argument(
        "--allow-dirty",
        action="store_true",
        help="measure even with uncommitted changes outside benchmarks/results/; the results "
        "then say at the top that they name no commit",
    )
    args = parser.parse_args(argv)
    require_clean_tree(args.allow_dirty)
    return args


def _without_root(text: str, root: Path) -> str:
    """Any path inside the checkout written relative to its root (a traceback, a path in a figure's label)."""
    pattern = re.escape(str(root.resolve())) + r"(?:/|(?![\w-]|\.\w))"  # not a longer name, as /repo2
    return re.sub(pattern, lambda match: "" if match.group().endswith("/") else ".", text)


def headed(markdown: str, provenance: Provenance) -> str:
    """The provenance right under the document's title (at the top when it has none)."""
    title, _, body = markdown.partition("\n")
    if title.startswith("# "):
        return f"{title}\n\n{provenance.markdown()}\n\n" + body.lstrip("\n")
    return f"{provenance.markdown()}\n\n{markdown}"


def write_results(
    name: str,
    result: dict,
    markdown: str,
    *,
    directory: Path = RESULTS_DIR,
    provenance: Provenance | None = None,
    root: Path = PROJECT_ROOT,
) -> Path:
    """``name.json`` (the provenance's keys, then ``result``'s) and ``name.md`` (``markdown`` with the
    provenance under its title) in ``directory``; returns the markdown's path. ``provenance``: default,
    the tree as it is now (a tree changed during the run is marked dirty)."""
    provenance = provenance or collect_provenance(root)
    if clashing := set(PROVENANCE_KEYS) & result.keys():
        raise ValueError(f"{sorted(clashing)}: the writer records these; leave them out of the result")
    directory.mkdir(parents=True, exist_ok=True)
    document = {**provenance.as_dict(), **result}
    (directory / f"{name}.json").write_text(_without_root(json.dumps(document, indent=2) + "\n", root))
    markdown_path = directory / f"{name}.md"
    markdown_path.write_text(_without_root(headed(markdown, provenance), root))
    return markdown_path
