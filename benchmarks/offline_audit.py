"""Audit the installed and pinned packages against a local copy of an OSV advisory database, offline:
``python -m benchmarks.offline_audit --db DIR`` (``make audit-offline AUDIT_DB=DIR``).

``make audit`` (pip-audit) needs PyPI's or OSV's web service; where neither is reachable, a checkout of an
OSV database in YAML (such as PyPA's advisory-database, ``vulns/<package>/*.yaml``) is enough. Audited: every
distribution of this virtualenv (``pip freeze --all``, pip and setuptools included) and every exact pin in
pyproject.toml (the images' ``onnxruntime-gpu`` too, which is not installed here). OSV ranges are read as
PEP 440 versions; a version such as torch's ``2.6.0-cu124`` is read as a local version (``2.6.0+cu124``) and
compared without its local part. Exit 1 if any advisory affects a version.

Figures to ``benchmarks/results/offline_audit.{json,md}``, with the database's commit when it is a git checkout.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections import defaultdict
from functools import cache
from importlib import metadata
from pathlib import Path

import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from benchmarks.lib.results import parse_benchmark_args, write_results
from pipeline_src import PROJECT_ROOT

Advisory = dict


@cache
def parse_version(text: str) -> Version | None:
    """PEP 440, local part dropped; ``X-suffix`` that is not PEP 440 is read as ``X+suffix``."""
    for candidate in (text.strip(), text.strip().replace("-", "+", 1)):
        try:
            return Version(Version(candidate).public)
        except InvalidVersion:
            continue
    return None


def load_database(root: Path) -> dict[str, list[Advisory]]:
    """Every advisory of ``root``, by each PyPI package it affects (withdrawn ones left out)."""
    index: dict[str, list[Advisory]] = defaultdict(list)
    for path in sorted(root.rglob("*.yaml")):
        record = yaml.safe_load(path.read_text(encoding="utf-8"))
        if not isinstance(record, dict) or record.get("withdrawn"):
            continue
        for name in {canonicalize_name(affected["package"]["name"]) for affected in _pypi_affected(record)}:
            index[name].append(record)
    return index


def _pypi_affected(record: Advisory, name: str | None = None) -> list[dict]:
    return [
        affected
        for affected in record.get("affected") or []
        if (affected.get("package") or {}).get("ecosystem", "PyPI") == "PyPI"
        and (name is None or canonicalize_name(affected["package"]["name"]) == name)
    ]


def _in_range(events: list[dict], version: Version) -> bool:
    """OSV's ECOSYSTEM range: affected from an ``introduced`` until a ``fixed`` (or past ``last_affected``)."""
    points = sorted(
        (parsed, kind)
        for event in events
        for kind, value in event.items()
        if kind in ("introduced", "fixed", "last_affected") and (parsed := parse_version(str(value))) is not None
    )
    affected = False
    for point, kind in points:
        if kind == "introduced" and version >= point:
            affected = True
        elif (kind == "fixed" and version >= point) or (kind == "last_affected" and version > point):
            affected = False
    return affected


def affects(record: Advisory, name: str, version: Version) -> bool:
    for affected in _pypi_affected(record, name):
        if any(parse_version(str(listed)) == version for listed in affected.get("versions") or []):
            return True
        ranges = [r for r in affected.get("ranges") or [] if r.get("type") in ("ECOSYSTEM", "SEMVER")]
        if any(_in_range(r.get("events") or [], version) for r in ranges):
            return True
    return False


def fixed_versions(record: Advisory, name: str) -> list[str]:
    return sorted(
        {
            str(event["fixed"])
            for affected in _pypi_affected(record, name)
            for r in affected.get("ranges") or []
            for event in r.get("events") or []
            if "fixed" in event
        }
    )


def installed() -> dict[str, str]:
    freeze = [sys.executable, "-m", "pip", "freeze", "--all", "--exclude-editable"]
    frozen = subprocess.run(freeze, capture_output=True, text=True, check=True).stdout
    pins = (re.match(r"^([A-Za-z0-9._-]+)==(\S+)", line) for line in frozen.splitlines())
    return {canonicalize_name(match[1]): match[2] for match in pins if match}


def pinned(pyproject: Path) -> dict[str, str]:
    """Every ``name==version`` the project pins: its dependencies and every extra's (from the installed
    project's metadata), and the build system's (from pyproject.toml)."""
    build_system = re.search(r"^requires = \[(.*)\]", pyproject.read_text(encoding="utf-8"), re.MULTILINE)
    texts = [
        *(metadata.distribution("food11-pipeline").requires or []),
        *re.findall(r'"([^"]+)"', build_system[1] if build_system else ""),
    ]
    found: dict[str, str] = {}
    for text in texts:
        requirement = Requirement(text)
        exact = [spec.version for spec in requirement.specifier if spec.operator == "=="]
        if exact:
            found[canonicalize_name(requirement.name)] = exact[0]
    return found


def database_commit(root: Path) -> str:
    done = subprocess.run(["git", "-C", str(root), "log", "-1", "--format=%h (%cs)"], capture_output=True, text=True)
    return done.stdout.strip() or "not a git checkout"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", type=Path, required=True, help="a local OSV database in YAML (searched recursively)")
    args = parse_benchmark_args(parser, argv)
    database = load_database(args.db)
    packages = installed() | pinned(PROJECT_ROOT / "pyproject.toml")
    findings = []
    for name, text in sorted(packages.items()):
        version = parse_version(text)
        if version is None:
            continue
        for record in database.get(name, []):
            if affects(record, name, version):
                found = {"package": name, "version": text, "id": record["id"], "aliases": record.get("aliases") or []}
                summary = (record.get("summary") or record.get("details") or "").strip()[:200]
                findings.append(found | {"fixed": fixed_versions(record, name), "summary": summary})
    commit = database_commit(args.db)
    rows = "\n".join(
        f"| {f['package']} {f['version']} | {f['id']} {' '.join(f['aliases'])} | {', '.join(f['fixed']) or 'none'} "
        f"| {f['summary']} |"
        for f in findings
    )
    markdown = (
        "# Offline advisory audit\n\n"
        f"{len(packages)} packages (this virtualenv's `pip freeze --all` and every exact pin of pyproject.toml) "
        f"against {sum(len(records) for records in database.values())} advisories of {len(database)} packages "
        f"in `{args.db.name}`, commit {commit}. A package the database has no record of counts as clean: a clean "
        "result is only as recent as the database.\n\n"
        + (
            f"**{len(findings)} advisories affect a version here:**\n\n| package | advisory | fixed in | summary |\n"
            f"| --- | --- | --- | --- |\n{rows}\n"
            if findings
            else "**No advisory affects any of these versions.**\n"
        )
        + "\n"
        + ", ".join(f"{name} {version}" for name, version in sorted(packages.items()))
        + "\n"
    )
    result = {"database_commit": commit, "packages": packages, "findings": findings}
    print(f"{len(findings)} advisories; wrote {write_results('offline_audit', result, markdown)}")
    sys.exit(1 if findings else 0)


if __name__ == "__main__":
    main()
