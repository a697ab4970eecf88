"""The sections of one trace's report, each from the report function its command uses (``summary``, ``steps``,
``gpu``, ``ops``, ``kernels``, ``memory``, ``advise``), so the page shows the same numbers the CLI prints.

A section with nothing to show (no steps, no device work, no memory records) says why in one line instead of
drawing an empty chart.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from opscope.analyses.filters import EventFilter
from opscope.analyses.steps import NO_STEPS, step_marker
from opscope.model.trace import Trace
from opscope.render.html import charts
from opscope.render.html.page import (
    Block,
    ChartBlock,
    FieldsBlock,
    FindingBlock,
    PageSection,
    ProseBlock,
    TableBlock,
)
from opscope.render.html.tables import records_table, section_table, table_block
from opscope.report import Report, Section
from opscope.units import format_ns

if TYPE_CHECKING:
    from opscope.advise.context import AdviceContext

#: Rows a table of the report holds at most: the file stays small; the JSON output has every row.
TABLE_ROWS = 300
SHORT_GAP_NS = 10_000


def trace_sections(trace: Trace, run: dict | None = None, progress: Callable[[str], None] | None = None,
                   ) -> list[PageSection]:
    """Every section of one trace's report, in reading order."""
    from opscope.advise.context import AdviceContext

    # One context for every section: the GPU analysis, step table and the like are computed once and the advice
    # rules reuse them. The sections are built two at a time, the longest first (Arrow's kernels and cache reads
    # release the GIL, so two threads keep two cores busy); those that need the GPU analysis wait for it, the ops
    # and memory sections start at once.
    ctx = AdviceContext(trace, run=run)
    needs_gpu = {"overview", "gpu", "advice"}
    builders: dict[str, Callable[[AdviceContext], PageSection]] = {
        "overview": overview, "gpu": gpu, "ops": ops_and_kernels, "memory": memory, "advice": advice}
    longest_first = ["ops", "advice", "memory", "overview", "gpu"]

    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="opscope-report") as pool:
        gpu_ready = pool.submit(lambda: ctx.gpu)

        def build(name: str) -> PageSection:
            if name in needs_gpu:
                gpu_ready.result()
            if progress is not None:
                progress(name)
            return builders[name](ctx)

        futures = {name: pool.submit(build, name) for name in longest_first}
        return [futures[name].result() for name in builders]  # reading order


def _section(report: Report, key: str) -> Section | None:
    return next((s for s in report.sections if s.key == key), None)


def overview(ctx: AdviceContext) -> PageSection:
    trace, run = ctx.trace, ctx.run
    from opscope.analyses.reports import steps_report, summary_report
    from opscope.analyses.steps import step_stats

    summary = summary_report(trace, top=0, run=run)  # the top lists are the Ops and kernels section's tables
    fields = _section(summary, "overview")
    blocks: list[Block | None] = [FieldsBlock("overview", list(fields.fields) if fields else [])]
    steps = steps_report(trace, None, run, analysis=ctx.gpu)
    section = next((s for s in steps.sections if not s.terminal), None) or steps.sections[0]
    table = section.arrow
    if table is None or table.num_rows == 0:
        blocks.append(ProseBlock("no_steps", f"No step chart: the trace has {NO_STEPS}, so there is no per-step "
                                              "time (figures below are over the whole trace).", tone="empty"))
    else:
        rows = table.to_pylist()
        stats = step_stats(table)
        blocks.append(ChartBlock("step_times", "Step time", charts.step_times(rows, stats.median_ns),
                                 caption=f"each {step_marker(trace)}N's duration; dashed: the median "
                                         f"({format_ns(stats.median_ns)}) of the {stats.used} steps used; red: "
                                         "outliers (warm-up, stragglers) left out of the statistics"))
        if any(r.get("gpu_busy_ns") is not None for r in rows) and any(r.get("launched_gpu_ns") for r in rows):
            blocks.append(ChartBlock("step_busy", "Device busy and idle per step", charts.step_busy(rows),
                                     caption="inside each step's interval: device busy (any device, overlaps once, "
                                             "as opscope gpu counts it), unseen busy (work the trace does not "
                                             "show) and idle; shares are of the step's duration"))
        else:
            blocks.append(ProseBlock("no_step_busy", "No device busy/idle per step: no device work in the steps.",
                                     tone="empty"))
        blocks.append(section_table(section, "steps", "Steps", limit=TABLE_ROWS))
    blocks += _tables(summary, ("by_kind", "not_mapped"))
    return PageSection("overview", "Overview", [b for b in blocks if b is not None],
                       intro="opscope summary and opscope steps")


def gpu(ctx: AdviceContext) -> PageSection:
    trace = ctx.trace
    from opscope.analyses.reports import gpu_report

    report = gpu_report(trace, SHORT_GAP_NS, None, None, analysis=ctx.gpu)
    if report.empty is not None:
        return PageSection("gpu", "GPU", [ProseBlock("no_gpu", f"No GPU section: {report.empty}", tone="empty")],
                           intro="opscope gpu")
    breakdown, idle, launches = (_section(report, k) for k in ("breakdown", "idle", "launches"))
    blocks: list[Block | None] = []
    if breakdown is not None and breakdown.arrow is not None:
        rows = breakdown.arrow.to_pylist()
        blocks.append(ChartBlock("gpu_parts", "Device time per device and stream", charts.device_parts(rows),
                                 caption="compute, memcpy, memset, communication and idle time in the window "
                                         "(the steps' span; the whole trace when it has no steps); a device's "
                                         "'all streams' bar is the union over its streams"))
        blocks.append(section_table(breakdown, "gpu_breakdown", "GPU time per device and stream"))
    if idle is not None and idle.arrow is not None:
        blocks.append(ChartBlock("gpu_idle", "Why the device idles", charts.idle_causes(idle.arrow.to_pylist()),
                                 caption="each device's idle time in the window, by cause (every idle ns has one "
                                         "cause); shares are of the device's idle time"))
        blocks.append(section_table(idle, "gpu_idle_causes", "Idle time by cause, per device"))
    if launches is not None and launches.arrow is not None:
        blocks.append(section_table(launches, "gpu_launches", "Concurrency and launches, per device"))
    return PageSection("gpu", "GPU", [b for b in blocks if b is not None], intro="opscope gpu")


def ops_and_kernels(ctx: AdviceContext) -> PageSection:
    trace = ctx.trace
    from opscope.analyses.hierarchy import time_hierarchy
    from opscope.analyses.reports import kernels_report, ops_report

    blocks: list[Block | None] = []
    tree = time_hierarchy(trace)
    if tree.total_ns:
        blocks.append(ChartBlock("hierarchy", "Where the time goes: module → op → kernel",
                                 charts.icicle(tree.table.to_pylist(), tree.measure),
                                 caption=f"{tree.measure}; width is the share of "
                                         f"{format_ns(tree.total_ns)}; entries under 0.1% are folded into "
                                         "'(smaller entries)'; hover for names and times"))
    ops = ops_report(trace, ["name", "shapes"], EventFilter(kinds=("cpu_op",)), "self_ns", "cpu_op", TABLE_ROWS)
    blocks.append(section_table(ops.sections[0], "ops", "Operators by self time (per input shapes)",
                                searchable=True))
    kernels = kernels_report(trace, EventFilter(kinds=("kernel", "memcpy", "memset", "comm")), False, "total_ns",
                             "short", TABLE_ROWS)
    table = kernels.sections[0].arrow
    if table is not None and table.num_rows:
        blocks.append(section_table(kernels.sections[0], "kernels", "Device kernels, copies and memsets",
                                    searchable=True))
    else:
        blocks.append(ProseBlock("no_kernels", "No kernel table: no device kernels in this trace (a CPU-only "
                                               "profile).", tone="empty"))
    return PageSection("ops", "Ops and kernels", [b for b in blocks if b is not None],
                       intro="opscope ops --by name,shapes and opscope kernels")


def memory(ctx: AdviceContext) -> PageSection:
    trace = ctx.trace
    from opscope.analyses import memory as mem

    rec = mem.memory_records(trace)
    if rec.table.num_rows == 0:
        return PageSection("memory", "Memory", [ProseBlock("no_memory", f"No memory section: {mem.NO_RECORDS}",
                                                           tone="empty")], intro="opscope memory")
    peaks = mem.peak_table(rec)
    points = mem.timeline_table(rec, 200)
    blocks: list[Block | None] = [
        ChartBlock("memory_timeline", "Allocated and reserved memory over time",
                   charts.memory_over_time(points.to_pylist(), peaks.to_pylist()),
                   caption="each device's allocated (solid) and reserved (dashed) bytes, the maximum in each of "
                           "200 equal buckets of the trace; the triangle marks the allocated peak",
                   notes=list(rec.notes())),
        table_block("memory_peaks", "Peak memory per device (times after the trace start)", peaks),
    ]
    holders = mem.holders_table(rec, "bytes")
    if holders.num_rows:
        blocks.append(table_block("memory_holders", "Held at each device's peak, by the op that allocated it",
                                  holders, limit=TABLE_ROWS, searchable=True))
    return PageSection("memory", "Memory", [b for b in blocks if b is not None], intro="opscope memory")


def advice(ctx: AdviceContext) -> PageSection:
    from opscope.advise import advise
    from opscope.advise.report import advice_report

    found = advise(ctx.trace, run=ctx.run, peers=ctx.peers, context=ctx)
    report = advice_report(found, "trace", None)  # for its notes (the window, rules that did not run)
    blocks: list[Block] = [ProseBlock(f"advice_note_{i}", line) for i, line in enumerate(report.notes)]
    for rank, f in enumerate(found.findings, 1):
        per = "per step" if found.unit == "step" else "over the trace (no steps)"
        saving = "saving not estimated" if f.saving_ns is None else f"saves ~{format_ns(f.saving_ns)} {per}"
        if f.saving_pct is not None and found.unit == "step":
            saving += f" ({f.saving_pct:.1f}% of the step)"
        blocks.append(FindingBlock(f"finding_{rank}", f"{rank}. {f.title}", saving, f.rule, f.estimate, f.change,
                                   records_table(f"finding_{rank}_evidence", f.evidence_title or "evidence",
                                                 f.evidence, limit=12)))
    if not found.findings:
        blocks.append(ProseBlock("no_findings", "No findings: no rule found anything to improve in this trace.",
                                 tone="empty"))
    return PageSection("advice", "Advice", blocks, intro="opscope advise: findings ranked by estimated saving")


def _tables(report: Report, keys: Sequence[str]) -> list[TableBlock | None]:
    out = []
    for key in keys:
        section = _section(report, key)
        if section is not None:
            out.append(section_table(section))
    return out
