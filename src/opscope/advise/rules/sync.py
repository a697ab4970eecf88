"""Host-device synchronisation inside the step: the host blocks until the device drains its queue
(``.item()``, ``.cpu()``, ``.tolist()``, printing a tensor, blocking copies, explicit synchronize calls), so the
device then idles until the host has queued new work."""

from __future__ import annotations

from bisect import bisect_right

import pyarrow as pa
import pyarrow.compute as pc

from opscope.advise.context import AdviceContext
from opscope.advise.finding import Finding, NotApplicable, Rule
from opscope.analyses.idle import SYNC_CALLS, _name_match
from opscope.analyses.intervals import merged_intervals
from opscope.analyses.launch import op_ancestors
from opscope.model.schema import kind_mask
from opscope.render.units import format_ns

#: The rule fires when synchronisation costs at least this share of the step.
SAVING_SHARE = 0.01
TOP = 10


def sync_calls(ctx: AdviceContext) -> pa.Table:
    """The host's synchronising runtime calls inside the steps (the window without steps), with their row."""
    ev = ctx.trace.select(["kind", "name", "ts_ns", "dur_ns", "step"])
    mask = pc.and_(kind_mask(ev, ("runtime",)), _name_match(ev["name"], SYNC_CALLS))
    rows = pc.cast(pc.indices_nonzero(mask.combine_chunks() if isinstance(mask, pa.ChunkedArray) else mask),
                   pa.int64())
    calls = ev.take(rows).append_column("row", rows)
    if ctx.has_steps:
        calls = calls.filter(pc.is_valid(calls["step"]))
    return calls


def check(ctx: AdviceContext) -> list[Finding]:
    if ctx.gpu is None:
        raise NotApplicable("no GPU activity in this trace")
    calls = sync_calls(ctx)
    if calls.num_rows == 0:
        return []
    starts, ends = _busy(ctx)
    ops = _innermost(ctx, calls["row"].combine_chunks(), ("cpu_op",))
    frames = _python_frames(ctx, calls)
    step_start = dict(zip(ctx.trace.steps["step"].to_pylist(), ctx.trace.steps["ts_ns"].to_pylist()))
    rows, total = [], 0
    for i, (name, ts, dur, step) in enumerate(zip(*(calls[c].to_pylist() for c in ("name", "ts_ns", "dur_ns",
                                                                                 "step")))):
        end = ts + dur
        busy = _overlap(starts, ends, ts, end)
        idle_after = _idle_after(starts, ends, end)
        cost = (dur - busy) + min(idle_after, busy)
        total += cost
        rows.append({"step": step, "at_ns": ts - step_start.get(step, ctx.window[0]), "call": name,
                     "op": ops[i], "python": frames[i], "wait_ns": dur, "device_busy_ns": busy,
                     "idle_after_ns": idle_after, "cost_ns": cost})
    saving = ctx.per_step(total)
    if saving < SAVING_SHARE * ctx.step_ns:
        return []
    rows.sort(key=lambda r: -r["cost_ns"])
    causes = sorted({r["op"] for r in rows if r["op"]})
    return [Finding(
        rule=RULE.id,
        title=f"Host-device synchronisation: {len(rows)} blocking call(s) in the steps cost {format_ns(saving)} per "
              f"{ctx.unit}" + (f" (from {', '.join(causes[:3])})" if causes else ""),
        saving_ns=saving,
        saving_pct=ctx.pct(saving),
        estimate=(f"per call: the device's idle time while the host was blocked, plus the idle time after the call "
                  f"until new work arrived, at most the device time the host was waiting for (work the host could "
                  f"have queued meanwhile); {format_ns(total)} over {ctx.steps} {ctx.unit}(s)"),
        change=("keep values on the device inside the step: no .item()/.cpu()/.tolist()/print of tensors or "
                "torch.cuda.synchronize() in the loop; log metrics every N steps; copy with "
                ".to(device, non_blocking=True) from pinned memory; replace data-dependent shapes (nonzero, "
                "boolean masks) with fixed-size ops; torch.cuda.set_sync_debug_mode('warn') finds them"),
        evidence=rows[:TOP],
        evidence_title="synchronising calls, costliest first (op and python: what called them)",
    )]


def _busy(ctx: AdviceContext) -> tuple[list[int], list[int]]:
    """Merged busy intervals over all devices (busy when any device is)."""
    b = ctx.gpu.device_busy
    b = b.filter(pc.greater(b["end"], b["start"]))
    m = merged_intervals(pa.array([0] * b.num_rows, pa.int64()), b["start"].combine_chunks(),
                         b["end"].combine_chunks())
    return m["start"].to_pylist(), m["end"].to_pylist()


def _overlap(starts: list[int], ends: list[int], s: int, e: int) -> int:
    i = max(0, bisect_right(starts, s) - 1)
    total = 0
    while i < len(starts) and starts[i] < e:
        total += max(0, min(ends[i], e) - max(starts[i], s))
        i += 1
    return total


def _idle_after(starts: list[int], ends: list[int], t: int) -> int:
    """Time from ``t`` until the device is next busy (0 when it is busy at ``t``; none after: 0)."""
    i = bisect_right(starts, t) - 1
    if i >= 0 and ends[i] > t:
        return 0
    return starts[i + 1] - t if i + 1 < len(starts) else 0


def _innermost(ctx: AdviceContext, rows: pa.Array, kinds: tuple[str, ...]) -> list[str | None]:
    """Name of the innermost enclosing event of these kinds for each row (None when there is none)."""
    events = ctx.trace.select(["kind", "parent", "name"])
    index, found = op_ancestors(events, pc.cast(pc.take(events["parent"].combine_chunks(), rows), pa.int64()), kinds)
    names = pc.take(events["name"], found).cast(pa.string()).to_pylist() if len(found) else []
    out: list[str | None] = [None] * len(rows)
    for i, name in zip(index.to_pylist(), names):
        if out[i] is None:  # innermost first
            out[i] = name
    return out


def _python_frames(ctx: AdviceContext, calls: pa.Table) -> list[str | None]:
    """The innermost Python frame (``python`` event) running on each call's thread at its start (None without
    stacks). Python events nest among themselves, apart from the ops, so this is a search by time."""
    from opscope.analyses.views import innermost_enclosing, local_index, thread_keys, vocabulary

    events = ctx.trace.select(["kind", "ts_ns", "dur_ns", "pid", "tid", "parent", "name"])
    layer = kind_mask(events, ("python",))
    py = events.filter(layer)
    if py.num_rows == 0 or calls.num_rows == 0:
        return [None] * calls.num_rows
    rows = calls["row"].combine_chunks()
    pid, tid = pc.take(events["pid"], rows), pc.take(events["tid"], rows)
    pid_vocab, tid_vocab = vocabulary(py["pid"], pid), vocabulary(py["tid"], tid)
    spans = pa.table({"thread": thread_keys(py["pid"], py["tid"], pid_vocab, tid_vocab), "ts": py["ts_ns"],
                      "end": pc.add(py["ts_ns"], py["dur_ns"]),
                      "parent": pc.take(local_index(layer), pc.cast(py["parent"].combine_chunks(), pa.int64()))})
    queries = pa.table({"thread": thread_keys(pid, tid, pid_vocab, tid_vocab), "ts": calls["ts_ns"]})
    where = innermost_enclosing(spans, queries)
    return pc.take(py["name"], where).cast(pa.string()).to_pylist()


RULE = Rule(
    id="host-sync",
    title="Host-device synchronisation inside the step",
    explain=f"""\
Finds the host's synchronising runtime calls inside the steps: cudaStreamSynchronize, cudaDeviceSynchronize,
cudaEventSynchronize, blocking copies (cudaMemcpy without Async, hipMemcpyWithStream...) and their HIP/driver
equivalents. Each is shown with the op that made it (aten::item, aten::_local_scalar_dense, aten::nonzero,
aten::to/copy_ to the CPU...) and the Python frame around it when the trace has stacks. Fires when they cost
at least {SAVING_SHARE:.0%} of the step.

Estimated cost of one call = (the device's idle time while the host was blocked) + min(the device's idle time
from the end of the call until its next work, the device time the host was waiting for). The first part is
time the device had nothing to do although the host could have queued work; the second is the queue drained
by the sync: without it the host's next work would have been queued while the device was still busy, up to
the time it was busy. The saving is the sum per step. It assumes the value the host waits for is not needed
at once; when it is (a data-dependent branch), the fix is to move that decision to the device or later.""",
    check=check,
)
