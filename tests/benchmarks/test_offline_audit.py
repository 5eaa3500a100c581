"""benchmarks/offline_audit.py reads OSV ranges as OSV defines them, and torch's local versions as such."""

from pathlib import Path

import pytest
from packaging.version import Version

from benchmarks import offline_audit

ADVISORIES = {
    "pillow.yaml": """
id: TEST-1
summary: two ranges and a list
affected:
  - package: {ecosystem: PyPI, name: Pillow}
    ranges:
      - type: ECOSYSTEM
        events: [{introduced: "10.3.0"}, {fixed: "12.1.1"}, {introduced: "12.2.0"}, {last_affected: "12.2.5"}]
    versions: ["9.0.0"]
""",
    "torch.yaml": """
id: TEST-2
affected:
  - package: {ecosystem: PyPI, name: torch}
    ranges:
      - type: ECOSYSTEM
        events: [{introduced: "0"}, {fixed: "2.6.0-cu124"}]
""",
    "withdrawn.yaml": """
id: TEST-3
withdrawn: "2026-01-01T00:00:00Z"
affected:
  - package: {ecosystem: PyPI, name: numpy}
    ranges: [{type: ECOSYSTEM, events: [{introduced: "0"}]}]
""",
}


@pytest.fixture
def database(tmp_path: Path):
    for name, text in ADVISORIES.items():
        (tmp_path / name).write_text(text)
    return offline_audit.load_database(tmp_path)


@pytest.mark.parametrize(
    ("name", "version", "affected"),
    [
        ("pillow", "9.0.0", True),  # listed
        ("pillow", "10.2.9", False),
        ("pillow", "10.3.0", True),
        ("pillow", "12.1.1", False),  # fixed
        ("pillow", "12.2.5", True),  # last_affected is affected
        ("pillow", "12.2.6", False),
        ("torch", "2.5.1", True),
        ("torch", "2.6.0", False),  # "2.6.0-cu124" is 2.6.0 with a local part, not a pre-release
        ("torch", "2.14.1", False),
    ],
)
def test_ranges_lists_and_local_versions(database, name, version, affected):
    assert any(offline_audit.affects(record, name, Version(version)) for record in database[name]) is affected


def test_withdrawn_advisories_do_not_count(database):
    assert "numpy" not in database


def test_the_fixed_versions_are_reported(database):
    assert offline_audit.fixed_versions(database["pillow"][0], "pillow") == ["12.1.1"]
