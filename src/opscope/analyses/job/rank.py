"""One rank of a job, reduced to the small tables the job view combines (computed where the rank's trace is open:
in a worker). The combining process holds these and never a rank's events."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from opscope.analyses.arrays import combined
from opscope.analyses.names import short_names
from opscope.model.schema import kind_mask
from opscope.model.trace import Trace

#: Names kept per category (kernels, ops) for the straggler's "why": the rest of a rank's time is one
#: ``(other)`` row, so a rank's summary stays a few hundred rows however long its trace.
TOP_NAMES = 200
#: Device work that computes: what a slow rank spends its extra time on (collectives are where the others wait).
COMPUTE_KINDS = ("kernel", "memcpy", "memset")

STEPS_SCHEMA = pa.schema([("step", pa.int64()), ("ts_ns", pa.int64()), ("dur_ns", pa.int64()),
                          ("compute_ns", pa.int64()), ("comm_ns", pa.int64())])
WORK_SCHEMA = pa.schema([("step", pa.int64()), ("category", pa.string()), ("name", pa.string()),
                         ("ns", pa.int64())])
IDLE_SCHEMA = pa.schema([("cause", pa.string()), ("idle_ns", pa.int64())])


@dataclass
class RankSummary:
    """What the job view needs of one rank.

    ``steps``: per step, its span and the union of compute kernels and of collectives inside it; ``calls``: the
    collective calls (``analyses.collectives.COLLECTIVE_CALLS``); ``work``: per step, kernel time (``kernel``,
    short names) and op self time (``cpu_op``) of the rank's top names; ``idle``: device idle time by cause over
    the rank's window, averaged over its devices; ``facts``: rank, world size, where the rank came from,
    format, devices, warnings, truncation."""

    path: str
    rank: int | None
    rank_source: str
    world_size: int | None
    steps: pa.Table
    calls: pa.Table
    work: pa.Table
    idle: pa.Table
    facts: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def rank_summary(trace: Trace, path: str, rank_from_name: int | None = None, full: bool = True) -> RankSummary:
    """Reduce one open trace to its :class:`RankSummary`. ``rank_from_name`` is used when the trace records no
    distributed rank (said in ``rank_source``); ``full=False``: only who the rank is (the tables stay empty), for
    a command that only needs the ranks' cache entries."""
    meta = trace.metadata
    rank = meta.get("rank") if isinstance(meta.get("rank"), int) else None
    source = "distributed info"
    if rank is None:
        rank, source = rank_from_name, ("file name" if rank_from_name is not None else "none")
    world = meta.get("world_size") if isinstance(meta.get("world_size"), int) else None
    if not full:
        return RankSummary(path=path, rank=rank, rank_source=source, world_size=world, steps=STEPS_SCHEMA.empty_table(),
                           calls=pa.table({}), work=WORK_SCHEMA.empty_table(),
                           idle=IDLE_SCHEMA.empty_table(), facts={"truncated": bool(meta.get("truncated"))})
    from opscope.analyses.collectives import collective_calls_with_notes

    calls, notes = collective_calls_with_notes(trace)
    devices = [p.get("name") for p in meta.get("device_properties") or [] if isinstance(p, dict)]
    facts = {
        "format": meta.get("format"), "tool": meta.get("tool"),
        "devices": sorted({d for d in devices if isinstance(d, str)}),
        "truncated": bool(meta.get("truncated")),
        "warnings": [w.get("problem") for w in trace.warnings if isinstance(w, dict)][:5],
    }
    return RankSummary(path=path, rank=rank, rank_source=source, world_size=world, steps=_steps(trace),
                       calls=calls, work=_work(trace), idle=_idle(trace), facts=facts, notes=list(notes))


def _steps(trace: Trace) -> pa.Table:
    steps = trace.steps
    if steps.num_rows == 0:
        return STEPS_SCHEMA.empty_table()
    starts = steps["ts_ns"].to_pylist()
    ends = pc.add(steps["ts_ns"], steps["dur_ns"]).to_pylist()
    events = trace.select(["kind", "ts_ns", "dur_ns"])
    compute = events.filter(kind_mask(events, COMPUTE_KINDS))
    comm = events.filter(kind_mask(events, ("comm",)))
    return pa.table({
        "step": steps["step"], "ts_ns": steps["ts_ns"], "dur_ns": steps["dur_ns"],
        "compute_ns": pa.array(_union_within(compute, starts, ends), pa.int64()),
        "comm_ns": pa.array(_union_within(comm, starts, ends), pa.int64()),
    }, schema=STEPS_SCHEMA)


def _union_within(events: pa.Table, starts: list[int], ends: list[int]) -> list[int]:
    """The union of the events' spans inside each ``[start, end)``."""
    from opscope.analyses.intervals import clip, union_ns

    if events.num_rows == 0:
        return [0] * len(starts)
    out = []
    for lo, hi in zip(starts, ends):
        _, s, e = clip(events["ts_ns"], events["dur_ns"], lo, hi)
        out.append(union_ns(s, pc.subtract(e, s)))
    return out


def _work(trace: Trace) -> pa.Table:
    """Per step: kernel time by short name and op self time by name, for the rank's top names."""
    events = trace.select(["kind", "name", "dur_ns", "op_self_ns", "step"])
    parts = []
    device = events.filter(kind_mask(events, COMPUTE_KINDS))
    if device.num_rows:
        parts.append(_grouped(short_names(device["name"]), device["dur_ns"], device["step"], "kernel"))
    ops = events.filter(kind_mask(events, ("cpu_op",)))
    if ops.num_rows:
        parts.append(_grouped(ops["name"].cast(pa.string()), ops["op_self_ns"], ops["step"], "cpu_op"))
    if not parts:
        return WORK_SCHEMA.empty_table()
    return pa.concat_tables(parts)


def _grouped(names, ns, steps, category: str) -> pa.Table:
    t = pa.table({"name": names, "ns": pc.fill_null(ns, 0), "step": steps})
    totals = t.group_by("name").aggregate([("ns", "sum")]).sort_by([("ns_sum", "descending")])
    keep = totals["name"].slice(0, TOP_NAMES)
    kept = pc.is_in(t["name"], value_set=combined(keep))
    t = t.set_column(0, "name", pc.if_else(kept, t["name"], pa.scalar("(other)")))
    g = t.group_by(["step", "name"]).aggregate([("ns", "sum")])
    return pa.table({"step": g["step"], "category": pa.array([category] * g.num_rows, pa.string()),
                     "name": g["name"].cast(pa.string()), "ns": g["ns_sum"].cast(pa.int64())}, schema=WORK_SCHEMA)


def _idle(trace: Trace) -> pa.Table:
    """Device idle time by cause over the rank's window, averaged over its devices."""
    from opscope.analyses.gpu import gpu_analysis
    from opscope.analyses.idle import idle_causes

    analysis = gpu_analysis(trace)
    if not analysis.has_work:
        return IDLE_SCHEMA.empty_table()
    table = idle_causes(analysis)
    devices = max(1, len(analysis.devices))
    g = table.group_by("cause").aggregate([("idle_ns", "sum")])
    return pa.table({"cause": g["cause"], "idle_ns": pc.cast(pc.divide(g["idle_ns_sum"], devices), pa.int64())},
                    schema=IDLE_SCHEMA)
