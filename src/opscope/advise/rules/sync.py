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
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from opscope.advise.context import AdviceContext
from opscope.advise.finding import Finding, NotApplicable, Rule
from opscope.advise.remedies import SYNC, framework, remedy
from opscope.analyses.intervals import union_ns
from opscope.units import format_ns

#: The rule fires when synchronisation costs at least this share of the step.
SAVING_SHARE = 0.01
TOP = 10
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


def check(ctx: AdviceContext) -> list[Finding]:
    if ctx.gpu is None:
        raise NotApplicable("no GPU activity in this trace")
    calls = ctx.sync_calls
    if not calls:
        return []
    busy, blocked = _busy(ctx), _blocked(ctx)
    devices: list[int | None] = [*sorted(busy)] or [None]  # None: no device ran work
    call_starts = [c.ts for c in calls]
    step_start = dict(zip(ctx.trace.steps["step"].to_pylist(), ctx.trace.steps["ts_ns"].to_pylist()))
    rows: list[dict[str, Any]] = []
    free: dict[int | None, list[tuple[int, int]]] = {d: [] for d in devices}
    for c in calls:
        end = c.ts + c.dur
        nxt = bisect_left(call_starts, end)
        next_call = call_starts[nxt] if nxt < len(call_starts) else None
        options = []  # per device it may have waited for: (device, drained, idle_during, after, cost)
        for d in ([c.device] if c.device in busy else devices):
            starts, ends = busy[d] if d in busy else ([], [])  # noqa: SIM401 - d is None when no device ran work
            drained = _overlap(starts, ends, c.ts, end)
            waiting = _free(*(blocked[d] if d in blocked else ([], [])), c.ts, end)  # noqa: SIM401 - as above
            idle_during = sum(e - s for s, e in waiting)
            after = _idle_after(starts, ends, end, next_call)
            counted = min(after, drained)
            free[d] += waiting + ([(end, end + counted)] if counted else [])
            options.append((d, drained, idle_during, after, idle_during + counted))
        # the costliest, the first of equals (one option at least: devices is never empty)
        d, drained, idle_during, after, cost = max(options, key=lambda o: o[-1])
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
        # the call-specific remedies are PyTorch's (aten ops): other frameworks get their own general one
        remedy="; ".join((_changes(rows) if framework(ctx.trace) in ("pytorch", None) else [])
                         + [remedy(SYNC, ctx.trace)]),
        change="sync=0",
        evidence=rows[:TOP],
        evidence_title=("blocking calls, costliest first: at_ns from the step's start; op: the ops around the call, "
                        "outermost first; python: the innermost frame of the user's code"),
    )]


def _changes(rows: list[dict]) -> list[str]:
    out: list[str] = []
    cost: dict[int, int] = {}  # CHANGE_FOR index -> cost of the calls it matches
    for r in rows:
        for i, (pattern, _) in enumerate(CHANGE_FOR):
            if any(pattern.search(part) for part in (r["op"] or "").split(" > ") + [r["call"]]):
                cost[i] = cost.get(i, 0) + r["cost_ns"]
                break
    out.extend(CHANGE_FOR[i][1] for i in sorted(cost, key=lambda i: -cost[i]))
    return out


# --- device time -------------------------------------------------------------------------------------------

def _busy(ctx: AdviceContext) -> dict[int, tuple[list[int], list[int]]]:
    """Per device, when it was not idle (its work merged over streams, clipped to the window, and its unseen busy
    stretch), in time order."""
    b = ctx.gpu.device_not_idle
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
    """Per device, when it could not have taken new work from the host (see :meth:`GpuAnalysis.blocked`)."""
    return _per_group(ctx.gpu.blocked())


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
