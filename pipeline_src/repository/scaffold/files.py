"""A new step's files: which they are and their text (``plan_files``, which writes nothing), then their writing
(``create_step``), refused as a whole when any would overwrite something. docs/configuration.md, when the layout
names it, gets a row per setting of the new step."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from pipeline_src.repository.scaffold.render import LINE_LENGTH, render, template_values
from pipeline_src.repository.scaffold.spec import Layout, ScaffoldError, StepSpec

CONFIGURATION_SECTION = "\n## Configuration\n"  # the docs page's table a row per setting goes into


def plan_configuration_rows(files: dict, layout: Layout, rows: Sequence[str]) -> None:
    """Adds the layout's docs/configuration.md, with ``rows`` appended to its "Configuration" table, to the
    ``files`` to write (where it has one, with that table)."""
    doc = layout.configuration_doc
    if doc is None or not doc.is_file():
        return
    head, found, section = doc.read_text(encoding="utf-8").partition(CONFIGURATION_SECTION)
    table = re.search(r"^\| .*(\n\| .*)*", section, re.MULTILINE)  # the section's first table, to its last row
    if found and table:
        added = "".join(f"\n{row}" for row in rows)
        files[doc] = head + found + section[: table.end()] + added + section[table.end() :]


def plan_files(spec: StepSpec, layout: Layout) -> dict[Path, str]:
    """Every file of the new step and its text (docs/configuration.md too, when the layout names it);
    writes nothing."""
    spec.check()
    values = template_values(spec, layout)
    model_dir = layout.model_dir(spec.name)
    files = {
        model_dir / "config.pbtxt": render("config.pbtxt.tmpl", values),
        model_dir / "1" / "model.py": render("model.py.tmpl", values),
        layout.logic_file(spec.name): render("logic.py.tmpl", values),
        layout.test_file(spec.name): render("test_step.py.tmpl", values),
    }
    for path, text in files.items():
        long = [number for number, line in enumerate(text.splitlines(), 1) if len(line) > LINE_LENGTH]
        if path.suffix == ".py" and long:
            raise ScaffoldError(
                f"{path.name} would have line(s) {long} longer than {LINE_LENGTH} characters: shorten the names"
            )
    text_format.Parse(files[model_dir / "config.pbtxt"], model_config_pb2.ModelConfig())  # raises on a bad name
    scale_row = (  # the example computation's one setting, in docs/configuration.md's "Configuration" table
        f"| {spec.name} | `scale` | 2.0 | the example computation's factor (food11-new-step's: replace it with "
        f"your settings, and this row with theirs) |"
    )
    plan_configuration_rows(files, layout, [scale_row])
    return files


def create_step(spec: StepSpec, layout: Layout) -> list[Path]:
    """Write the new step's files; refuses (ScaffoldError, nothing written) a bad name or one that exists."""
    files = plan_files(spec, layout)
    if layout.source_dir is not None and not (layout.source_dir / "__init__.py").is_file():
        raise ScaffoldError(
            f"{layout.source_dir} is not a package directory (no __init__.py), so "
            f"{layout.module(spec.name)} would not import"
        )
    return write_new_files(spec.name, files, layout)


def write_new_files(name: str, files: Mapping[Path, str | bytes], layout: Layout) -> list[Path]:
    """Writes step ``name``'s ``files``; refuses (ScaffoldError, nothing written) where its model folder or any of
    them but the docs page exists already, or the repository does not."""
    model_dir = layout.model_dir(name)
    if model_dir.exists():
        raise ScaffoldError(f"model {name!r} exists already: {model_dir}")
    taken = [path for path in files if path.exists() and path != layout.configuration_doc]
    if taken:
        raise ScaffoldError(f"step {name!r}: {', '.join(map(str, taken))} exist(s) already")
    if not layout.repository.is_dir():
        raise ScaffoldError(f"no model repository at {layout.repository}")
    for path, content in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))  # a graph is bytes
    return list(files)
