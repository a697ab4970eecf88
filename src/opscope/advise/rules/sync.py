"""Host-device synchronisation inside the step: the host blocks until the device has drained its queue
(``.item()``, ``.cpu()``, ``.tolist()``, printing a tensor, ``if tensor:``, data-dependent shapes such as
``nonzero``, blocking copies, explicit synchronize calls), so the device then idles until the host has queued
new work.

A synchronisation is a blocking runtime call (cudaStreamSynchronize, cudaDeviceSynchronize,
cudaEventSynchronize, cudaMemcpy without Async, their hip/cu forms; see :data:`opscope.analyses.idle.SYNC_CALLS`),
a cudaMemcpyAsync/hipMemcpyAsync into pageable host memory (it returns only when the copy is done), or a
blocking sync record of the device timeline (Kineto's cuda_sync "Stream/Event/Context Sync") whose runtime call
the trace lacks. Each is shown with the ops around it and the Python frame that made it.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from opscope.advise.context import AdviceContext
from opscope.advise.finding import Finding, NotApplicable, Rule
from opscope.analyses.arrays import name_match
from opscope.analyses.idle import SYNC_CALLS
from opscope.analyses.intervals import merged_intervals, union_ns
from opscope.analyses.links import op_ancestors
from opscope.model.schema import kind_mask
from opscope.units import format_ns

#: The rule fires when synchronisation costs at least this share of the step.
SAVING_SHARE = 0.01
TOP = 10
#: Asynchronous copies that block the host all the same: device to pageable host memory.
ASYNC_COPY = r"^(cuda|hip)Memcpy\w*Async"
PAGEABLE_DTOH = r"(?i)DtoH.*Pageable|Device -> Pageable"
#: Device-timeline sync records that stand for a blocking host call (not "Stream Wait Event": device-side).
BLOCKING_RECORD = r"^(Stream|Event|Context|Device) Sync"
#: Python frames that say where in the user's code the sync was made: not built-ins, not torch's own files.
_INTERNAL_FRAME = re.compile(r"^<built-in|^nn\.Module:|(^|/)torch/|^<frozen ")

#: What to do about a sync, by the op (or call) that made it.
CHANGE_FOR = (
    (re.compile(r"aten::(cudnn|miopen)\w*convolution"),
     "syncs inside cuDNN/MIOpen convolutions are the autotuner (torch.backends.cudnn.benchmark = True) timing "
     "candidate algorithms the first time it meets an input shape: warm-up; profile later steps, and keep input "
     "shapes fixed (pad or bucket them) so it runs once"),
    (re.compile(r"aten::(item|_local_scalar_dense|is_nonzero)$"),
     ".item(), float(t), bool(t) and `if t:` read a device value on the host: keep it on the device "
     "(accumulate losses and metrics as tensors, read them every N steps; torch.where instead of a Python if)"),
    (re.compile(r"aten::(nonzero|argwhere|masked_select|unique\w*|_unique2|repeat_interleave|index|index_put_)$"),
     "data-dependent output sizes (nonzero, boolean-mask indexing, unique) make the host wait for the size: use "
     "fixed-size forms (torch.where, multiplying by the mask, torch.nonzero_static)"),
    (re.compile(r"aten::(to|_to_copy|copy_|cpu|numpy|tolist)$"),
     ".cpu(), .to('cpu'), .numpy(), .tolist() and print(t) wait for the device: do them every N steps, or copy "
     "with .to('cpu', non_blocking=True) into pinned memory and wait on a torch.cuda.Event later"),
    (re.compile(r"(cuda|hip|cu)(Device|Ctx|Thread)Synchronize|Context Sync|Device Sync"),
     "torch.cuda.synchronize() in the loop (timing code?): remove it, or time with torch.cuda.Event pairs read "
     "after the loop"),
    (re.compile(r"(cuda|hip|cu)EventSynchronize|Event Sync"),
     "event.synchronize() or event.elapsed_time() in the loop: read timings after the loop"),
)
GENERAL_CHANGE = "torch.cuda.set_sync_debug_mode('warn') reports every synchronising call with its Python line"


@dataclass
class Sync:
    """One blocking call: when, where, and (filled in by the rule) what it cost."""

    call: str
    ts: int
    dur: int
    step: int | None
    device: int | None  # the device it waited for, when the trace says
    op: str | None = None
    python: str | None = None


def sync_calls(ctx: AdviceContext) -> list[Sync]:
    """The synchronisations inside the steps (the whole trace without steps), in time order."""
    ev = ctx.trace.select(["kind", "name", "ts_ns", "dur_ns", "step", "pid", "tid", "correlation", "external_id",
                           "device", "parent"])
    runtime = kind_mask(ev, ("runtime",))
    copies = ev.filter(pc.and_(kind_mask(ev, ("memcpy",)), name_match(ev["name"], PAGEABLE_DTOH)))
    pageable = pc.drop_null(copies["correlation"]).combine_chunks() if copies.num_rows else pa.array([], pa.int64())
    blocking = pc.or_(name_match(ev["name"], SYNC_CALLS),
                      pc.and_(name_match(ev["name"], ASYNC_COPY),
                              pc.fill_null(pc.is_in(ev["correlation"], value_set=pageable), False)))
    call_rows = _rows(pc.and_(runtime, blocking))
    records = _rows(kind_mask(ev, ("sync",)))
    rec = ev.take(records)
    # the device each runtime call waited for, from its sync record (same correlation id)
    rec_device = {c: d for c, d in zip(rec["correlation"].to_pylist(), rec["device"].to_pylist())
                  if c is not None and d is not None and d >= 0}
    # records without a runtime call in the trace stand for the call when they are blocking kinds
    runtime_corr = pc.drop_null(ev.filter(runtime)["correlation"]).combine_chunks()
    orphan = pc.and_(name_match(rec["name"], BLOCKING_RECORD),
                     pc.invert(pc.fill_null(pc.is_in(rec["correlation"], value_set=runtime_corr), False)))
    orphans = pc.filter(records, orphan)
    # an orphan's host side: the cpu_op with its external id (how Kineto links them)
    ops = ev.filter(kind_mask(ev, ("cpu_op",)))
    op_rows = _rows(kind_mask(ev, ("cpu_op",)))
    host_of = dict(zip(ops["external_id"].to_pylist(), op_rows.to_pylist()))
    step_spans = list(zip(ctx.trace.steps["step"].to_pylist(), ctx.trace.steps["ts_ns"].to_pylist(),
                          ctx.trace.steps["dur_ns"].to_pylist()))

    calls: list[Sync] = []
    starts: list[int | None] = call_rows.to_pylist()  # the host row each one's ops are found from
    where: list[tuple[int | None, str | None, str | None]] = []  # (ts, pid, tid) for the Python frame
    for r in ev.take(call_rows).to_pylist():
        calls.append(Sync(r["name"], r["ts_ns"], r["dur_ns"], r["step"], rec_device.get(r["correlation"])))
        where.append((r["ts_ns"], r["pid"], r["tid"]))
    for r in ev.take(orphans).to_pylist():
        host = host_of.get(r["external_id"]) if r["external_id"] is not None else None
        step = next((n for n, s, d in step_spans if s <= r["ts_ns"] < s + d), None)
        device = r["device"] if r["device"] is not None and r["device"] >= 0 else None
        calls.append(Sync(f"{r['name']} (record; no runtime call in the trace)", r["ts_ns"], r["dur_ns"], step,
                          device))
        starts.append(host)
        if host is None:
            where.append((None, None, None))
        else:
            h = ev.slice(host, 1).to_pylist()[0]
            where.append((r["ts_ns"], h["pid"], h["tid"]))
    chains = _op_chains(ctx, starts)
    frames = _python_frames(ctx, where)
    for c, chain, frame in zip(calls, chains, frames):
        c.op, c.python = chain, frame
    keep = [c for c in calls if c.step is not None or not ctx.has_steps]
    return sorted(keep, key=lambda c: c.ts)


def check(ctx: AdviceContext) -> list[Finding]:
    if ctx.gpu is None:
        raise NotApplicable("no GPU activity in this trace")
    calls = sync_calls(ctx)
    if not calls:
        return []
    busy, blocked = _busy(ctx), _blocked(ctx)
    devices = sorted(busy) or [None]
    call_starts = [c.ts for c in calls]
    step_start = dict(zip(ctx.trace.steps["step"].to_pylist(), ctx.trace.steps["ts_ns"].to_pylist()))
    rows, free = [], {d: [] for d in devices}
    for c in calls:
        end = c.ts + c.dur
        nxt = bisect_left(call_starts, end)
        next_call = call_starts[nxt] if nxt < len(call_starts) else None
        best = None
        for d in ([c.device] if c.device in busy else devices):
            starts, ends = busy.get(d, ([], []))
            drained = _overlap(starts, ends, c.ts, end)
            waiting = _free(*blocked.get(d, ([], [])), c.ts, end)
            idle_during = sum(e - s for s, e in waiting)
            after = _idle_after(starts, ends, end, next_call)
            counted = min(after, drained)
            free[d] += waiting + ([(end, end + counted)] if counted else [])
            cost = idle_during + counted
            if best is None or cost > best[-1]:
                best = (d, drained, idle_during, after, cost)
        d, drained, idle_during, after, cost = best
        rows.append({"step": c.step, "at_ns": c.ts - step_start.get(c.step, ctx.window[0]), "device": d,
                     "call": c.call, "op": c.op, "python": c.python, "wait_ns": c.dur, "drained_ns": drained,
                     "idle_during_ns": idle_during, "idle_after_ns": after, "cost_ns": cost})
    # overlapping calls count once
    totals = {d: union_ns(pa.array([a for a, _ in free[d]], pa.int64()),
                          pa.array([b - a for a, b in free[d]], pa.int64())) for d in devices}
    device = max(devices, key=lambda d: totals[d])
    total = totals[device]
    saving = ctx.per_step(total)
    if saving < SAVING_SHARE * ctx.step_ns:
        return []
    rows.sort(key=lambda r: -r["cost_ns"])
    top = rows[0]
    site = " at ".join(p for p in (top["op"] or top["call"], top["python"]) if p)
    sync_idle = _sync_idle(ctx, device)
    on = f" on GPU {device}" if device is not None and len(devices) > 1 else ""
    return [Finding(
        rule=RULE.id,
        title=f"Host-device synchronisation: {len(rows) / ctx.steps:.3g} blocking call(s) per {ctx.unit} cost "
              f"{format_ns(saving)}{on} (costliest: {site})",
        saving_ns=saving,
        saving_pct=ctx.pct(saving),
        estimate=(f"per call, on the device it waited for: idle_during_ns (the device idle while the host was "
                  f"blocked, with nothing launched waiting to start) + min(idle_after_ns (the device idle from the "
                  f"call's end until its next work, cut at the next sync), drained_ns (the device work the host "
                  f"waited for): without the sync the host would have queued its next work while that ran); "
                  f"overlapping calls count once: {format_ns(total)} over {ctx.steps} {ctx.unit}(s){on}. For "
                  f"comparison, the gpu-idle rule files {format_ns(ctx.per_step(sync_idle))} per {ctx.unit} of this "
                  f"device's idle time under sync (all idle while the host is in any synchronising call)"),
        change="; ".join(_changes(rows) + [GENERAL_CHANGE]),
        evidence=rows[:TOP],
        evidence_title=("blocking calls, costliest first: at_ns from the step's start; op: the ops around the call, "
                        "outermost first; python: the innermost frame of the user's code"),
    )]


def _changes(rows: list[dict]) -> list[str]:
    out, cost = [], {}
    for r in rows:
        for i, (pattern, _) in enumerate(CHANGE_FOR):
            if any(pattern.search(part) for part in (r["op"] or "").split(" > ") + [r["call"]]):
                cost[i] = cost.get(i, 0) + r["cost_ns"]
                break
    for i in sorted(cost, key=lambda i: -cost[i]):
        out.append(CHANGE_FOR[i][1])
    return out


# --- device time -------------------------------------------------------------------------------------------

def _busy(ctx: AdviceContext) -> dict[int, tuple[list[int], list[int]]]:
    """Per device, its busy intervals (merged over streams, clipped to the window), in time order."""
    b = ctx.gpu.device_busy
    return _per_group(b.filter(pc.greater(b["end"], b["start"])))


def _per_group(intervals: pa.Table) -> dict[int, tuple[list[int], list[int]]]:
    """``group, start, end`` rows -> per group, its starts and ends in time order."""
    out: dict[int, tuple[list[int], list[int]]] = {}
    for d, s, e in sorted(zip(intervals["group"].to_pylist(), intervals["start"].to_pylist(),
                              intervals["end"].to_pylist())):
        starts, ends = out.setdefault(d, ([], []))
        starts.append(s)
        ends.append(e)
    return out


def _overlap(starts: list[int], ends: list[int], s: int, e: int) -> int:
    i = max(0, bisect_right(starts, s) - 1)
    total = 0
    while i < len(starts) and starts[i] < e:
        total += max(0, min(ends[i], e) - max(starts[i], s))
        i += 1
    return total


def _idle_after(starts: list[int], ends: list[int], t: int, limit: int | None) -> int:
    """Idle time from ``t`` until the device is next busy, cut at ``limit`` (the next sync); 0 when the device is
    busy at ``t`` or never again."""
    i = bisect_right(starts, t) - 1
    if i >= 0 and ends[i] > t:
        return 0
    if i + 1 >= len(starts):
        return 0
    nxt = starts[i + 1]
    if limit is not None:
        nxt = min(nxt, max(limit, t))
    return nxt - t


def _blocked(ctx: AdviceContext) -> dict[int, tuple[list[int], list[int]]]:
    """Per device, when it could not have taken new work from the host: busy, or holding launched work that had
    not started yet (waiting on something else: another stream, an event, work the trace does not show)."""
    b = ctx.gpu.device_busy
    t = ctx.gpu.work.table
    pending = t.filter(pc.fill_null(pc.less(t["launch"], t["raw_start"]), False))
    w0, w1 = ctx.gpu.work.window_start, ctx.gpu.work.window_end
    group = pa.concat_arrays([b["group"].combine_chunks().cast(pa.int64()),
                              pending["device"].combine_chunks().cast(pa.int64())])
    start = pa.concat_arrays([b["start"].combine_chunks(),
                              pc.max_element_wise(pending["launch"].combine_chunks(), w0)])
    end = pa.concat_arrays([b["end"].combine_chunks(),
                            pc.min_element_wise(pending["raw_start"].combine_chunks(), w1)])
    keep = pc.greater(end, start)
    return _per_group(merged_intervals(pc.filter(group, keep), pc.filter(start, keep), pc.filter(end, keep)))


def _free(starts: list[int], ends: list[int], a: int, b: int) -> list[tuple[int, int]]:
    """The parts of [a, b) outside the intervals (starts, ends), in order."""
    out, t = [], a
    i = max(0, bisect_right(starts, a) - 1)
    while i < len(starts) and starts[i] < b:
        if ends[i] > t:
            if starts[i] > t:
                out.append((t, starts[i]))
            t = max(t, ends[i])
        i += 1
    if t < b:
        out.append((t, b))
    return out


def _sync_idle(ctx: AdviceContext, device: int | None) -> int:
    idle = ctx.idle
    rows = idle.filter(pc.and_(pc.equal(idle["device"], device if device is not None else -1),
                               pc.equal(idle["cause"], "sync")))
    return sum(rows["idle_ns"].to_pylist())


# --- who made the call -------------------------------------------------------------------------------------

def _rows(mask) -> pa.Array:
    mask = mask.combine_chunks() if isinstance(mask, pa.ChunkedArray) else mask
    return pc.cast(pc.indices_nonzero(mask), pa.int64())


def _op_chains(ctx: AdviceContext, starts: list[int | None]) -> list[str | None]:
    """For each start row (a runtime call, or an op), the cpu_ops around it from the outermost to the innermost,
    as "outer > ... > inner" (at most the outermost two and the innermost two); None without ops."""
    events = ctx.trace.select(["kind", "parent", "name"])
    known = [i for i, s in enumerate(starts) if s is not None]
    chains: list[list[str]] = [[] for _ in starts]
    if known:
        index, found = op_ancestors(events, pa.array([starts[i] for i in known], pa.int64()), ("cpu_op",))
        names = pc.take(events["name"], found).cast(pa.string()).to_pylist() if len(found) else []
        for i, name in zip(index.to_pylist(), names):  # innermost first
            chains[known[i]].append(name)
    out = []
    for chain in chains:
        chain = chain[::-1]
        if len(chain) > 4:
            chain = chain[:2] + ["..."] + chain[-2:]
        out.append(" > ".join(chain) if chain else None)
    return out


def _python_frames(ctx: AdviceContext, where: list[tuple[int | None, str | None, str | None]]) -> list[str | None]:
    """The innermost Python frame of the user's code (not a built-in, not torch's own files) running on each
    call's thread when it began; the innermost frame of any kind when there is none; None without stacks."""
    from opscope.analyses.arrays import local_index, thread_keys, vocabulary
    from opscope.analyses.intervals import innermost_enclosing

    events = ctx.trace.select(["kind", "ts_ns", "dur_ns", "pid", "tid", "parent", "name"])
    layer = kind_mask(events, ("python",))
    py = events.filter(layer)
    known = [i for i, w in enumerate(where) if w[0] is not None]
    out: list[str | None] = [None] * len(where)
    if py.num_rows == 0 or not known:
        return out
    pid = pa.array([where[i][1] for i in known], pa.string())
    tid = pa.array([where[i][2] for i in known], pa.string())
    pid_vocab, tid_vocab = vocabulary(py["pid"], pid), vocabulary(py["tid"], tid)
    names = py["name"].combine_chunks().cast(pa.string())
    user = pa.array([not _INTERNAL_FRAME.search(n or "") for n in names.to_pylist()], pa.bool_())
    spans = pa.table({"thread": thread_keys(py["pid"], py["tid"], pid_vocab, tid_vocab), "ts": py["ts_ns"],
                      "end": pc.add(py["ts_ns"], py["dur_ns"]),
                      "parent": pc.take(local_index(layer), pc.cast(py["parent"].combine_chunks(), pa.int64()))})
    queries = pa.table({"thread": thread_keys(pid, tid, pid_vocab, tid_vocab),
                        "ts": pa.array([where[i][0] for i in known], pa.int64())})
    mine = innermost_enclosing(spans.append_column("accept", user), queries)
    any_frame = innermost_enclosing(spans, queries)
    chosen = pc.coalesce(mine, any_frame)
    for i, name in zip(known, pc.take(names, chosen).to_pylist()):
        out[i] = name
    return out


RULE = Rule(
    id="host-sync",
    title="Host-device synchronisation inside the step",
    explain=f"""\
Finds where the host waits for the device inside the steps (the whole trace without steps): blocking runtime
calls (cudaStreamSynchronize, cudaDeviceSynchronize, cudaEventSynchronize, cudaMemcpy without Async and their
hip/cu forms), cudaMemcpyAsync/hipMemcpyAsync into pageable host memory (they return only when the copy is
done), and Kineto's cuda_sync records (Stream/Event/Context Sync) whose runtime call the trace lacks (not
"Stream Wait Event", which makes a stream wait on the device, not the host; and an Event Sync record without its
call may stand for a non-blocking cudaEventQuery). Each is shown with the ops around it (aten::item >
aten::_local_scalar_dense, aten::nonzero, aten::to/copy_ to the CPU...) and the innermost Python frame of the
user's code when the trace has stacks. Fires when they cost at least {SAVING_SHARE:.0%} of the step.

Cost of one call, on the device it waited for (its sync record says which; else each device, the costliest
counted): idle_during + min(idle_after, drained), where
- idle_during: the device's idle time while the host was blocked, leaving out stretches where launched work
  was waiting to start (the device was then held up by something else: another stream, an event, work the
  trace does not show; removing the sync would not have fed it). This is the part of the idle the gpu-idle
  rule files under "sync" that a sync is to blame for.
- idle_after: the device's idle time from the end of the call until its next work, cut at the next sync (whose
  own wait counts there): the queue the sync drained, refilled only as fast as the host launches.
- drained: the device work the host waited for. Without the sync the host would have queued its next work
  while that work ran, so at most that much of idle_after is saved.
Calls that overlap (two threads) count once. The saving is the total per step. It assumes the value waited
for is not needed at once; when it is (a data-dependent branch), the fix is to move that decision to the
device or to a later step.""",
    check=check,
)
