"""Reports about several traces: a comparison of two runs (``opscope diff``'s tables and headline as charts) and
a job of several ranks (each rank's overview side by side, then the first rank's sections)."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa

from opscope.model.trace import Trace
from opscope.render.html import charts
from opscope.render.html.page import Block, ChartBlock, FieldsBlock, Page, PageSection, ProseBlock
from opscope.render.html.sections import TABLE_ROWS, trace_sections
from opscope.render.html.tables import section_table


def diff_page(result, base: str, new: str) -> Page:
    """``result``: an :class:`opscope.diff.Comparison` of ``base`` and ``new``."""
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
    keys = [("headline", "Headline"), ("rows", "Ops and kernels by absolute change"),
            ("ops", "Device time by op, matched by op and input shapes"), ("classes", "Device time by kernel class"),
            ("kernel_choice", "Kernel choice changes: same op and input shapes, other kernels")]
    for key, title in keys:
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


def job_view_page(report, rank_steps: pa.Table, first: tuple[str, Trace] | None, run: dict | None = None,
                  progress: Callable[[str], None] | None = None) -> Page:
    """A whole job (``opscope job``'s report and its rank x step table, computed rank by rank in parallel): the job
    overview, the ranks, a heat map of each rank's delay and step time per step, the slowest rank per step, why
    the stragglers are slow, the collectives; then the sections of one rank's trace (``first``)."""
    blocks: list[Block] = []
    for section in report.sections:
        if section.fields:
            blocks.append(FieldsBlock(f"job_{section.key}", list(section.fields)))
            continue
        if not section.terminal or section.arrow is None:
            continue
        if section.arrow.num_rows == 0:
            continue
        block = section_table(section, f"job_{section.key}", section.title, limit=TABLE_ROWS,
                              searchable=section.key in ("ranks", "why"))
        if block is not None:
            blocks.append(block)
        if section.key == "ranks" and rank_steps.num_rows:
            rows = rank_steps.to_pylist()
            if any(r.get("late_ns") is not None for r in rows):
                blocks.append(ChartBlock("job_delay_map", "Delay per rank and step",
                                         charts.rank_step_heatmap(rows, "late_ns", "delay"),
                                         caption="how much later than the other ranks each rank reached the step's "
                                                 "collectives (clock-aligned); a dark row is a straggler"))
            blocks.append(ChartBlock("job_step_map", "Step time per rank and step",
                                     charts.rank_step_heatmap(rows, "step_ns", "step time"),
                                     caption="step duration of each rank (ranks that wait in collectives have "
                                             "steps as long as the straggler's)"))
    sections = [PageSection("job", "Job", blocks, intro="opscope job")]
    names: list[str] = []
    notes = [*report.notes]
    if report.headline:
        notes.insert(0, report.headline)
    if first is not None:
        name, trace = first
        sections += trace_sections(trace, run, progress)
        names.append(name)
        notes.append(f"the sections after Job are about {name} (the lowest rank)")
    return Page(title=f"opscope report: {report.title or 'job'}", sources=names, sections=sections, notes=notes,
                kind="job")
