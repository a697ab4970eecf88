"""What opscope marks on the exported timeline: step boundaries, the slowest steps, the longest idle gaps of each
device with their cause. Every number comes from the analyses (steps.py, idle.py); this module only picks and names.
"""

from __future__ import annotations

from opscope.model.trace import Trace
from opscope.render.export.plan import Mark
from opscope.units import format_ns

#: Longest idle gaps marked per device.
TOP_GAPS = 10
#: Slowest steps marked (besides every step the steps analysis flags as an outlier).
TOP_STEPS = 3


def step_marks(trace: Trace, span: tuple[int, int] | None) -> list[Mark]:
    """One slice per ``ProfilerStep#N`` (inside the span when there is one) on the steps track."""
    steps = trace.steps
    out = []
    for n, ts, dur in zip(steps["step"].to_pylist(), steps["ts_ns"].to_pylist(), steps["dur_ns"].to_pylist()):
        if _overlaps(ts, dur, span):
            out.append(Mark("steps", f"step {n}", ts, dur, {"step": n, "dur": format_ns(dur)}))
    return out


def finding_marks(trace: Trace, span: tuple[int, int] | None, top_gaps: int = TOP_GAPS,
                  top_steps: int = TOP_STEPS) -> list[Mark]:
    """The slowest steps (the ``top_steps`` longest and every flagged outlier) and the ``top_gaps`` longest idle
    gaps of each device, as slices on the findings track, inside the span when there is one."""
    return _slow_steps(trace, span, top_steps) + _idle_gaps(trace, span, top_gaps)


def _slow_steps(trace: Trace, span: tuple[int, int] | None, top: int) -> list[Mark]:
    from opscope.analyses.steps import step_table

    table = step_table(trace)
    if table.num_rows == 0:
        return []
    rows = table.to_pylist()
    starts = dict(zip(trace.steps["step"].to_pylist(), trace.steps["ts_ns"].to_pylist()))
    ranked = sorted(rows, key=lambda r: (-r["dur_ns"], r["step"]))
    rank = {r["step"]: i + 1 for i, r in enumerate(ranked)}
    chosen = [r for r in ranked if rank[r["step"]] <= top or r["outlier"]]
    out = []
    for r in chosen:
        ts = starts[r["step"]]
        if not _overlaps(ts, r["dur_ns"], span):
            continue
        flag = f", {r['outlier']}" if r["outlier"] else ""
        out.append(Mark("findings", f"slow step {r['step']}: {format_ns(r['dur_ns'])} (#{rank[r['step']]} of "
                                    f"{len(rows)}{flag})", ts, r["dur_ns"],
                        {"finding": "slow step", "step": r["step"], "rank": rank[r["step"]],
                         "dur_ns": r["dur_ns"], "outlier": r["outlier"]}))
    return out


def _idle_gaps(trace: Trace, span: tuple[int, int] | None, top: int) -> list[Mark]:
    from opscope.analyses.gpu import GpuAnalysis
    from opscope.analyses.idle import longest_gaps

    analysis = GpuAnalysis(trace)
    if not analysis.has_work:
        return []
    out = []
    for g in longest_gaps(analysis, top).to_pylist():
        if not _overlaps(g["start_ns"], g["dur_ns"], span):
            continue
        share = 100.0 * g["cause_ns"] / g["dur_ns"] if g["dur_ns"] else 0.0
        out.append(Mark("findings", f"GPU {g['device']} idle {format_ns(g['dur_ns'])}: {g['cause']}",
                        g["start_ns"], g["dur_ns"],
                        {"finding": "idle gap", "device": g["device"], "dur_ns": g["dur_ns"], "cause": g["cause"],
                         "cause_pct": round(share, 1)}))
    return out


def _overlaps(ts: int, dur: int, span: tuple[int, int] | None) -> bool:
    return span is None or (ts < span[1] and ts + dur > span[0]) or (dur == 0 and span[0] <= ts < span[1])
