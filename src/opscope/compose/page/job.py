"""The report page of a whole job: ``opscope job``'s view (computed rank by rank in parallel) with heat maps of
each rank's delay and step time per step, then one rank's own sections."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from opscope.compose.page import charts
from opscope.compose.page.blocks import TABLE_ROWS, section_table
from opscope.compose.page.trace import trace_sections
from opscope.render.html.page import Block, ChartBlock, FieldsBlock, Page, PageSection

if TYPE_CHECKING:
    import pyarrow as pa

    from opscope.model.trace import Trace
    from opscope.report import Report


def job_view_page(report: Report, rank_steps: pa.Table, first: tuple[str, Trace] | None, run: dict | None = None,
                  progress: Callable[[str], None] | None = None, peaks: Path | None = None,
                  timeline_steps: Sequence[int] | None = None) -> Page:
    """A whole job (``opscope job``'s report and its rank x step table): the job overview, the ranks, a heat map of
    each rank's delay and step time per step, the slowest rank per step, why the stragglers are slow, the
    collectives; then the sections of one rank's trace (``first``; ``peaks``: a peaks file for its roofline;
    ``timeline_steps``: the steps its timeline draws)."""
    sections = [PageSection("job", "Job", _job_blocks(report, rank_steps), intro="opscope job")]
    names: list[str] = []
    notes = [*report.notes]
    if report.headline:
        notes.insert(0, report.headline)
    if first is not None:
        name, trace = first
        sections += trace_sections(trace, run, progress, peaks, timeline_steps)
        names.append(name)
        notes.append(f"the sections after Job are about {name} (the lowest rank)")
    return Page(title=f"opscope report: {report.title or 'job'}", sources=names, sections=sections, notes=notes,
                kind="job")


def _job_blocks(report: Report, rank_steps: pa.Table) -> list[Block]:
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
            blocks += _heat_maps(rank_steps)
    return blocks


def _heat_maps(rank_steps: pa.Table) -> list[Block]:
    rows = rank_steps.to_pylist()
    blocks: list[Block] = []
    if any(r.get("late_ns") is not None for r in rows):
        blocks.append(ChartBlock("job_delay_map", "Delay per rank and step",
                                 charts.rank_step_heatmap(rows, "late_ns", "delay"),
                                 caption="how much later than the other ranks each rank reached the step's "
                                         "collectives (clock-aligned); a dark row is a straggler"))
    blocks.append(ChartBlock("job_step_map", "Step time per rank and step",
                             charts.rank_step_heatmap(rows, "step_ns", "step time"),
                             caption="step duration of each rank (ranks that wait in collectives have "
                                     "steps as long as the straggler's)"))
    return blocks
