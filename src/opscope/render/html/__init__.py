"""The HTML report: one self-contained file with a trace's (or a comparison's) sections, charts and tables.

``page.py`` is the report as data, ``sections.py``/``compare.py`` fill it from the analyses' own report
functions, ``charts.py`` makes the Vega-Lite specs, ``document.py`` writes the file from jinja2 templates in
``assets/`` (autoescaped). Needs the ``view`` extra (jinja2, altair, vl-convert-python).
"""

from __future__ import annotations

from collections.abc import Callable

from opscope.model.trace import Trace
from opscope.render.html.page import Page


def require() -> None:
    """A one-line UsageError, before any analysis runs, when the view extra is not installed."""
    missing = [m for m in ("jinja2", "altair", "vl_convert") if not _importable(m)]
    if missing:
        from opscope.errors import UsageError

        raise UsageError(f"the HTML report needs the view extra ({', '.join(missing)} missing): "
                         "pip install 'opscope[view]'")


def _importable(module: str) -> bool:
    import importlib

    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def trace_page(trace: Trace, source: str, run: dict | None = None,
               progress: Callable[[str], None] | None = None) -> Page:
    """One trace's report."""
    from opscope.render.html.sections import trace_sections

    return Page(title=f"opscope report: {source}", sources=[source], sections=trace_sections(trace, run, progress))


def html(page: Page) -> str:
    """The page as one HTML document."""
    from opscope.render.html.document import render_page

    return render_page(page)
