"""The report page of a comparison of two runs: ``opscope diff``'s tables, its headline as a chart."""

from __future__ import annotations

from typing import TYPE_CHECKING

from opscope.compose.page import charts
from opscope.compose.page.blocks import TABLE_ROWS, section_table
from opscope.render.html.page import Block, ChartBlock, FieldsBlock, Page, PageSection, ProseBlock

if TYPE_CHECKING:
    from opscope.diff import Comparison

#: The comparison's tables in reading order, with the page's title for each.
TABLES = (("headline", "Headline"), ("rows", "Ops and kernels by absolute change"),
          ("ops", "Device time by op, matched by op and input shapes"), ("classes", "Device time by kernel class"),
          ("kernel_choice", "Kernel choice changes: same op and input shapes, other kernels"))


def diff_page(result: Comparison, base: str, new: str) -> Page:
    """``result``: the comparison of ``base`` and ``new``."""
    from opscope.diff.report import comparison_report

    report = comparison_report(result, full_names=False, limit=TABLE_ROWS)
    per = "per step" if result.per_step else "over the whole trace (no steps in one or both)"
    blocks: list[Block | None] = [FieldsBlock("diff_summary", [("base", base), ("new", new),
                                                         ("verdict", result.summary or "")])]
    headline = [r for r in result.headline if r.get("base_ns") is not None or r.get("new_ns") is not None]
    if headline:
        rows = [{"part": r["part"], "which": which, "ns": r[f"{which}_ns"] or 0} for r in headline
                for which in ("base", "new")]
        blocks.append(ChartBlock("diff_headline", "Where the time goes, base against new",
                                 charts.grouped_bars(rows, "part", "which", "ns", f"time {per} (ms)"),
                                 caption=f"each part of the time {per}: the step (or whole trace) first, then the "
                                         "device's compute, copies, memsets, communication and idle time"))
    for key, title in TABLES:
        section = next((s for s in report.sections if s.key == key and s.terminal), None)
        if section is None or section.arrow is None:
            continue
        if section.arrow.num_rows == 0:
            blocks.append(ProseBlock(f"no_{key}", f"{title}: none.", tone="empty"))
            continue
        blocks.append(section_table(section, f"diff_{key}", title, limit=TABLE_ROWS,
                                    searchable=key in ("rows", "ops", "kernel_choice")))
    sections = [PageSection("diff", "Comparison", [b for b in blocks if b is not None], intro="opscope diff")]
    return Page(title=f"opscope diff: {base} → {new}", sources=[base, new], sections=sections,
                notes=list(report.notes), kind="diff")
