"""Copies that cost more than they need: host->device copies from pageable memory (the driver stages them
through a pinned buffer, at lower bandwidth, and the host blocks) and many tiny copies issued one after
another, each paying the fixed cost of a transfer call.

Sizes come from the copy events' ``bytes`` argument (Kineto writes it on every memcpy); pinned and pageable
are told apart by Kineto's names ("Memcpy HtoD (Pageable -> Device)", "(Pinned -> Device)"); ROCm traces
("Host -> Device") do not say, so their copies are never called pageable.
"""

from __future__ import annotations

import bisect
import statistics
from collections import Counter, defaultdict
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from opscope.advise.context import AdviceContext
from opscope.advise.finding import Finding, NotApplicable, Rule
from opscope.advise.remedies import PINNED, framework, remedy
from opscope.analyses.arrays import combined, name_match, thread_keys, vocabulary
from opscope.analyses.copies import copy_table, launch_links
from opscope.analyses.idle import INPUT_PIPELINE
from opscope.model.buffers import true_positions
from opscope.units import format_ns

#: A finding needs an estimated saving of at least this share of the step.
SAVING_SHARE = 0.01
#: Pinned host->device copies are assumed this much faster than pageable ones when the trace has no pinned copy
#: of a similar size to measure (an assumption: the usual ratio on PCIe hosts; the finding says when it is used).
ASSUMED_PINNED_SPEEDUP = 2.0
#: The assumed ratio is applied only to copies this large; smaller ones take mostly fixed latency.
BANDWIDTH_BYTES = 256 << 10
#: A pinned copy measures a pageable one when their sizes are within this factor.
SIMILAR_SIZE = 4
#: A copy of at most this many bytes is tiny...
TINY_BYTES = 64 << 10
#: ...and at least this many per step are worth a look.
TINY_PER_STEP = 16
#: Evidence rows.
TOP = 10

_BATCH_CHANGE = {
    "htod": "build small inputs on the device, or pack them into one pinned buffer and copy it once "
            "(torch.cat(...).pin_memory().to(device, non_blocking=True)), then split with views",
    "dtoh": "read results back once: torch.stack the scalars and call .cpu()/.tolist() once instead of .item() or "
            ".cpu() per tensor",
    "dtod": "copy many tensors in one call: torch._foreach_copy_(dst, src), or keep them in one flat buffer "
            "(torch.cat) and copy that",
}


def check(ctx: AdviceContext) -> list[Finding]:
    if ctx.gpu is None:
        raise NotApplicable("no GPU activity in this trace")
    # here, not on the context: no other rule reads them, and held there they stayed for the rest of advise (the 1 GB
    # trace: 29 MB of copy dicts and 9 MB of links)
    links = launch_links(ctx.trace)
    copies = copy_table(ctx.trace, links)
    if not any(c["counted"] for c in copies):
        raise NotApplicable("no copies" + (" inside the steps" if ctx.has_steps else ""))
    return [f for f in (_pageable(ctx, copies), _tiny(ctx, copies, links)) if f is not None]


# --- pageable host->device copies ----------------------------------------------------------------------------

def _pageable(ctx: AdviceContext, copies: list[dict[str, Any]]) -> Finding | None:
    pageable = [c for c in copies if c["counted"] and c["direction"] == "htod" and c["memory"] == "pageable"]
    if not pageable:
        return None
    pinned = sorted((c["bytes"], c["dur_ns"]) for c in copies
                    if c["direction"] == "htod" and c["memory"] == "pinned" and c["bytes"] and c["dur_ns"] > 0)
    rate = _PinnedRate(pinned)
    rows = []
    for c in pageable:
        pinned_rate = rate.near(c["bytes"]) if c["bytes"] else None  # bytes per ns
        if pinned_rate:
            basis, saving = "measured", max(0.0, c["dur_ns"] - c["bytes"] / pinned_rate)
        elif c["bytes"] and c["bytes"] >= BANDWIDTH_BYTES:
            basis, saving = "assumed", c["dur_ns"] * (1 - 1 / ASSUMED_PINNED_SPEEDUP)
        else:
            basis, saving = ("latency" if c["bytes"] else "size unknown"), 0.0
        rows.append({"step": c["step"], "at_ns": c["ts_ns"] - _origin(ctx, c["step"]), "bytes": c["bytes"],
                     "dur_ns": c["dur_ns"], "gbps": _gbps(c["bytes"], c["dur_ns"]),
                     "pinned_gbps": round(pinned_rate, 2) if pinned_rate else None, "basis": basis,
                     "saving_ns": round(saving)})
    total_saving = sum(r["saving_ns"] for r in rows)
    saving = ctx.per_step(total_saving)
    if saving < SAVING_SHARE * ctx.step_ns:
        return None
    time_total = sum(c["dur_ns"] for c in pageable)
    total_bytes = sum(c["bytes"] or 0 for c in pageable)
    count = Counter(r["basis"] for r in rows)
    parts = []
    if count["measured"]:
        measured = [r for r in rows if r["basis"] == "measured"]
        pinned_gbps = statistics.median(r["pinned_gbps"] for r in measured)
        pageable_gbps = statistics.median(r["gbps"] or 0 for r in measured)
        parts.append(f"{count['measured']} copies measured against this trace's pinned host->device copies of a "
                     f"similar size (within {SIMILAR_SIZE}x; median {pinned_gbps:g} GB/s pinned vs {pageable_gbps:g} "
                     f"GB/s pageable)")
    if count["assumed"]:
        parts.append(f"{count['assumed']} copies of at least {BANDWIDTH_BYTES >> 10} KB at an ASSUMED "
                     f"{ASSUMED_PINNED_SPEEDUP:g}x pinned bandwidth (no pinned copy of a similar size in the trace to "
                     f"measure; typical of PCIe hosts, the real ratio depends on the machine), saving "
                     f"{1 - 1 / ASSUMED_PINNED_SPEEDUP:.0%} of their time")
    if count["latency"] or count["size unknown"]:
        parts.append(f"{count['latency'] + count['size unknown']} small or unsized copies counted as no saving "
                     f"(their time is mostly fixed latency)")
    rows.sort(key=lambda r: (-r["saving_ns"], -r["dur_ns"]))
    return Finding(
        rule=RULE.id,
        title=f"Pageable host->device copies: {len(pageable) / ctx.steps:g} per {ctx.unit}, "
              f"{format_ns(ctx.per_step(time_total))} per {ctx.unit}"
              + (f" ({total_bytes / ctx.steps / 1e6:.1f} MB)" if total_bytes else ""),
        saving_ns=saving,
        saving_pct=ctx.pct(saving),
        estimate=(f"copy time now - copy time from pinned memory, {format_ns(saving)} per {ctx.unit}: "
                  + "; ".join(parts) + ". Not counted: the host no longer blocking on each copy with "
                  "non_blocking=True."),
        remedy=remedy(PINNED, ctx.trace),
        # the runner can pin what a DataLoader yields (advise --measure); copies of other tensors need the code
        program_change={"pin_memory": True} if _has_loader(ctx) else None,
        evidence=rows[:TOP],
        evidence_title="pageable host->device copies, largest saving first (at_ns: from the step's start; "
                       "basis: measured against pinned copies, assumed ratio, or latency-bound)",
    )


def _has_loader(ctx: AdviceContext) -> bool:
    """Whether the program iterates a DataLoader (its spans in the trace): pinning its batches is then a change
    opscope's runner can make."""
    names = ctx.trace.select(["name"])["name"]
    return bool(pc.any(name_match(names, INPUT_PIPELINE)).as_py())


class _PinnedRate:
    """Bandwidth (bytes per ns) of the pinned copies whose size is within SIMILAR_SIZE of a given one."""

    def __init__(self, pinned: list[tuple[int, int]]) -> None:
        self.sizes = [b for b, _ in pinned]
        self.bytes_before, self.ns_before = [0], [0]
        for b, d in pinned:
            self.bytes_before.append(self.bytes_before[-1] + b)
            self.ns_before.append(self.ns_before[-1] + d)

    def near(self, nbytes: int) -> float | None:
        lo = bisect.bisect_left(self.sizes, nbytes / SIMILAR_SIZE)
        hi = bisect.bisect_right(self.sizes, nbytes * SIMILAR_SIZE)
        if hi <= lo:
            return None
        return (self.bytes_before[hi] - self.bytes_before[lo]) / (self.ns_before[hi] - self.ns_before[lo])


# --- tiny copies ---------------------------------------------------------------------------------------------

def _tiny(ctx: AdviceContext, copies: list[dict[str, Any]], links: pa.Table) -> Finding | None:
    tiny = [c for c in copies if c["counted"] and c["bytes"] is not None and c["bytes"] <= TINY_BYTES
            and c["host_ns"] is not None]
    if len(tiny) < TINY_PER_STEP * ctx.steps:
        return None
    batches = _batches(ctx, tiny, links)
    by_direction: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for c in tiny:
        by_direction[c["direction"]].append(c)
    rows = []
    for direction, cs in by_direction.items():
        cost = statistics.median(c["host_ns"] for c in cs)
        runs = batches[direction]
        rows.append({"direction": direction, "copy": Counter(c["name"] for c in cs).most_common(1)[0][0],
                     "op": Counter(c["op"] for c in cs).most_common(1)[0][0],
                     "copies_per_step": round(len(cs) / ctx.steps, 2), "batches_per_step": round(runs / ctx.steps, 2),
                     "median_bytes": int(statistics.median(c["bytes"] for c in cs)),
                     "median_dur_ns": int(statistics.median(c["dur_ns"] for c in cs)),
                     "median_call_ns": int(cost), "saving_ns": ctx.per_step(cost * (len(cs) - runs))})
    saving = sum(r["saving_ns"] for r in rows)
    if saving < SAVING_SHARE * ctx.step_ns:
        return None
    rows.sort(key=lambda r: -r["saving_ns"])
    n_runs = sum(batches.values())
    return Finding(
        rule=RULE.id,
        title=f"{len(tiny) / ctx.steps:,.0f} tiny copies (<= {TINY_BYTES >> 10} KB) per {ctx.unit}, issued in "
              f"{n_runs / ctx.steps:,.0f} back-to-back batches",
        saving_ns=saving,
        saving_pct=ctx.pct(saving),
        estimate=("each copy's call costs the host a fixed time (median per direction: "
                  + ", ".join(f"{r['direction']} {format_ns(r['median_call_ns'])}" for r in rows)
                  + f"); copying each batch of back-to-back copies in one call, {len(tiny)} calls become {n_runs}: "
                  f"saving = (copies - batches) x that median = {format_ns(saving)} per {ctx.unit}. Host time: the "
                  f"step shrinks by it where the host is what the device waits for; packing the tensors is not "
                  f"counted."),
        # the batched calls named are PyTorch's; other frameworks get the plain advice
        remedy=("; ".join(_BATCH_CHANGE.get(r["direction"], "copy the tensors in one call") for r in rows
                          if r["saving_ns"] > 0) if framework(ctx.trace) in ("pytorch", None) else "")
               or "copy the tensors in one call (one buffer packed on the host or the device, then split)",
        evidence=rows[:TOP],
        evidence_title="tiny copies by direction (op: the outermost op that issued most of them)",
    )


def _batches(ctx: AdviceContext, tiny: list[dict[str, Any]], links: pa.Table) -> Counter:
    """Per direction, how many batches the tiny copies form: runs of them issued one after another by one
    host thread in one step, with no other device work launched in between. Vectorised over all launches
    (a big trace has a million)."""
    keys = list(dict.fromkeys((c["direction"], c["step"]) for c in tiny))  # (direction, step) -> its position
    key_id = {k: i for i, k in enumerate(keys)}
    tiny_rows = pa.array([c["row"] for c in tiny], pa.int64())
    tiny_key = pa.array([key_id[(c["direction"], c["step"])] for c in tiny], pa.int64())
    device_rows = combined(links["device_row"])
    # each device event's key; -1 for any other work
    key = pc.fill_null(pc.take(tiny_key, pc.index_in(device_rows, value_set=tiny_rows)), -1)
    # a launch is a tiny copy's when everything it launched has that key (a graph launch of mixed work is not)
    launches, key_min, key_max = _key_range_per_launch(combined(links["launch_row"]), combined(key))
    launch_key = pc.if_else(pc.equal(key_min, key_max), key_min, -1)
    calls = ctx.trace.select(["ts_ns", "pid", "tid"]).take(launches)
    thread = thread_keys(calls["pid"], calls["tid"], vocabulary(calls["pid"]), vocabulary(calls["tid"]))
    order = pc.sort_indices(pa.table({"thread": thread, "ts": calls["ts_ns"], "row": launches}),
                            [("thread", "ascending"), ("ts", "ascending"), ("row", "ascending")])
    thread, k = (pc.take(a, order) for a in (thread, launch_key))
    thread, k = combined(thread), combined(k)
    if len(k) == 0:
        return Counter()
    # a batch starts at a tiny copy's launch whose predecessor (on the same thread) is not of the same key
    same = pc.and_(pc.equal(thread[1:], thread[:-1]), pc.equal(k[1:], k[:-1]))
    continues = pc.fill_null(pa.concat_arrays([pa.array([False]), same]), False)
    starts = pc.filter(k, pc.and_(pc.greater_equal(k, 0), pc.invert(continues)))
    runs: Counter = Counter()
    for value, count in zip(*pc.value_counts(starts).flatten()):
        runs[keys[value.as_py()][0]] += count.as_py()
    return runs


def _key_range_per_launch(launch: pa.Array, key: pa.Array) -> tuple[pa.Array, pa.Array, pa.Array]:
    """Each distinct launch (a null launch is one group, as a group-by keeps it) with the least and the greatest key of
    its device events, in launch order. By a sort, not Arrow's group-by: Acero allocates from Arrow's default pool
    whatever pool pyarrow was given (a process tuned after pyarrow loaded keeps that memory: opscope.runtime)."""
    if len(launch) == 0:
        return launch, key, key
    order = pc.sort_indices(pa.table({"launch": launch, "key": key}), [("launch", "ascending"), ("key", "ascending")])
    launch, key = combined(pc.take(launch, order)), combined(pc.take(key, order))
    # a group starts at the first row and where the launch changes (the nulls, sorted last, are one group)
    changed = pc.coalesce(pc.not_equal(launch[1:], launch[:-1]), pc.is_valid(launch[:-1]))
    one = pa.scalar(1, pa.uint64())
    starts = pa.concat_arrays([pa.array([0], pa.uint64()), pc.add(true_positions(changed), one)])
    ends = pa.concat_arrays([pc.subtract(starts[1:], one), pa.array([len(launch) - 1], pa.uint64())])
    return pc.take(launch, starts), pc.take(key, starts), pc.take(key, ends)


def _origin(ctx: AdviceContext, step: int | None) -> int:
    """Start of a step (the window's start without one)."""
    if step is not None and ctx.has_steps:
        steps = ctx.trace.steps
        hit = steps.filter(pc.equal(steps["step"], step))
        if hit.num_rows:
            return hit["ts_ns"][0].as_py()
    return ctx.window[0]


def _gbps(nbytes: int | None, dur_ns: int) -> float | None:
    return round(nbytes / dur_ns, 2) if nbytes and dur_ns else None  # bytes per ns = GB/s


RULE = Rule(
    id="memcpy",
    title="Pageable or tiny copies",
    explain=f"""\
Looks at the copies inside the steps (the whole trace without steps); sizes come from the events' "bytes"
argument. Each finding needs an estimated saving of at least {SAVING_SHARE:.0%} of the step.

Pageable host->device copies (Kineto names them "Memcpy HtoD (Pageable -> Device)"; ROCm traces do not say,
so they are never flagged): the driver stages pageable memory through a pinned buffer, at lower bandwidth,
and the host blocks until it is staged. Estimated saving per copy = its time - the time of the same bytes at
the bandwidth of the trace's own pinned host->device copies of a similar size (within {SIMILAR_SIZE}x). Where
the trace has no such pinned copy, an ASSUMPTION: pinned copies reach {ASSUMED_PINNED_SPEEDUP:g}x the pageable
bandwidth (typical of PCIe hosts; the real ratio depends on the machine), applied only to copies of at least
{BANDWIDTH_BYTES >> 10} KB; smaller ones count as no saving, their time being mostly fixed latency. The finding
says which copies were measured and which assumed. Not counted: the host no longer blocking on the copies
with non_blocking=True. Device->host copies into pageable memory are left out: they are mostly .item() and
.cpu() reads the host waits for anyway (see host-sync).

Tiny copies (at most {TINY_BYTES >> 10} KB, at least {TINY_PER_STEP} per step, any direction): each call costs
the host a fixed time whatever the size. A batch is a run of tiny copies of one direction that one host thread
issued one after another in a step, with no other device work launched in between: those could be one copy.
Estimated saving = (copies - batches) x the median host time of their calls, per direction (a call that
returns after its copy ends waited for earlier device work; that wait is left out of its cost). This is host
time: the step shrinks by it where the host is what the device waits for. Packing the tensors into one
buffer is not counted.""",
    check=check,
    not_simulated=("the copies' speed with pinned memory, or as one batched call, is the rule's rate, not a "
                   'duration the trace has'),
    releases=("opscope.analyses.links",),  # the device events' launches: the dependency graph reads them first
)
