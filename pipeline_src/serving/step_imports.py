"""Which source files a Python step imports, read from its ``model.py`` without importing anything: its imports,
followed transitively through the watched packages (``pipeline_src``, as its editable install maps it) and its own
folders (the stub appends them to ``sys.path``); third-party packages are not followed. What the reload watcher
(``pipeline_src.serving.reload``) watches beside the model's folder."""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

Signature = tuple[int, int]  # (mtime_ns, size): a file changed when either did


def signature(path: Path) -> Signature | None:
    try:
        status = path.stat()
    except OSError:  # removed between listing and looking
        return None
    return status.st_mtime_ns, status.st_size


def version_folders(folder: Path) -> list[Path]:
    return [path for path in sorted(folder.iterdir()) if path.is_dir() and path.name.isdigit()]


def module_files(folder: Path, dotted: str) -> list[Path] | None:
    """The files importing ``dotted`` from ``folder`` runs (each package's __init__.py, then the module);
    None if it is not there."""
    files: list[Path] = []
    parts = dotted.split(".") if dotted else []
    for index, part in enumerate(parts):
        package = folder / part
        if (package / "__init__.py").is_file():
            files.append(package / "__init__.py")
        elif index == len(parts) - 1 and (folder / f"{part}.py").is_file():
            return [*files, folder / f"{part}.py"]
        elif not package.is_dir():  # a folder without __init__.py is a namespace package
            return None
        folder = package
    return files


def imported_names(source: str) -> Iterator[tuple[int, list[str]]]:
    """(relative level, candidate module names, most specific first) for every import, late ones included:
    ``from a import b`` imports the module ``a.b`` if there is one, else a name of ``a``."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from ((0, [alias.name]) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            yield from ((node.level, [f"{base}.{alias.name}".lstrip("."), base]) for alias in node.names)


@dataclass
class ImportTracer:
    """The source files a Python step's ``model.py`` imports, transitively; parses each file once per version."""

    packages: Mapping[str, Path]
    _parsed: dict[Path, tuple[Signature | None, list[tuple[int, list[str]]]]] = field(default_factory=dict)

    def step_sources(self, model_folder: Path) -> set[Path]:
        versions = version_folders(model_folder)
        roots = [*versions, model_folder]  # appended to sys.path by the stub, after the installed packages
        queue = [version / "model.py" for version in versions if (version / "model.py").is_file()]
        found: set[Path] = set()
        while queue:
            path = queue.pop()
            if path not in found:
                found.add(path)
                for level, names in self._imports(path):
                    queue.extend(self._resolve(level, names, path, roots))
        return found

    def _imports(self, path: Path) -> list[tuple[int, list[str]]]:
        current = signature(path)
        cached = self._parsed.get(path)
        if cached is None or cached[0] != current:
            try:
                cached = (current, list(imported_names(path.read_text(errors="replace"))))
            except (OSError, SyntaxError, ValueError):  # mid-edit: its imports are read again once it parses
                cached = (current, [])
            self._parsed[path] = cached
        return cached[1]

    def _resolve(self, level: int, names: list[str], importer: Path, roots: list[Path]) -> list[Path]:
        for name in names:
            files = module_files(importer.parents[level - 1], name) if level else self._locate(name, roots)
            if files is not None:
                return files
        return []

    def _locate(self, name: str, roots: list[Path]) -> list[Path] | None:
        top, _, rest = name.partition(".")
        if top in self.packages:
            below = module_files(self.packages[top], rest)
            init = self.packages[top] / "__init__.py"
            return None if below is None else [*([init] if init.is_file() else []), *below]
        for root in roots:
            if (files := module_files(root, name)) is not None:
                return files
        return None  # a third-party or standard module: not watched
