"""Renderers: each shows a :class:`~opscope.report.Report` in one format, and nothing else.

A renderer is a module-level function ``render(report, out, err)`` registered here under its name; the CLI
looks it up by the ``--format`` value, so a new format (HTML, Perfetto) is one module plus one line below.
Renderers never compute: every number they show is in the report.
"""

from __future__ import annotations

from typing import Protocol

from rich.console import Console

from opscope.render import csv, json, terminal
from opscope.report import Report


class Renderer(Protocol):
    def __call__(self, report: Report, out: Console, err: Console) -> None: ...


#: format name -> the function that shows a report in it.
RENDERERS: dict[str, Renderer] = {
    "table": terminal.render,
    "json": json.render,
    "csv": csv.render,
}


def renderer(name: str) -> Renderer:
    """The renderer registered as ``name``; a name not registered is a programming error, said loudly."""
    try:
        return RENDERERS[name]
    except KeyError:
        raise ValueError(f"no renderer named {name!r}; registered: {', '.join(RENDERERS)}") from None
