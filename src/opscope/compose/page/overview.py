"""The report's Overview: ``opscope summary``'s figures, the step-time chart with its outliers, the device's busy
and idle time per step, ``opscope steps``' table."""

from __future__ import annotations

from typing import TYPE_CHECKING

from opscope.analyses.steps import NO_STEPS, step_marker
from opscope.compose.page import charts
from opscope.compose.page.blocks import TABLE_ROWS, part, section_table, tables
from opscope.render.html.page import Block, ChartBlock, FieldsBlock, PageSection, ProseBlock
from opscope.units import format_ns

if TYPE_CHECKING:
    from opscope.advise.context import AdviceContext


def overview(ctx: AdviceContext) -> PageSection:
    trace, run = ctx.trace, ctx.run
    from opscope.analyses.reports import steps_report, summary_report
    from opscope.analyses.steps import step_stats

    summary = summary_report(trace, top=0, run=run)  # the top lists are the Ops and kernels section's tables
    fields = part(summary, "overview")
    blocks: list[Block | None] = []
    steps = steps_report(trace, None, run, analysis=ctx.gpu)
    section = next((s for s in steps.sections if not s.terminal), None) or steps.sections[0]
    table = section.arrow
    has_steps = table is not None and table.num_rows > 0
    if has_steps:
        blocks.append(_critical_path(ctx))  # each step's breakdown first: the page's headline
    blocks.append(FieldsBlock("overview", list(fields.fields) if fields else []))
    if table is None or not has_steps:
        blocks.append(ProseBlock("no_steps", f"No step chart: the trace has {NO_STEPS}, so there is no per-step "
                                              "time (figures below are over the whole trace).", tone="empty"))
    else:
        rows = table.to_pylist()
        stats = step_stats(table)
        blocks.append(ChartBlock("step_times", "Step time", charts.step_times(rows, stats.median_ns),
                                 caption=f"each {step_marker(trace)}N's duration; dashed: the median "
                                         f"({format_ns(stats.median_ns)}) of the {stats.count} steps (mean "
                                         f"{format_ns(stats.mean_ns)}); red: outliers (warm-up, stragglers)"))
        if any(r.get("gpu_busy_ns") is not None for r in rows) and any(r.get("launched_gpu_ns") for r in rows):
            blocks.append(ChartBlock("step_busy", "Device busy and idle per step", charts.step_busy(rows),
                                     caption="inside each step's interval: device busy (any device, overlaps once, "
                                             "as opscope gpu counts it), unseen busy (work the trace does not "
                                             "show) and idle; shares are of the step's duration"))
        else:
            blocks.append(ProseBlock("no_step_busy", "No device busy/idle per step: no device work in the steps.",
                                     tone="empty"))
        blocks.append(section_table(section, "steps", "Steps", limit=TABLE_ROWS))
    blocks += tables(summary, ("by_kind", "not_mapped"))
    return PageSection("overview", "Overview", [b for b in blocks if b is not None],
                       intro="opscope summary and opscope steps")


#: Up to this many events the report draws the critical path; the walk back along each step's path is Python and
#: takes seconds beyond (a 1 GB trace's, 4.5 s): the command gives it there.
CRITICAL_PATH_EVENTS = 2_000_000


def _critical_path(ctx: AdviceContext) -> Block:
    """The steps' critical paths by category (opscope critical-path's table), as stacked bars."""
    from opscope.analyses.critical_path import breakdown_table

    if ctx.trace.num_events > CRITICAL_PATH_EVENTS:
        return ProseBlock("no_critical_path", f"The critical path is not drawn for a trace of more than "
                                              f"{CRITICAL_PATH_EVENTS:,} events: opscope critical-path gives it.",
                          tone="empty")
    rows = breakdown_table(ctx.trace).to_pylist()
    if not rows:
        return ProseBlock("no_critical_path", "No critical path: the trace has no host events to follow.",
                          tone="empty")
    return ChartBlock("critical_path", "Each step, by what set its length (its critical path)",
                      charts.critical_path(rows),
                      caption="one bar per step: the chain of work and waits that set the step's length (opscope "
                              "critical-path), by category (device compute, copies, communication, input pipeline, "
                              "host work, sync waits), stacked to the step's length; unexplained: waits the trace "
                              "does not show the cause of. Click a category in the legend to pick it out; wheel "
                              "and drag zoom and pan the time axis")
