"""The documentation builds: generated pages match the code, every link and anchor between the Markdown files
resolves, and the two front pages stay short enough to read."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import gen_docs  # noqa: E402

PAGES = sorted([*ROOT.glob("*.md"), *(ROOT / "docs").rglob("*.md"), ROOT / "tests" / "README.md"])
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, code marks and punctuation dropped (hyphens and underscores kept),
    spaces to hyphens."""
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading's anchor in ``page`` (a repeated heading gets -1, -2... as GitHub numbers them)."""
    seen: dict[str, int] = {}
    found = set()
    for line in _FENCE.sub("", page.read_text(encoding="utf-8")).splitlines():
        m = re.match(r"^#{1,6} (.+)$", line)
        if not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(page: Path) -> list[str]:
    text = _FENCE.sub("", page.read_text(encoding="utf-8"))
    text = re.sub(r"`[^`\n]*`", "", text)  # code spans show brackets as text
    return [a or b for a, b in _LINK.findall(text)]


def test_generated_pages_are_current():
    for path, text in gen_docs.pages().items():
        assert path.read_text(encoding="utf-8") == text, f"{path.name} is out of date: python tools/gen_docs.py"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_and_anchor_resolves(page):
    broken = []
    for target in links(page):
        if re.match(r"^[a-z]+:", target):  # http:, https:, mailto: are not checked (no network here)
            continue
        file_part, _, anchor = target.partition("#")
        dest = (page.parent / file_part).resolve() if file_part else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading with that anchor in {dest.name}")
    assert broken == []


def test_front_pages_stay_short():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 300
    assert len((ROOT / "DESIGN.md").read_text().splitlines()) <= 400


def test_the_slug_rule_on_known_headings():
    assert slug("Formats opscope reads") == "formats-opscope-reads"
    assert slug("### `opscope diff BASE NEW`".lstrip("# ")) == "opscope-diff-base-new"
    assert slug("Capture: record your own program") == "capture-record-your-own-program"
    assert slug("See it: `opscope report`, `opscope export`, `opscope graph`") == \
        "see-it-opscope-report-opscope-export-opscope-graph"
