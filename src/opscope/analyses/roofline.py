"""How far each op and kernel is from what the device can do: its work (:mod:`opscope.analyses.work`: FLOPs and bytes
from its shapes) over the time of the device work it launched, against the device's roofs
(:mod:`opscope.analyses.peaks`).

Each device event (kernel, copy, fill) belongs to the innermost op around its launch that has a work model; an op
instance's device time is the sum of its events' durations. Rows group op instances by name, shapes and dtypes
(``--by kernel``: kernels by name, each kernel taking its op instance's work in proportion to its share of that
instance's device time). Achieved FLOP/s and bytes/s are the work over the device time; arithmetic intensity is FLOPs
per byte; the roof at that intensity is ``min(peak FLOP/s of the dtype, bandwidth x intensity)``; ``pct_of_roof`` is
achieved over that roof. A row that ran faster than its roof (its data stayed in cache, or the model counts more
work than the kernels did) is shown at 100% and counted in a note. Collectives are left out (their time is the
network's). The device time no modelled op holds is named by its innermost op ("no model for X").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from opscope.analyses.arrays import combined, distinct_positions, marks, rows_where, share_pct
from opscope.analyses.links import climb_marks, device_links, op_ancestors, ops_above
from opscope.analyses.names import short_names
from opscope.analyses.ops import climb_start
from opscope.analyses.work import op_work
from opscope.model.memo import memoized
from opscope.model.schema import kind_mask
from opscope.model.trace import Trace

if TYPE_CHECKING:
    from opscope.analyses.peaks import Peaks

#: Device work the roofline reads (collectives are the network's).
DEVICE_KINDS = ("kernel", "memcpy", "memset")
OP_KINDS = ("cpu_op", "captured_op")

ROOFLINE = pa.schema([
    ("name", pa.string()), ("shapes", pa.string()), ("dtype", pa.string()), ("family", pa.string()),
    ("calls", pa.int64()), ("flops", pa.float64()), ("bytes", pa.float64()), ("device_ns", pa.int64()),
    ("achieved_tflops", pa.float64()), ("achieved_gbps", pa.float64()), ("intensity", pa.float64()),
    ("peak_tflops", pa.float64()), ("peak_gbps", pa.float64()), ("pct_of_roof", pa.float64()),
    ("bound", pa.string()), ("saving_at_roof_ns", pa.int64()),
])


@dataclass(frozen=True)
class Attribution:
    """Per device event of the roofline's kinds: its row, its duration, the op instance (row) whose work it does
    (null: no op around its launch has a model) and its innermost op (null: none); the work of each modelled op row
    (``work``: row, flops, bytes, dtype, family)."""

    device_row: pa.Array
    dur: pa.Array
    op_row: pa.Array
    innermost: pa.Array
    work: pa.Table
    #: a trace without device work: the "device events" are the host ops themselves (see :func:`attribution`)
    host: bool = False
    #: with ``host``: the time of the outermost ops (the denominator of the coverage)
    host_total: int = 0
    #: with ``host``: the outermost ops without a modelled op in them (themselves included): name, time (ns)
    host_missing: tuple[tuple[str, int], ...] = ()


_WORK = pa.schema([("row", pa.int64()), ("flops", pa.float64()), ("bytes", pa.float64()), ("dtype", pa.string()),
                   ("family", pa.string())])


@memoized()
def attribution(trace: Trace) -> Attribution:
    """Which op instance's work each device event does (see the module)."""
    events = trace.select(["kind", "name", "shapes", "dtypes", "concrete_inputs", "output_shapes", "strides", "parent",
                           "dur_ns"])
    if not pc.any(kind_mask(events, DEVICE_KINDS)).as_py():
        return _host_attribution(events)
    links = device_links(trace)
    device = combined(pc.fill_null(pc.take(kind_mask(events, DEVICE_KINDS), links["device_row"]), False))
    device_rows = combined(pc.filter(links["device_row"], device))
    start = pc.filter(climb_start(trace, links), device)
    is_op = combined(kind_mask(events, OP_KINDS))
    work = _work_of(events, ops_above(events["parent"], is_op, start))
    modelled = marks(events.num_rows, work["row"])
    modelled_op, _, innermost = climb_marks(events["parent"], modelled, is_op, start)
    return Attribution(device_rows, combined(pc.take(events["dur_ns"], device_rows)), modelled_op, innermost, work)


def _host_attribution(events: pa.Table) -> Attribution:
    """A trace without device work (a CPU run): each modelled op that has no modelled op inside it stands for its
    own work, its inclusive time on the host being the work's time."""
    ops = pc.cast(rows_where(kind_mask(events, ("cpu_op",))), pa.int64())
    work = _work_of(events, ops)
    modelled = combined(work["row"])
    _, above = op_ancestors(events, combined(pc.take(events["parent"], modelled)), ("cpu_op",))
    covered = pc.filter(above, pc.is_in(above, value_set=modelled))  # a modelled op with a modelled op inside it
    leaves = pc.filter(modelled, pc.invert(pc.is_in(modelled, value_set=covered)))
    outermost = pc.filter(ops, pc.is_null(pc.take(_op_parent(events), ops)))
    total = pc.sum(pc.take(events["dur_ns"], outermost)).as_py() or 0
    leaves = combined(leaves)
    return Attribution(leaves, combined(pc.take(events["dur_ns"], leaves)), leaves, leaves, work, host=True,
                       host_total=total, host_missing=_without_model(events, outermost, modelled))


def _without_model(events: pa.Table, outermost: pa.Array, modelled: pa.Array) -> tuple[tuple[str, int], ...]:
    """The outermost ops that hold no modelled op (nor are one), their time summed by name, most first."""
    _, above = op_ancestors(events, modelled, ("cpu_op",))  # every op around a modelled one, itself included
    bare = pc.filter(outermost, pc.invert(pc.is_in(outermost, value_set=above)))
    if not len(bare):
        return ()
    per = pa.table({"name": pc.take(events["name"], bare).cast(pa.string()),
                    "dur": pc.take(events["dur_ns"], bare)}).group_by("name", use_threads=False).aggregate(
        [("dur", "sum")])
    per = per.sort_by([("dur_sum", "descending"), ("name", "ascending")])
    return tuple(zip(per["name"].to_pylist(), per["dur_sum"].to_pylist()))


def _op_parent(events: pa.Table) -> pa.Array:
    """Per event, its parent where that is an op (else null)."""
    parent = combined(events["parent"])
    is_op = combined(kind_mask(events, ("cpu_op",)))
    return pc.if_else(pc.fill_null(pc.take(is_op, parent), False), parent, pa.scalar(None, parent.type))


def _work_of(events: pa.Table, op_rows: pa.Array) -> pa.Table:
    """The work of each op row that has a model (:data:`_WORK`), the model asked once per distinct (name, shapes,
    dtypes, inputs, output shapes, strides)."""
    rows = distinct_positions(op_rows, events.num_rows)
    if not len(rows):
        return _WORK.empty_table()
    keys = ("name", "shapes", "dtypes", "concrete_inputs", "output_shapes", "strides")
    table = pa.table({"row": pc.cast(rows, pa.int64()),
                      **{k: pc.fill_null(pc.take(events[k], rows).cast(pa.string()), "") for k in keys}})
    combos = table.group_by(list(keys), use_threads=False).aggregate([])
    found: dict[str, list] = {"flops": [], "bytes": [], "dtype": [], "family": []}
    for name, shapes, dtypes, concrete, outputs, strides in zip(*(combos[k].to_pylist() for k in keys)):
        w = op_work(name, shapes or None, dtypes or None, concrete or None, outputs or None, strides or None)
        ok = w is not None and (w.flops > 0 or w.bytes > 0)
        found["flops"].append(w.flops if ok and w else None)
        found["bytes"].append(w.bytes if ok and w else None)
        found["dtype"].append(w.dtype if ok and w else None)
        found["family"].append(w.family if ok and w else None)
    combos = combos.append_column("flops", pa.array(found["flops"], pa.float64()))
    for k, type_ in (("bytes", pa.float64()), ("dtype", pa.string()), ("family", pa.string())):
        combos = combos.append_column(k, pa.array(found[k], type_))
    joined = table.join(combos.filter(pc.is_valid(combos["flops"])), list(keys), join_type="inner")
    return joined.select(_WORK.names).cast(_WORK)


def roofline_table(trace: Trace, peaks: Peaks | None, by: str = "op",
                   in_steps: bool = False) -> tuple[pa.Table, list[str]]:
    """One row per (op, shapes, dtype), or per kernel with ``by="kernel"``, sorted by the device time a row would
    save at its roof; and the notes (coverage of the whole trace, rows above their roof). ``in_steps``: only the
    device work of the steps (a device event belongs to the step whose host call launched it)."""
    att = attribution(trace)
    events = trace.select(["name", "shapes"])
    has = pc.is_valid(att.op_row)
    if in_steps:
        has = pc.and_(has, in_steps_mask(trace, att))
    rows = pa.table({"device_row": pc.filter(att.device_row, has), "op": pc.filter(att.op_row, has),
                     "dur": pc.filter(att.dur, has)})
    columns = _by_kernel(events, rows, att.work) if by == "kernel" else _by_op(events, rows, att.work)
    table, above = _with_roofs(columns, peaks)
    notes = coverage_notes(trace, att)
    if above:
        notes.append(f"{above} row(s) ran faster than their roof (data kept in cache, or the model counts more work "
                     "than the kernels did): shown at 100%")
    return table, notes


def in_steps_mask(trace: Trace, att: Attribution) -> pa.Array:
    """Per device event of the attribution, whether it belongs to a step."""
    return combined(pc.is_valid(pc.take(trace.select(["step"])["step"], att.device_row)))


def _by_op(events: pa.Table, rows: pa.Table, work: pa.Table) -> dict[str, list]:
    """Op instances grouped by name, shapes, dtype and family: calls, total flops, bytes and device time."""
    per = rows.group_by(["op"], use_threads=False).aggregate([("dur", "sum")])
    per = per.join(work, keys="op", right_keys="row", join_type="inner")
    per = per.append_column("name", pc.take(events["name"], per["op"]).cast(pa.string()))
    per = per.append_column("shapes", pc.take(events["shapes"], per["op"]).cast(pa.string()))
    grouped = per.group_by(["name", "shapes", "dtype", "family"], use_threads=False).aggregate(
        [("op", "count"), ("flops", "sum"), ("bytes", "sum"), ("dur_sum", "sum")])
    return {"name": grouped["name"].to_pylist(), "shapes": grouped["shapes"].to_pylist(),
            "dtype": grouped["dtype"].to_pylist(), "family": grouped["family"].to_pylist(),
            "calls": grouped["op_count"].to_pylist(), "flops": grouped["flops_sum"].to_pylist(),
            "bytes": grouped["bytes_sum"].to_pylist(), "device_ns": grouped["dur_sum_sum"].to_pylist()}


def _by_kernel(events: pa.Table, rows: pa.Table, work: pa.Table) -> dict[str, list]:
    """Kernels by short name, each with its op instance's work in proportion to its share of the instance's device
    time (evenly where the instance took no time)."""
    per = rows.group_by(["op"], use_threads=False).aggregate([("dur", "sum"), ("dur", "count")])
    per = per.join(work, keys="op", right_keys="row", join_type="inner")
    each = rows.join(per, keys="op", join_type="inner")
    share = pc.if_else(pc.greater(each["dur_sum"], 0),
                       pc.divide(pc.cast(each["dur"], pa.float64()), pc.cast(each["dur_sum"], pa.float64())),
                       pc.divide(1.0, pc.cast(each["dur_count"], pa.float64())))
    each = each.append_column("kernel", short_names(pc.take(events["name"], each["device_row"])))
    each = each.append_column("flops_share", pc.multiply(each["flops"], share))
    each = each.append_column("bytes_share", pc.multiply(each["bytes"], share))
    grouped = each.group_by(["kernel"], use_threads=False).aggregate(
        [("dur", "count"), ("flops_share", "sum"), ("bytes_share", "sum"), ("dur", "sum")])
    kinds = each.group_by(["kernel", "dtype", "family"], use_threads=False).aggregate([("dur", "sum")])
    main: dict[str, tuple[int, str, str]] = {}
    for kernel, dtype, family, dur in zip(*(kinds[c].to_pylist() for c in ("kernel", "dtype", "family",
                                                                            "dur_sum"))):
        if kernel not in main or dur > main[kernel][0]:
            main[kernel] = (dur, dtype, family)
    kernels = grouped["kernel"].to_pylist()
    return {"name": kernels, "shapes": [None] * len(kernels), "dtype": [main[k][1] for k in kernels],
            "family": [main[k][2] for k in kernels], "calls": grouped["dur_count"].to_pylist(),
            "flops": grouped["flops_share_sum"].to_pylist(), "bytes": grouped["bytes_share_sum"].to_pylist(),
            "device_ns": grouped["dur_sum"].to_pylist()}


def _with_roofs(columns: dict[str, list], peaks: Peaks | None) -> tuple[pa.Table, int]:
    """The rows with their achieved rates, roofs, share of the roof, bound and saving at the roof; how many ran
    above their roof. ``flops``/``bytes`` come in as totals and leave per call."""
    out: dict[str, list] = {k: [] for k in ("achieved_tflops", "achieved_gbps", "intensity", "peak_tflops",
                                            "peak_gbps", "pct_of_roof", "bound", "saving_at_roof_ns")}
    above = 0
    for flops, nbytes, ns, dtype in zip(columns["flops"], columns["bytes"], columns["device_ns"], columns["dtype"]):
        tflops = flops / ns / 1e3 if ns else None
        gbps = nbytes / ns if ns else None
        intensity = flops / nbytes if nbytes else None
        peak = peaks.tflops.get(dtype) if peaks is not None else None
        bandwidth = peaks.gbps if peaks is not None else None
        pct, bound = _roof(tflops, gbps, intensity, peak, bandwidth)
        if pct is not None and pct > 100:
            above += 1
            pct = 100.0
        out["achieved_tflops"].append(tflops)
        out["achieved_gbps"].append(gbps)
        out["intensity"].append(intensity)
        out["peak_tflops"].append(peak)
        out["peak_gbps"].append(bandwidth)
        out["pct_of_roof"].append(pct)  # unrounded: a row far below its roof is small, never 0
        out["bound"].append(bound)
        out["saving_at_roof_ns"].append(round(ns * (1 - pct / 100)) if pct is not None else None)
    calls = columns["calls"]
    columns = {**columns, "flops": [f / c for f, c in zip(columns["flops"], calls)],
               "bytes": [b / c for b, c in zip(columns["bytes"], calls)]}
    table = pa.table({**columns, **out}, schema=ROOFLINE)
    keys = [("saving_at_roof_ns", "descending"), ("device_ns", "descending")]
    return table.sort_by(keys), above


def _roof(tflops: float | None, gbps: float | None, intensity: float | None, peak: float | None,
          bandwidth: float | None) -> tuple[float | None, str | None]:
    """Achieved over the roof at this intensity (%) and what bounds the roof there."""
    if tflops is None:
        return None, None
    if intensity is None:  # no bytes: only the compute roof applies
        return (100.0 * tflops / peak, "compute") if peak else (None, None)
    memory_roof = bandwidth * intensity / 1e3 if bandwidth else None  # GB/s x FLOP/B = GFLOP/s -> TFLOP/s
    if tflops == 0:  # no FLOPs (a copy): the memory roof alone, in bytes
        return (100.0 * gbps / bandwidth, "memory") if bandwidth and gbps is not None else (None, None)
    roofs = [(r, name) for r, name in ((peak, "compute"), (memory_roof, "memory")) if r]
    if not roofs:
        return None, None
    roof, bound = min(roofs)
    return 100.0 * tflops / roof, bound


def coverage_notes(trace: Trace, att: Attribution | None = None) -> list[str]:
    """The share of the device time (kernels, copies, fills) an op with a work model holds, and the largest
    shares without one, by innermost op (or "(no launching op)")."""
    att = att or attribution(trace)
    unrecorded = _no_records(trace)
    if att.host:
        held = pc.sum(att.dur).as_py() or 0
        lines = [f"no device work: each modelled op's own run on the host stands for its work (the innermost "
                 f"modelled op of each nest, its inclusive time); they hold {share_pct(held, att.host_total, 1)}% of "
                 f"the outermost ops' time (window: the whole trace; denominator: {att.host_total:,} ns)"]
        if att.host_missing:
            lines.append("no model for (outermost ops without a modelled op in them): " + ", ".join(
                f"{n} {share_pct(d, att.host_total, 1)}%" for n, d in att.host_missing[:5]))
        around = share_pct(att.host_total - held - sum(d for _, d in att.host_missing), att.host_total, 1)
        if around is not None and around > 0:
            lines.append(f"{around}% is the outermost ops' time beside the modelled ops in them (their own code, "
                         "unmodelled ops next to the modelled ones)")
        return lines + unrecorded
    total = pc.sum(att.dur).as_py() or 0
    if not total:
        return ["no device work (kernels, copies, fills) to place on the roofline"]
    modelled = pc.sum(pc.filter(att.dur, pc.is_valid(att.op_row))).as_py() or 0
    names = trace.select(["name"])["name"]
    missing = pc.is_null(att.op_row)
    inner = pc.filter(att.innermost, missing)
    label = pc.fill_null(pc.take(names, inner).cast(pa.string()), "(no launching op)") if len(inner) else \
        pa.array([], pa.string())
    per = pa.table({"name": label, "dur": pc.filter(att.dur, missing)}).group_by("name").aggregate([("dur", "sum")])
    per = per.sort_by([("dur_sum", "descending")]).slice(0, 5)
    lines = [f"ops with a work model hold {share_pct(modelled, total, 1)}% of the device time (window: the whole "
             f"trace; denominator: the durations of its kernels, copies and fills, {total:,} ns)"]
    if per.num_rows:
        lines.append("no model for: " + ", ".join(f"{n} {share_pct(d, total, 1)}%" for n, d in
                                                  zip(per["name"].to_pylist(), per["dur_sum"].to_pylist())))
    return lines + unrecorded


def _no_records(trace: Trace) -> list[str]:
    """A note when the trace has ops but none records its shapes (nothing for a work model to read)."""
    events = trace.select(["kind", "shapes", "concrete_inputs", "output_shapes"])
    ops = kind_mask(events, OP_KINDS)
    n_ops = pc.sum(pc.cast(ops, pa.int64())).as_py() or 0
    recorded = pc.and_(ops, pc.or_(pc.or_(pc.is_valid(events["shapes"]), pc.is_valid(events["concrete_inputs"])),
                                   pc.is_valid(events["output_shapes"])))
    if not n_ops or pc.any(recorded).as_py():
        return []
    return [f"none of the trace's {n_ops:,} ops records its input shapes, which the work models read (the profiler "
            "records them with PyTorch's record_shapes=True, TensorFlow's host_tracer_level=3)"]


def intensity_roofs(peaks: Peaks, dtypes: Sequence[str]) -> dict[str, tuple[float, float]]:
    """Per dtype with a peak: (peak TFLOP/s, ridge intensity FLOP/byte where the memory roof meets it)."""
    return {d: (peaks.tflops[d], peaks.tflops[d] * 1e3 / peaks.gbps) for d in dtypes if peaks.tflops.get(d)}
