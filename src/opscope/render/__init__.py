"""Renderers: each lays out one kind of document in one format, and computes nothing.

Every renderer is a class (``opscope.render.base``: a name, a file extension, a binary flag, ``render``) listed
once in :data:`RENDERERS`. A command picks its renderer from here by name among those of the document it shows
(``KIND.named(name)``, ``KIND.names()``): ``--format`` among the :class:`~opscope.render.base.ReportRenderer` s
(table, json, csv), ``opscope report`` the :class:`~opscope.render.html.HtmlRenderer`, ``opscope export --to`` an
:class:`~opscope.render.export.ExportRenderer`, ``opscope graph`` a :class:`~opscope.render.dot.GraphRenderer` by
the output's suffix. A new format is one class in its own module plus one line below. The renderer modules are
light (their heavy modules are imported when they render), so importing this registry costs no format's
dependencies.
"""

from __future__ import annotations

from opscope.render.base import FileRenderer, Renderer, ReportRenderer, Terminal
from opscope.render.csv import CsvRenderer
from opscope.render.dot import DotRenderer, GraphRenderer, PdfRenderer, PngRenderer, SvgRenderer
from opscope.render.export import ChromeRenderer, ExportRenderer, PerfettoRenderer
from opscope.render.html import HtmlRenderer
from opscope.render.json import JsonRenderer
from opscope.render.terminal import TerminalRenderer

#: Every renderer, each kind's in the order its command lists them (``--format table|json|csv``).
RENDERERS: tuple[type[Renderer], ...] = (
    TerminalRenderer, JsonRenderer, CsvRenderer,
    HtmlRenderer,
    ChromeRenderer, PerfettoRenderer,
    SvgRenderer, PngRenderer, PdfRenderer, DotRenderer,
)


def _check(renderers: tuple[type[Renderer], ...]) -> None:
    """A repeated name (within a kind: --format would be ambiguous) fails at import, as the readers' registry does."""
    seen: set[tuple[str, type]] = set()
    for r in renderers:
        kinds = [k for k in (ReportRenderer, HtmlRenderer, ExportRenderer, GraphRenderer) if issubclass(r, k)]
        if len(kinds) != 1 or (r.name, kinds[0]) in seen:
            raise ImportError(f"renderer {r.__name__}: name {r.name!r} repeated, or not of exactly one kind")
        seen.add((r.name, kinds[0]))


_check(RENDERERS)

__all__ = ["RENDERERS", "FileRenderer", "Renderer", "ReportRenderer", "Terminal"]
