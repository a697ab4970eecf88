"""The report's Roofline section: ``opscope roofline``'s table (per op, shapes and dtype) drawn on log-log axes
under the device's roofs, and the table itself."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from opscope.compose.page import charts
from opscope.compose.page.blocks import TABLE_ROWS
from opscope.render.html.page import Block, ChartBlock, PageSection, ProseBlock, TableBlock
from opscope.report import Section
from opscope.units import format_ns

if TYPE_CHECKING:
    from opscope.advise.context import AdviceContext

#: The chart draws at most this many rows (those with the most time); opscope roofline lists them all.
ROOFLINE_POINTS = 500

INTRO = "opscope roofline"


def roofline(ctx: AdviceContext, peaks: Path | None = None) -> PageSection:
    """The roofline chart and table; one line saying why where the device has no known roofs or no op a work
    model (``peaks``: a peaks file, as ``opscope roofline --peaks FILE``)."""
    from opscope.analyses.peaks import trace_peaks
    from opscope.analyses.reports import roofline_report
    from opscope.analyses.roofline import attribution, coverage_notes, intensity_roofs

    trace = ctx.trace
    found, how = trace_peaks(trace, peaks)
    if found is None:
        return _empty(f"No roofline: {how}.")
    report = roofline_report(trace, found, how, "op", TABLE_ROWS)
    if report.empty is not None:
        return _empty(f"No roofline: {report.empty}.")
    section = report.sections[0]
    table = section.arrow
    assert table is not None
    rows = table.to_pylist()
    drawable = [r for r in rows if (r["intensity"] or 0) > 0 and (r["achieved_tflops"] or 0) > 0]
    if not drawable:
        return _empty(f"No roofline chart: none of the {len(rows)} rows has both FLOPs and bytes to place on log-log "
                      "axes (copies and fills have no FLOPs).")
    drawable.sort(key=lambda r: r["device_ns"], reverse=True)
    points = drawable[:ROOFLINE_POINTS]
    roofs = intensity_roofs(found, list(dict.fromkeys(r["dtype"] for r in points if r["dtype"])))
    host = attribution(trace).host
    measure = "host time" if host else "device time"
    held = sum(r["device_ns"] for r in rows)
    coverage = coverage_notes(trace)  # the window and denominator, as the table's notes say them
    caption = (f"one point per row of opscope roofline (op, shapes, dtype): across, its arithmetic intensity (FLOPs "
               f"per byte, from its shapes); up, its achieved TFLOP/s; its area, its {measure}; its colour, its op "
               f"family. Lines: each dtype's roof ({found.gbps:g} GB/s x intensity up to the ridge, then the dtype's "
               f"dense peak). The {len(rows)} rows hold {format_ns(held)} of {measure}; " + "; ".join(coverage))
    left = []
    if len(drawable) > len(points):
        left.append(f"the {len(drawable) - len(points)} rows with the least {measure} beyond the first "
                    f"{ROOFLINE_POINTS} are not drawn (opscope roofline lists them)")
    if len(rows) > len(drawable):
        left.append(f"{len(rows) - len(drawable)} rows without FLOPs or bytes (copies, fills) have no place on "
                    "log-log axes (opscope roofline lists them)")
    if found.tflops and not roofs:
        left.append("no roof drawn: the device has no peak for the rows' dtypes")
    rest = [n for n in section.said if n not in coverage]  # the table keeps what the caption does not say
    blocks: list[Block] = [
        ChartBlock("roofline", "How far each op is from what the device can do: its roofline",
                   charts.roofline(points, roofs, found.gbps, measure), caption=caption, notes=[*left, how]),
        TableBlock(Section("roofline_table", "Roofline by op, shapes and dtype", table, legend=section.legend,
                           notes=rest, limit=TABLE_ROWS, columns=section.columns), searchable=True)]
    return PageSection("roofline", "Roofline", blocks, intro=INTRO)


def _empty(text: str) -> PageSection:
    return PageSection("roofline", "Roofline", [ProseBlock("no_roofline", text, tone="empty")], intro=INTRO)
