"""Low accelerator utilization: the device idles for a large part of each step.

Evidence: the idle time per step split by cause (from :func:`opscope.analyses.idle.idle_causes`, with the time the
dependency graph says was spent waiting on work the trace does not show given as a cause of its own) and the
longest idle gaps with the step they fall in, so an injected or accidental stall can be found on the timeline,
each with what the host was doing meanwhile, read from the graph (:mod:`opscope.analyses.gap_causes`).
"""

from __future__ import annotations

import re
from bisect import bisect_left
from dataclasses import dataclass
from typing import NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from opscope.advise.context import AdviceContext
from opscope.advise.finding import Finding, NotApplicable, Rule
from opscope.analyses.arrays import arange, combined, int64_values, kept_rows, name_match, rows_equal, share_pct
from opscope.analyses.depgraph import dependency_graph
from opscope.analyses.gap_causes import GapCause, gap_causes, host_by_cause, prepare_gap_causes, unseen_by_cause
from opscope.analyses.gpu import has_device_work
from opscope.analyses.intervals import clip, is_sorted, union_ns
from opscope.model.schema import kind_mask
from opscope.units import format_ns

#: The cause of idle time the graph says was waiting on work the trace does not show.
UNSEEN = "waiting on unseen work"
#: The rule fires when a device is idle for at least this share of the window.
IDLE_SHARE = 0.10
#: Longest gaps shown as evidence.
TOP_GAPS = 5
#: A cause's change is suggested when it holds at least this share of the idle time (the largest always is).
CAUSE_SHARE = 0.2
#: Host events that are not the host's work: the step markers.
STEP_MARKER = r"^ProfilerStep#"

#: What to change, per cause of idle time.
CHANGE_FOR = {
    "sync": "remove host-device synchronisation inside the step (see the host-sync finding)",
    "input_pipeline": "overlap data loading with compute (see the input-pipeline finding)",
    "launch_overhead": ("launch fewer, larger kernels: a CUDA/HIP graph or the framework's compiler (see the "
                        "launch-bound finding)"),
    "kernel_gap": ("the queue was full yet the device paused between kernels: fuse small kernels (the framework's "
                   "compiler: torch.compile, XLA)"),
    "host_wait": "the host launched nothing: look at the host ops running in these gaps (opscope ops --steps N)",
    "other": "open the trace in Perfetto (ui.perfetto.dev) at the longest gaps below to see what the host was doing",
    UNSEEN: ("the device waited on work the trace does not show (another process, or streams, graphs or ranks the "
             "profiler did not record): profile everything that shares the device; opscope whatif --change "
             "idle:unexplained=0 tells what the wait costs"),
}


def _causes(ctx: AdviceContext, device: int, unseen: dict[str, int],
            host: dict[str, list[tuple[str, int]]]) -> list[dict]:
    """The device's idle time by cause, largest first, with the time the graph says the work was waiting on work
    the trace does not show taken out of the cause it fell in and given as a cause of its own: a host in a
    synchronising call then is not blamed for what held up the work it waited for."""
    rows = ctx.idle.filter(pc.equal(ctx.idle["device"], device)).to_pylist()
    causes = [{"cause": r["cause"], "idle_ns": r["idle_ns"] - unseen.get(r["cause"], 0),
               "host": [{"name": n, "ns": ctx.per_step(ns)} for n, ns in host.get(r["cause"], [])]} for r in rows]
    if sum(unseen.values()):
        causes.append({"cause": UNSEEN, "idle_ns": sum(unseen.values()), "host": []})
    return sorted((c for c in causes if c["idle_ns"] > 0), key=lambda c: -c["idle_ns"])


def _said(names: list[dict]) -> str | None:
    """The first name and its time, short: the table's text (the JSON has them all)."""
    return f"{_short(names[0]['name'])} ({format_ns(names[0]['ns'])})" if names else None


def _short(name: str) -> str:
    """A Python frame without its file's folders (``.../cuda_graph_runner.py(276): replay``: the JSON has it)."""
    return re.sub(r"^\S*[/\\](?=[^/\\\s]+\.py\(\d+\))", "", name)


def _gap_said(why: GapCause) -> str | None:
    """A gap in words: the wait on unseen work first when there was one, else what the launching thread did."""
    doing = next(((n, ns) for n, _, ns in why.names), None)
    if why.unseen_ns and 2 * why.unseen_ns >= why.end - why.start:
        said = f"waiting on work the trace does not show ({format_ns(why.unseen_ns)})"
        return said + (f"; host in {_short(doing[0])}" if doing else "")
    if doing is None:
        return None
    return f"{_short(doing[0])} ({format_ns(doing[1])})" + (f" in {_short(why.frame)}" if why.frame else "")


def check(ctx: AdviceContext) -> list[Finding]:
    if not has_device_work(ctx.trace):
        raise NotApplicable("no GPU activity in this trace")
    # the graph first, the longest part of this rule: the device work (ctx.gpu), which the next rules read too, is
    # prepared meanwhile by the thread that runs them (1 GB trace: this rule was the last to end by 0.6 s)
    dependency_graph(ctx.trace)
    findings = []
    host = host_events(ctx)
    unseen = unseen_by_cause(ctx.trace, ctx.gpu)
    by_cause = host_by_cause(ctx.trace)
    for row in ctx.breakdown.to_pylist():
        device, window, idle = row["device"], row["window_ns"], row["idle_ns"]
        if not window or idle < IDLE_SHARE * window:
            continue
        causes = _causes(ctx, device, unseen.get(device, {}), by_cause)
        # a cause's share is of the window (its idle time is a part of the window's: never above 100%)
        evidence = [{"what": f"idle: {c['cause']}", "step": None, "at_ns": None,
                     "idle_ns": ctx.per_step(c["idle_ns"]), "in_step_ns": None,
                     "step_pct": share_pct(c["idle_ns"], window),
                     "unseen_ns": None, "host": _said(c["host"]), "host_names": c["host"], "thread": None,
                     "frame": None, "host_busy_pct": None, "host_op": None}
                    for c in causes]
        gaps = longest_gaps(ctx, device)
        read = gap_causes(ctx.trace, [(device, g.start, g.start + g.length) for g in gaps])
        # a gap's share is of the step it names: its part inside that step over that step's duration
        evidence += [{"what": "gap", "step": g.step, "at_ns": g.at_ns, "idle_ns": g.length,
                      "in_step_ns": g.in_step_ns, "step_pct": share_pct(g.in_step_ns, g.step_ns),
                      "unseen_ns": why.unseen_ns, "host": _gap_said(why),
                      "host_names": [{"name": n, "kind": k, "ns": ns} for n, k, ns in why.names],
                      "thread": why.thread, "frame": why.frame, **host_during(host, g.start, g.length)}
                     for g, why in zip(gaps, read)]
        saving = ctx.per_step(idle)
        named = [c for i, c in enumerate(causes) if i == 0 or c["idle_ns"] >= CAUSE_SHARE * idle]
        change = "; ".join(f"{c['cause']} ({100.0 * c['idle_ns'] / idle:.0f}% of the idle time): "
                           f"{CHANGE_FOR[c['cause']]}" for c in named) or CHANGE_FOR["other"]
        findings.append(Finding(
            rule=RULE.id,
            title=f"GPU {device} is idle {100.0 * idle / window:.1f}% of the time "
                  f"({format_ns(saving)} per {ctx.unit})",
            saving_ns=saving,
            saving_pct=ctx.pct(saving),
            estimate=(f"upper bound: the device's idle time in the window ({format_ns(idle)} over {ctx.steps} "
                      f"{ctx.unit}(s)); a step cannot shrink by more than the time its device waits, and only "
                      f"if the host can keep it fed. The cause-specific findings claim parts of the same time."),
            remedy=change,
            evidence=evidence,
            evidence_title="idle time per step by cause (step_pct: its share of the window), then the longest gaps "
                           "(step: the step the gap starts in; at_ns: from that step's start; idle_ns: the whole "
                           "gap; in_step_ns: its part inside that step, less where it runs past the step's end; "
                           "step_pct: in_step_ns over that step's duration; "
                           "unseen_ns: of the gap, the work after it waiting on work the trace does not show; "
                           "host: what the thread that launched it was doing, the innermost named event and its "
                           "time in the gap; host_busy_pct: share of the gap covered by host ops and runtime calls "
                           "of any thread)",
        ))
    return findings


class Gap(NamedTuple):
    """One idle gap of a device inside the window."""

    step: int | None  #: the step it starts in (None: between steps, or a trace without steps)
    at_ns: int  #: its start from that step's start (from the window's start without a step)
    length: int  #: the whole gap, wherever it ends
    start: int  #: its absolute start
    in_step_ns: int | None  #: its part inside the step (the window without steps); None between steps
    step_ns: int | None  #: that step's duration (the window's without steps); None between steps


def longest_gaps(ctx: AdviceContext, device: int, top: int = TOP_GAPS) -> list[Gap]:
    """The ``top`` longest idle gaps of a device inside the window, longest first, each with the step it starts in
    and its part inside that step (:class:`Gap`)."""
    busy = rows_equal(ctx.gpu.device_not_idle, "group", device)  # unseen busy time is no gap
    busy = kept_rows(busy, pc.greater(busy["end"], busy["start"]))
    w0, w1 = ctx.window
    # Columns, not a Python tuple per busy interval: a long trace has hundreds of thousands of them.
    edges_start = pa.concat_arrays([pa.array([w0], pa.int64()), combined(busy["end"]).cast(pa.int64())])
    edges_end = pa.concat_arrays([combined(busy["start"]).cast(pa.int64()), pa.array([w1], pa.int64())])
    length = pc.subtract(edges_end, edges_start)
    keep = pc.greater(length, 0)
    starts, lengths = pc.filter(edges_start, keep), pc.filter(length, keep)
    # longest first; equal lengths in time order (the first ``top`` of the gaps sorted so, not all of them sorted)
    order = pa.array([], pa.uint64())
    if len(lengths):
        order = pc.select_k_unstable(pa.table({"len": lengths, "at": arange(len(lengths))}), top,
                                     [("len", "descending"), ("at", "ascending")])
    gaps = list(zip(pc.take(starts, order).to_pylist(), pc.take(lengths, order).to_pylist()))
    steps = ctx.trace.steps
    spans = list(zip(steps["step"].to_pylist(), steps["ts_ns"].to_pylist(), steps["dur_ns"].to_pylist()))
    out = []
    for start, length in gaps[:top]:
        if not spans:  # the window is the one "step" of a trace without steps
            out.append(Gap(None, start - w0, length, start, min(start + length, w1) - start, w1 - w0))
            continue
        found = next(((number, ts, dur) for number, ts, dur in spans if ts <= start < ts + dur), None)
        if found is None:
            out.append(Gap(None, start - w0, length, start, None, None))
            continue
        number, ts, dur = found
        out.append(Gap(number, start - ts, length, start, min(start + length, ts + dur) - start, dur))
    return out


@dataclass(frozen=True)
class HostEvents:
    """Host ops, annotations and runtime calls (any thread) without the step markers: the events' columns and a mask
    of those rows, not a copy of them (a 1 GB trace has ~2 M), with the longest one's duration, so that a gap reads
    only the rows that can reach it (the events are in time order: those that start at most that long before it)."""

    events: pa.Table  #: kind, name, ts_ns, dur_ns of every event
    mask: pa.Array  #: the host events among them
    starts: memoryview | None  #: ts_ns, searchable; None where the rows are not in time order (every row is read)
    longest: int


def host_events(ctx: AdviceContext) -> HostEvents:
    """The host events of the trace (:class:`HostEvents`)."""
    ev = ctx.trace.select(["kind", "name", "ts_ns", "dur_ns"])
    mask = combined(pc.and_(pc.fill_null(kind_mask(ev, ("cpu_op", "runtime", "user_annotation")), False),
                            pc.invert(pc.fill_null(name_match(ev["name"], STEP_MARKER), False))))
    ts = combined(ev["ts_ns"])
    starts = int64_values(ts) if ts.null_count == 0 and is_sorted(ts) else None
    longest = pc.max(pc.filter(combined(ev["dur_ns"]), mask)).as_py() or 0
    return HostEvents(ev, mask, starts, max(0, longest))


def host_during(host: HostEvents, start: int, length: int) -> dict:
    """What the host did during a gap: the share of it covered by ``host`` events (:func:`host_events`), and
    the one covering the most of it (the innermost one on a tie)."""
    first, last = 0, host.events.num_rows
    if host.starts is not None:  # the rows that start in [start - longest, start + length): all that can overlap it
        first = bisect_left(host.starts, start - host.longest)
        last = bisect_left(host.starts, start + length)
    rows = host.events.slice(first, last - first).filter(host.mask.slice(first, last - first))
    inside, lo, hi = clip(rows["ts_ns"], rows["dur_ns"], start, start + length)
    if len(lo) == 0 or not length:
        return {"host_busy_pct": 0.0 if length else None, "host_op": None}
    names, durs = pc.filter(rows["name"], inside), pc.filter(rows["dur_ns"], inside)
    overlap = pc.subtract(hi, lo)
    covered = union_ns(lo, overlap)
    # the largest overlap; among equal ones the shortest event (the innermost of nested ops)
    order = pc.sort_indices(pa.table({"o": overlap, "d": durs}), [("o", "descending"), ("d", "ascending")])
    best = order[0].as_py()
    return {"host_busy_pct": round(100.0 * covered / length, 2), "host_op": names[best].as_py()}


def _work_after_gaps(ctx: AdviceContext) -> None:
    """What the gap causes read besides the gaps, computed ahead (a trace without device work has no gaps)."""
    if ctx.gpu is not None:
        prepare_gap_causes(ctx.trace)


RULE = Rule(
    id="gpu-idle",
    title="Low accelerator utilization",
    explain=f"""\
Fires when a device is idle for at least {IDLE_SHARE:.0%} of the window (first ProfilerStep start to last
ProfilerStep end; the whole trace without steps). Busy = union of its kernels, copies, memsets and collectives
over all streams, so overlapping work counts once.

Estimated saving = the device's idle time per step. This is an upper bound: a step cannot get shorter by more
than the time its device waits, and it gets that much shorter only if the host can keep the device fed.

Evidence: idle time per step by cause (each idle nanosecond has one cause, the first that holds: sync, the
host in a synchronising call; input_pipeline, the host in the DataLoader; launch_overhead, a short gap whose
next work was launched after the gap began; kernel_gap, a short gap with the next work already queued;
host_wait, nothing launched yet; other), less the time the dependency graph says the work after the idle
stretch was waiting on work the trace does not show (it started longer after its launch or its stream allowed
than launching and queueing explain), which is its own row, "waiting on unseen work", whatever the host did
meanwhile; each cause with the host's time inside it by name (what opscope whatif --change idle:CAUSE=0
removes) and its share of the window. Then the {TOP_GAPS} longest gaps with the step each starts in and its
offset from that step's start; a gap's share (step_pct) is of that step alone: the part of the gap inside the
step over the step's duration (a gap that runs into the next step counts only up to the step's end; without
steps, the window is the step), so it never exceeds 100%; a gap that starts between steps has none. For each,
the part spent waiting on unseen work, and what the thread that launched the work after it was doing: each instant
charged to the innermost op, annotation, runtime call or Python frame open over it (built-ins and step marks
passed over), the name with the most time and the program's Python frame around it; also the share of the gap
that host ops, annotations and runtime calls of any thread cover. The suggested change covers every cause
holding at least {CAUSE_SHARE:.0%} of the idle time; it points to another finding only where there is one.
The input-pipeline, host-sync and launch-bound rules each claim a part of the same idle time, so their savings
are not to be added to this one.""",
    check=check,
    not_simulated=("an upper bound over all of the device's idle time, whatever its cause; the cause-specific "
                   'findings are simulated where they can be'),
    # the idle time by cause and the work after each gap: neither waits for the graph's idle parts
    prepare=(lambda ctx: ctx.idle, _work_after_gaps),
)
