"""Renderers: each shows a :class:`~opscope.report.Report` in one format, and nothing else.

A renderer is a module-level function ``render(report, out, err)`` registered here under its name; the CLI
looks it up by the ``--format`` value, so a new format (HTML, Perfetto) is one module plus one line below.
Renderers never compute: every number they show is in the report.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from rich.console import Console

    from opscope.report import Report


class Renderer(Protocol):
    def __call__(self, report: Report, out: Console, err: Console) -> None: ...


def _module(name: str) -> Renderer:
    """``opscope.render.<name>.render``, its module imported on the first call: a command imports the renderer it
    shows its report with, not all of them (the terminal's needs rich's tables, JSON's msgspec)."""

    def render(report: Report, out: Console, err: Console) -> None:
        import_module(f"opscope.render.{name}").render(report, out, err)

    render.__qualname__ = render.__name__ = f"{name}.render"
    return render


#: format name -> the function that shows a report in it.
RENDERERS: dict[str, Renderer] = {
    "table": _module("terminal"),
    "json": _module("json"),
    "csv": _module("csv"),
}


def renderer(name: str) -> Renderer:
    """The renderer registered as ``name``; a name not registered is a programming error, said loudly."""
    try:
        return RENDERERS[name]
    except KeyError:
        raise ValueError(f"no renderer named {name!r}; registered: {', '.join(RENDERERS)}") from None
