"""Write the generated reference pages under docs/ from the code they describe.

    python tools/gen_docs.py           # rewrites docs/advice.md
    python tools/gen_docs.py --check   # exit 1 when a page differs from what the code says (CI's test does this)

docs/advice.md is every advise rule's method: what makes it fire, how it estimates the saving and what the
estimate leaves out, the same text as ``opscope advise --explain all`` (each rule's ``explain``), so the page
cannot drift from the rules.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ADVICE = ROOT / "docs" / "advice.md"

_CODE_SPAN = re.compile(r"(`[^`]*`)")


def _markdown(text: str) -> str:
    """Plain text as Markdown that reads the same: underscores and asterisks outside code spans escaped (a Python
    name such as ``__next__`` would otherwise turn bold)."""
    parts = _CODE_SPAN.split(text)
    return "".join(p if p.startswith("`") else p.replace("*", r"\*").replace("_", r"\_") for p in parts)


def advice_markdown() -> str:
    from opscope.advise import all_rules

    rules = all_rules()
    out = ["# How each finding decides and estimates", "",
           "Generated from the rules by `python tools/gen_docs.py`; `opscope advise --explain RULE` prints the same.",
           "The rules run in this order; a finding's saving is per step of the trace's window, and the savings of",
           "different findings can overlap (do not add them up). A finding whose remedy maps to an `opscope whatif`",
           "change (its `change`) has the saving the trace's dependency graph replayed with that change predicts",
           "(`saving_method` simulated; `estimated_ns` keeps the rule's own arithmetic below); the others are",
           "estimated, and say why.", ""]
    out += [f"- [`{r.id}`](#{r.id}): {r.title}" for r in rules]
    for r in rules:
        out += ["", f"## {r.id}", "", f"**{_markdown(r.title)}**", "", _markdown(r.explain.strip())]
        how = (f"estimated, not simulated: {r.not_simulated}" if r.not_simulated
               else "simulated on the dependency graph (the finding's change)")
        out += ["", f"Saving: {_markdown(how)}."]
    return "\n".join(out) + "\n"


def pages() -> dict[Path, str]:
    """Each generated page and the text it must hold."""
    return {ADVICE: advice_markdown()}


def main() -> int:
    check = "--check" in sys.argv[1:]
    stale = []
    for path, text in pages().items():
        if check:
            if not path.is_file() or path.read_text(encoding="utf-8") != text:
                stale.append(path)
        else:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(ROOT)}")
    for path in stale:
        print(f"{path.relative_to(ROOT)} is out of date: run python tools/gen_docs.py")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
