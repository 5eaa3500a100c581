"""Every link between README.md and the pages in docs/ lands: the file exists and, with an anchor, one of
its headings makes that anchor (GitHub's rule: lower case, punctuation dropped, spaces to hyphens)."""

import re
from pathlib import Path

import pytest

from pipeline_src import PROJECT_ROOT

PAGES = [PROJECT_ROOT / "README.md", *sorted((PROJECT_ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def anchors(page: Path) -> set[str]:
    headings = re.findall(r"^#{1,6} (.+)$", FENCE.sub("", page.read_text()), re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-") for heading in headings}


def local_links(page: Path) -> list[str]:
    found = LINK.findall(FENCE.sub("", page.read_text()))
    return [target for target in found if not re.match(r"[a-z]+:", target)]  # http:, https:, mailto:


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(PROJECT_ROOT).as_posix())
def test_every_local_link_lands(page):
    broken = []
    for target in local_links(page):
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: no heading makes #{anchor}")
    assert not broken, broken


def test_the_pages_link_to_something():
    assert len(local_links(PROJECT_ROOT / "README.md")) > 10  # the checker reads links at all
