"""Reports about several traces: a comparison of two runs (``opscope diff``'s tables and headline as charts) and
a job of several ranks (each rank's overview side by side, then the first rank's sections)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa

from opscope.analyses.steps import NO_STEPS
from opscope.model.trace import Trace
from opscope.render.html import charts
from opscope.render.html.page import Block, ChartBlock, FieldsBlock, Page, PageSection, ProseBlock
from opscope.render.html.sections import TABLE_ROWS, trace_sections
from opscope.render.html.tables import section_table, table_block
from opscope.units import format_ns, format_pct


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


def job_page(traces: Sequence[tuple[str, Trace]], run: dict | None = None,
             progress: Callable[[str], None] | None = None) -> Page:
    """Several ranks of one job: their overview figures side by side, then the first trace's own sections."""
    from opscope.analyses.summary import summarize

    rows: list[dict[str, Any]] = []
    for name, trace in traces:
        if progress is not None:
            progress(f"overview of {name}")
        s = summarize(trace, top=0)
        busy_pct = 100 * s.gpu_busy_ns / s.wall_ns if s.gpu_busy_ns is not None and s.wall_ns else None
        rows.append({"rank": _rank_label(trace, name), "trace": name, "events": s.events, "wall_ns": s.wall_ns,
                     "steps": s.steps.count, "median_step_ns": s.steps.median_ns, "gpu_busy_ns": s.gpu_busy_ns,
                     "gpu_busy_pct": round(busy_pct, 2) if busy_pct is not None else None})
    _disambiguate(rows)
    blocks: list[Block] = [table_block("ranks", "Each trace (rank)", pa.Table.from_pylist(rows),
                                       legend="rank: the trace's distributed rank when it records one, else its file "
                                              "name; median_step_ns: median ProfilerStep#N duration (outliers left "
                                              "out); gpu_busy_pct: device busy over the trace's wall time")]
    with_steps = [r for r in rows if r["median_step_ns"] is not None]
    if with_steps:
        data = [{"rank": r["rank"], "median_step_ms": charts.ms(r["median_step_ns"]),
                 "median_step_ms_text": format_ns(r["median_step_ns"])} for r in with_steps]
        blocks.append(ChartBlock("ranks_steps", "Median step time per rank",
                                 charts.per_rank(data, "median_step_ms", "median step time"),
                                 caption="a rank far above the others is a straggler the rest wait for"))
    else:
        blocks.append(ProseBlock("ranks_no_steps", f"No step chart: these traces have {NO_STEPS}.", tone="empty"))
    with_gpu = [r for r in rows if r["gpu_busy_pct"] is not None]
    if with_gpu:
        data = [{"rank": r["rank"], "busy": r["gpu_busy_pct"], "busy_text": format_pct(r["gpu_busy_pct"])}
                for r in with_gpu]
        blocks.append(ChartBlock("ranks_busy", "Device busy per rank", charts.per_rank(data, "busy", "busy", "%"),
                                 caption="device busy time as a share of each trace's wall time"))
    first_name, first = traces[0]
    sections = [PageSection("ranks", "Ranks", blocks, intro="opscope summary of each trace")]
    sections += trace_sections(first, run, progress)
    names = [n for n, _ in traces]
    return Page(title=f"opscope report: {len(traces)} traces", sources=names, sections=sections,
                notes=[f"the sections after Ranks are about {first_name} (the first trace given); give another "
                       "trace first to see its own"], kind="job")


def _rank_label(trace: Trace, name: str) -> str:
    """"rank 3" from the trace's distributed info, else the file's name (the table has the whole path)."""
    rank = trace.metadata.get("rank")
    return f"rank {rank}" if isinstance(rank, int) else name.replace("\\", "/").rsplit("/", 1)[-1]


def _disambiguate(rows: list[dict[str, Any]]) -> None:
    """Two traces with one label (two files named alike, two recordings of rank 0) get their place added."""
    seen: dict[str, int] = {}
    for r in rows:
        seen[r["rank"]] = seen.get(r["rank"], 0) + 1
    for i, r in enumerate(rows, 1):
        if seen[r["rank"]] > 1:
            r["rank"] = f"{r['rank']} (trace {i})"
