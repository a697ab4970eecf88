"""Host<->device copies that cost more than they need: pageable host memory (the driver stages it through a
pinned buffer, at lower bandwidth, and the copy blocks the host) and many tiny copies, each paying the fixed
cost of a transfer."""

from __future__ import annotations

import statistics

import msgspec
import pyarrow as pa
import pyarrow.compute as pc

from opscope.advise.context import AdviceContext
from opscope.advise.finding import Finding, NotApplicable, Rule
from opscope.model.schema import kind_mask
from opscope.render.units import format_ns

#: A finding needs at least this share of the step.
SAVING_SHARE = 0.01
#: Pinned copies assumed this much faster when the trace has no pinned host->device copy to measure.
ASSUMED_PINNED_SPEEDUP = 2.0
#: A copy of at most this many bytes is "tiny"...
TINY_BYTES = 64 << 10
#: ...and this many of them per step are worth batching.
TINY_PER_STEP = 16


def copy_table(ctx: AdviceContext) -> pa.Table:
    """The memcpy events inside the steps: ``name``, ``dur_ns``, ``bytes`` (from the event's args; null when the
    trace does not say), ``step``."""
    ev = ctx.trace.select(["kind", "name", "dur_ns", "step", "event_id"])
    copies = ev.filter(kind_mask(ev, ("memcpy",)))
    if ctx.has_steps:
        copies = copies.filter(pc.is_valid(copies["step"]))
    args = ctx.trace.args
    nbytes = pa.nulls(copies.num_rows, pa.int64())
    if copies.num_rows and args.num_rows:
        mine = args.filter(pc.is_in(args["event_id"], value_set=copies["event_id"].combine_chunks()))
        decoded = {}
        for eid, text in zip(mine["event_id"].to_pylist(), mine["args"].to_pylist()):
            try:
                value = msgspec.json.decode(text).get("bytes") if text else None
            except (msgspec.DecodeError, AttributeError):
                value = None
            decoded[eid] = value if isinstance(value, int) and value >= 0 else None
        nbytes = pa.array([decoded.get(e) for e in copies["event_id"].to_pylist()], pa.int64())
    return pa.table({"name": copies["name"].cast(pa.string()), "dur_ns": copies["dur_ns"], "bytes": nbytes,
                     "step": copies["step"]})


def check(ctx: AdviceContext) -> list[Finding]:
    if ctx.gpu is None:
        raise NotApplicable("no GPU activity in this trace")
    copies = copy_table(ctx)
    if copies.num_rows == 0:
        raise NotApplicable("no host<->device copies inside the steps")
    rows = copies.to_pylist()
    return [f for f in (_pageable(ctx, rows), _tiny(ctx, rows)) if f is not None]


def _pageable(ctx: AdviceContext, rows: list[dict]) -> Finding | None:
    pageable = [r for r in rows if _is_htod(r["name"]) and "pageable" in r["name"].lower()]
    if not pageable:
        return None
    pinned = [r for r in rows if _is_htod(r["name"]) and "pinned" in r["name"].lower() and r["bytes"]]
    time_total = sum(r["dur_ns"] for r in pageable)
    sized = [r for r in pageable if r["bytes"]]
    measured = bool(pinned) and bool(sized)
    if measured:
        pinned_bw = sum(r["bytes"] for r in pinned) / max(1, sum(r["dur_ns"] for r in pinned))  # bytes per ns
        pageable_bw = sum(r["bytes"] for r in sized) / max(1, sum(r["dur_ns"] for r in sized))
        ideal = sum(r["bytes"] for r in sized) / pinned_bw + sum(r["dur_ns"] for r in pageable if not r["bytes"]) \
            * (pageable_bw / pinned_bw)
        basis = (f"the trace's pinned host->device copies move {pinned_bw:.2f} GB/s against {pageable_bw:.2f} GB/s "
                 f"for the pageable ones; at the pinned rate the same bytes take {format_ns(ideal / ctx.steps)} "
                 f"per {ctx.unit}")
    else:
        ideal = time_total / ASSUMED_PINNED_SPEEDUP
        basis = (f"assumed: pinned copies reach {ASSUMED_PINNED_SPEEDUP:g}x the bandwidth of pageable ones (the trace "
                 f"has no pinned host->device copy with a size to measure); the driver stages pageable memory "
                 f"through a pinned buffer")
    saving = ctx.per_step(max(0.0, time_total - ideal))
    if saving < SAVING_SHARE * ctx.step_ns:
        return None
    total_bytes = sum(r["bytes"] or 0 for r in pageable)
    evidence = [{"step": r["step"], "copy": r["name"], "bytes": r["bytes"], "dur_ns": r["dur_ns"],
                 "gbps": round(r["bytes"] / r["dur_ns"], 2) if r["bytes"] and r["dur_ns"] else None}
                for r in sorted(pageable, key=lambda r: -r["dur_ns"])[:10]]
    return Finding(
        rule=RULE.id,
        title=f"Pageable host->device copies: {len(pageable) / ctx.steps:g} per {ctx.unit}, "
              f"{format_ns(ctx.per_step(time_total))} per {ctx.unit}"
              + (f" ({total_bytes / ctx.steps / 1e6:.1f} MB)" if total_bytes else ""),
        saving_ns=saving,
        saving_pct=ctx.pct(saving),
        estimate=basis + f"; saving = copy time now - copy time at the pinned rate = {format_ns(saving)} per "
                         f"{ctx.unit} (and the host no longer blocks on each copy)",
        change=("allocate the host tensors in pinned memory and copy asynchronously: DataLoader(pin_memory=True), "
                "or tensor.pin_memory() once and x.to(device, non_blocking=True)"),
        evidence=evidence,
        evidence_title="pageable host->device copies, longest first",
    )


def _tiny(ctx: AdviceContext, rows: list[dict]) -> Finding | None:
    tiny = [r for r in rows if r["bytes"] is not None and r["bytes"] <= TINY_BYTES]
    if len(tiny) < TINY_PER_STEP * ctx.steps:
        return None
    total = sum(r["dur_ns"] for r in tiny)
    per_copy = statistics.median(r["dur_ns"] for r in tiny)
    batches = ctx.steps  # one batched copy per step and direction
    directions = {r["name"] for r in tiny}
    saving = ctx.per_step(max(0.0, total - per_copy * batches * len(directions)))
    if saving < SAVING_SHARE * ctx.step_ns:
        return None
    by_name: dict[str, list[dict]] = {}
    for r in tiny:
        by_name.setdefault(r["name"], []).append(r)
    evidence = [{"copy": name, "copies_per_step": round(len(rs) / ctx.steps, 2),
                 "median_bytes": int(statistics.median(r["bytes"] for r in rs)),
                 "median_dur_ns": int(statistics.median(r["dur_ns"] for r in rs)),
                 "total_ns": ctx.per_step(sum(r["dur_ns"] for r in rs))} for name, rs in sorted(by_name.items())]
    return Finding(
        rule=RULE.id,
        title=f"{len(tiny) / ctx.steps:,.0f} tiny copies (<= {TINY_BYTES >> 10} KB) per {ctx.unit}",
        saving_ns=saving,
        saving_pct=ctx.pct(saving),
        estimate=(f"each tiny copy costs about its fixed latency (median {format_ns(per_copy)}); batched into one "
                  f"copy per direction and {ctx.unit}, {len(tiny)} copies become {batches * len(directions)}: "
                  f"saving = their time ({format_ns(total)}) - one median copy per batch, per {ctx.unit}"),
        change=("gather the small tensors into one buffer (torch.cat / a flat pinned staging tensor) and copy once; "
                "keep scalars on the device instead of moving them back and forth; torch._foreach_* ops and "
                "multi-tensor APIs avoid per-tensor copies"),
        evidence=evidence,
        evidence_title="tiny copies by direction",
    )


def _is_htod(name: str) -> bool:
    n = name.lower().replace(" ", "")
    return "htod" in n or "hosttodevice" in n or "pageable->device" in n or "pinned->device" in n


RULE = Rule(
    id="memcpy",
    title="Pageable or tiny host<->device copies",
    explain=f"""\
Looks at the copies inside the steps (sizes from the events' "bytes" argument).

Pageable host->device copies (Kineto names them "Memcpy HtoD (Pageable -> Device)"): the driver copies
pageable memory through a pinned staging buffer, at lower bandwidth, and cudaMemcpyAsync from pageable
memory does not return before the copy is staged, so the host blocks. Estimated saving = their time - the
time the same bytes take at the bandwidth of the trace's own pinned host->device copies. When the trace has
no pinned copy with a size to measure, we assume pinned copies reach {ASSUMED_PINNED_SPEEDUP:g}x the pageable
bandwidth (typical of PCIe hosts; the real ratio depends on the machine) and say so in the finding.

Tiny copies (at most {TINY_BYTES >> 10} KB, at least {TINY_PER_STEP} per step): each costs about a fixed
latency whatever its size. Estimated saving = their total time - one median copy per step and direction
(all of them batched into one copy), an upper bound that ignores the time to pack them.

Each finding needs at least {SAVING_SHARE:.0%} of the step.""",
    check=check,
)
