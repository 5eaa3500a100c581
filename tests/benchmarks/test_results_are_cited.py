"""Every file under benchmarks/results/ is there because something names it: a doc, code, the Makefile, or,
for a run's plots and CSV, its own markdown once that is named. Naming a run's file names its stem too:
`bench.md` keeps `bench.json` and `bench.csv`. A server log stays only where a doc names it. A run nothing cites
is deleted, not kept "just in case": git history has it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from pipeline_src import PROJECT_ROOT

RESULTS = PROJECT_ROOT / "benchmarks" / "results"
CITING_SUFFIXES = {".md", ".py", ".toml", ".pbtxt", ".yaml", ".yml", ".sh", ".txt", ".cfg", ""}  # "": Makefile


def checkout_files() -> list[Path]:
    """Tracked files and untracked ones git does not ignore, outside benchmarks/results/."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")
    paths = [PROJECT_ROOT / name for name in listed if name and not name.startswith("benchmarks/results/")]
    return [path for path in paths if path.suffix in CITING_SUFFIXES and path.is_file()]


def named_in(text: str, names: set[str]) -> set[str]:
    """The results files ``text`` names, by file name or by a file name of the same stem."""
    stems = {Path(name).stem for name in names}
    found_stems = {
        stem for stem in stems if re.search(rf"(?<![\w-]){re.escape(stem)}\.(md|json|csv|png|log)(?!\w)", text)
    }
    return {name for name in names if Path(name).stem in found_stems}


def cited(results: set[str], citing_texts: list[str]) -> set[str]:
    """The results files cited by the texts, and then by the cited results' own markdown, until none is added."""
    found = set().union(*(named_in(text, results) for text in citing_texts))
    pending = set(found)
    while pending:
        name = pending.pop()
        if name.endswith(".md"):
            more = {other for other in named_in((RESULTS / name).read_text(), results) if not other.endswith(".log")}
            more -= found
            found |= more
            pending |= more
    return found


def test_every_results_file_is_cited():
    results = {path.name for path in RESULTS.iterdir() if path.is_file()}
    texts = [path.read_text(errors="replace") for path in checkout_files()]
    assert len(texts) > 100, "the checkout's files were not found"
    uncited = sorted(results - cited(results, texts))
    assert not uncited, f"cite these in a doc (docs/performance.md for a retired benchmark) or delete them: {uncited}"


def test_a_name_is_cited_whole_and_with_its_stem():
    names = {"bench.md", "bench.json", "bench_latency.png", "audit.md", "offline_audit.md"}
    assert named_in("see `benchmarks/results/bench.md`", names) == {"bench.md", "bench.json"}
    assert named_in("(offline_audit.md)", names) == {"offline_audit.md"}  # not audit.md
    assert named_in("bench_latency.png and more", names) == {"bench_latency.png"}
