"""The HTML report: one self-contained file with a trace's (or a comparison's, or a job's) sections, charts and
tables.

``page.py`` is the report as data (built by ``opscope.compose.page``), ``tables.py`` formats its tables as the
terminal does, ``document.py`` writes the file from jinja2 templates in ``assets/`` (autoescaped) with the Vega
bundle inline. Needs the ``view`` extra (jinja2, altair for the charts' specs, vl-convert-python).
"""

from __future__ import annotations

from typing import BinaryIO

from opscope.render.base import FileRenderer
from opscope.render.html.page import Page


class HtmlRenderer(FileRenderer[Page]):
    """A report page as one HTML file that opens offline in any browser."""

    kind = "page"
    name = "html"
    extension = ".html"
    binary = False

    def require(self) -> None:
        """A one-line UsageError, before any analysis runs, when the view extra is not installed (altair too: the
        page's charts are built with it)."""
        missing = [m for m in ("jinja2", "altair", "vl_convert") if not _importable(m)]
        if missing:
            from opscope.errors import UsageError

            raise UsageError(f"the HTML report needs the view extra ({', '.join(missing)} missing): "
                             "pip install 'opscope[view]'")

    def render(self, page: Page, out: BinaryIO) -> None:
        out.write(self.text(page).encode("utf-8"))

    def text(self, page: Page) -> str:
        """The page as one HTML document."""
        from opscope.render.html.document import render_page

        return render_page(page)


def _importable(module: str) -> bool:
    """Whether ``module`` is installed, without importing it (the chart libraries hold ~30 MiB once imported: not
    before the report's analyses, which need the most memory, have run)."""
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False
