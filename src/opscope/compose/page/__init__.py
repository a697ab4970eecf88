"""The HTML report's pages: one trace's (:mod:`.trace`, its sections one module each), a comparison's
(:mod:`.diff`) and a job's (:mod:`.job`), as :class:`~opscope.render.html.page.Page` data that the HTML renderer
lays out. Tables are the report functions' own Report sections (:mod:`.blocks`); charts are Vega-Lite specs
(:mod:`.charts`, built with altair: the ``view`` extra)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from opscope.render.html.page import Page

if TYPE_CHECKING:
    from opscope.model.trace import Trace


def trace_page(trace: Trace, source: str, run: dict | None = None,
               progress: Callable[[str], None] | None = None, peaks: Path | None = None,
               timeline_steps: Sequence[int] | None = None) -> Page:
    """One trace's report (``peaks``: a peaks file for its roofline, as ``opscope roofline --peaks FILE``;
    ``timeline_steps``: the steps its timeline draws, else the median and the slowest one)."""
    from opscope.compose.page.trace import trace_sections

    return Page(title=f"opscope report: {source}", sources=[source],
                sections=trace_sections(trace, run, progress, peaks, timeline_steps))
