"""Renderers: each lays out one kind of document in one format, and computes nothing.

Every renderer is a class (``opscope.render.base``: a name, a file extension, a binary flag, ``render``) listed
once in :data:`RENDERERS` under the kind of document it shows. A command picks its renderer by name among those of
its kind (``KIND.named(name)``; ``KIND.names()`` lists them): ``--format`` among the
:class:`~opscope.render.base.ReportRenderer` s (table, json, csv), ``opscope report`` the
:class:`~opscope.render.html.HtmlRenderer`, ``opscope export --to`` an
:class:`~opscope.render.export.ExportRenderer`, ``opscope graph`` a :class:`~opscope.render.dot.GraphRenderer` by
the output's suffix. A new format is one class in its own module plus one line below.

The registry names where each class is rather than importing it: a command imports the one renderer it picks
(and that renderer imports its heavy modules, rich's tables or msgspec or jinja2, only when it renders).
"""

from __future__ import annotations

from importlib import import_module

from opscope.render.base import FileRenderer, Renderer, ReportRenderer, Terminal

#: kind -> name -> "module:Class", each kind's renderers in the order its command lists them
#: (``--format table|json|csv``). A test checks that each class says the name and kind it is listed under.
RENDERERS: dict[str, dict[str, str]] = {
    "report": {"table": "opscope.render.terminal:TerminalRenderer", "json": "opscope.render.json:JsonRenderer",
               "csv": "opscope.render.csv:CsvRenderer"},
    "page": {"html": "opscope.render.html:HtmlRenderer"},
    "export": {"chrome": "opscope.render.export:ChromeRenderer", "perfetto": "opscope.render.export:PerfettoRenderer"},
    "graph": {"svg": "opscope.render.dot:SvgRenderer", "png": "opscope.render.dot:PngRenderer",
              "pdf": "opscope.render.dot:PdfRenderer", "dot": "opscope.render.dot:DotRenderer"},
}


def load(where: str) -> type[Renderer]:
    """The class at ``"module:Class"``, its module imported now."""
    module, _, name = where.partition(":")
    found = getattr(import_module(module), name)
    assert isinstance(found, type) and issubclass(found, Renderer), where
    return found


__all__ = ["RENDERERS", "FileRenderer", "Renderer", "ReportRenderer", "Terminal", "load"]
