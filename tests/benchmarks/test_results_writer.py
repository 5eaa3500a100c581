"""The benchmarks' one writer names the commit its figures came from, refuses or marks loudly a tree with
uncommitted changes (results files aside), records no absolute path; the one percentile helper and the one
memory sampler."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from benchmarks.lib.memory import MemorySampler
from benchmarks.lib.percentiles import percentile, percentiles_ms
from benchmarks.lib.results import (
    DirtyTree,
    collect_provenance,
    command_line,
    require_clean_tree,
    write_results,
)

# who commits in the throwaway repositories, whatever this machine's git configuration says
IDENTITY = ("-c", "user.name=test", "-c", "user.email=test@example.com", "-c", "commit.gpgsign=false")


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def checkout(tmp_path) -> Path:
    """A git repository with one committed file and a committed results file."""
    root = tmp_path / "checkout"
    (root / "benchmarks" / "results").mkdir(parents=True)
    (root / "code.py").write_text("print('measured')\n")
    (root / "benchmarks" / "results" / "old.md").write_text("# old figures\n")
    git(root, "init", "--quiet")
    git(root, "add", ".")
    git(root, *IDENTITY, "commit", "--quiet", "-m", "start")
    return root


def write(root: Path, markdown: str = "# Figures\n\nsome text\n") -> tuple[dict, str]:
    path = write_results("figures", {"rows": [1, 2]}, markdown, directory=root / "benchmarks" / "results", root=root)
    return json.loads(path.with_suffix(".json").read_text()), path.read_text()


def test_a_clean_tree_names_its_commit_in_the_json_and_under_the_markdowns_title(checkout):
    require_clean_tree(allow_dirty=False, root=checkout)
    document, markdown = write(checkout)
    commit = git(checkout, "rev-parse", "--short", "HEAD")
    assert (document["commit"], document["clean"], document["rows"]) == (commit, True, [1, 2])
    assert document["machine"] and document["date"] and document["command"].startswith("python")
    assert "dirty" not in document and "uncommitted" not in document
    title, blank, provenance, *rest = markdown.splitlines()
    assert (title, blank) == ("# Figures", "")
    assert provenance.startswith(f"Measured at commit {commit}, {document['date']}, on {document['machine']}.")
    assert "DIRTY" not in markdown and "some text" in rest


def test_a_changed_tracked_file_is_refused_and_when_allowed_marked_loudly(checkout):
    (checkout / "code.py").write_text("print('changed')\n")
    with pytest.raises(DirtyTree, match=r"code\.py"):
        require_clean_tree(allow_dirty=False, root=checkout)
    assert not require_clean_tree(allow_dirty=True, root=checkout).clean
    document, markdown = write(checkout)
    assert (document["clean"], document["uncommitted"]) == (False, ["code.py"])
    assert "**DIRTY TREE: uncommitted changes to code.py; these figures do not name a commit.**" in markdown


def test_changes_under_benchmarks_results_alone_leave_the_tree_clean(checkout):
    (checkout / "benchmarks" / "results" / "old.md").write_text("# new figures\n")
    (checkout / "benchmarks" / "results" / "more.json").write_text("{}\n")
    require_clean_tree(allow_dirty=False, root=checkout)
    document, _ = write(checkout)  # its own output is under benchmarks/results/ too
    assert document["clean"] and collect_provenance(checkout).clean


def test_an_untracked_file_outside_the_results_makes_the_tree_dirty(checkout):
    (checkout / "scratch.py").write_text("x = 1\n")
    with pytest.raises(DirtyTree, match=r"scratch\.py"):
        require_clean_tree(allow_dirty=False, root=checkout)


def test_ignored_files_do_not_make_the_tree_dirty(checkout):
    (checkout / ".gitignore").write_text("build/\n")
    git(checkout, "add", ".gitignore")
    git(checkout, *IDENTITY, "commit", "--quiet", "-m", "ignore")
    (checkout / "build").mkdir()
    (checkout / "build" / "scratch.bin").write_bytes(b"\0")
    assert collect_provenance(checkout).clean


def test_without_git_the_commit_comes_from_food11_commit(tmp_path, monkeypatch):
    monkeypatch.setenv("FOOD11_COMMIT", "abc1234")
    provenance = collect_provenance(tmp_path)
    assert (provenance.commit, provenance.clean) == ("abc1234", True)
    monkeypatch.setenv("FOOD11_COMMIT", "abc1234+dirty")
    with pytest.raises(DirtyTree):
        require_clean_tree(allow_dirty=False, root=tmp_path)
    monkeypatch.delenv("FOOD11_COMMIT")
    assert (collect_provenance(tmp_path).commit, collect_provenance(tmp_path).clean) == ("unknown", False)


def test_no_absolute_path_of_the_checkout_or_outside_it_is_recorded(checkout):
    (checkout / "benchmarks").mkdir(exist_ok=True)
    (checkout / "benchmarks" / "__init__.py").touch()  # a package's module is recorded as run: python -m
    assert command_line([str(checkout / "scripts" / "x.py"), "--fast"], checkout) == "python scripts/x.py --fast"
    argv = [
        str(checkout / "benchmarks" / "x.py"),
        "--repository",
        str(checkout / "model_repository"),
        f"--python={checkout.parent / 'elsewhere' / 'venv' / 'bin'}",
        "--name",
        "run",
    ]
    assert command_line(argv, checkout) == (
        "python -m benchmarks.x --repository model_repository --python=.../venv/bin --name run"
    )
    path = write_results(
        "figures",
        {"repository": str(checkout / "model_repository")},
        f"# Figures\n\nbuilt in {checkout}/build\n",
        directory=checkout / "benchmarks" / "results",
        root=checkout,
    )
    for written in (path, path.with_suffix(".json")):
        assert str(checkout) not in written.read_text()
    assert "built in build" in path.read_text()


def test_the_result_may_not_carry_the_provenances_own_keys(checkout):
    with pytest.raises(ValueError, match="commit"):
        write_results("figures", {"commit": "mine"}, "# Figures\n", directory=checkout, root=checkout)


def test_percentiles_are_linear_between_the_closest_ranks():
    values = [1.0, 2.0, 3.0, 4.0, 10.0]
    assert percentile(values, 50) == 3.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5  # a median of an even count: the middle two's mean
    assert percentile(values, 95) == pytest.approx(4.0 + 0.8 * 6.0)  # rank 3.8 of 0..4: between 4 and 10
    assert percentiles_ms(values) == pytest.approx({"p50_ms": 3.0, "p95_ms": 8.8, "p99_ms": 9.76})
    assert list(percentiles_ms(values, (50, 95), prefix="latency_")) == ["latency_p50_ms", "latency_p95_ms"]


def test_the_memory_sampler_samples_on_entry_and_exit_and_reports_growth():
    with MemorySampler([os.getpid()], every_s=60.0) as sampler:
        pass
    first, last = sampler.samples
    assert first["processes"] >= 1 and first["pss_mib"] > 0 and last["t_s"] >= first["t_s"] == 0.0
    growth = sampler.growth()
    assert growth["pss_peak_mib"] == max(first["pss_mib"], last["pss_mib"])
    assert growth["growth_last_over_first"] == pytest.approx(last["pss_mib"] / first["pss_mib"] - 1)
