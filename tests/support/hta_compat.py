"""HTA's definitions (Holistic Trace Analysis 0.5.0) computed from opscope's model, for the fidelity tests.

``temporal_breakdown`` is HTA's ``get_temporal_breakdown`` and ``kernel_type_breakdown`` its
``get_gpu_kernel_breakdown`` kernel-type table; no command uses them, so they live beside the tests that
compare them with HTA (tests/integration/test_hta_fidelity.py, tests/unit/test_gpu.py).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from opscope.analyses.arrays import combined, share_pct
from opscope.analyses.gpu import COMM, COMPUTE, GpuWork, device_work
from opscope.analyses.intervals import covered_by_group, merged_intervals, sweep
from opscope.model.trace import Trace

TEMPORAL_SCHEMA = pa.schema([
    ("rank", pa.int64()), ("device", pa.int64()), ("window_ns", pa.int64()), ("busy_ns", pa.int64()),
    ("idle_ns", pa.int64()), ("compute_ns", pa.int64()), ("non_compute_ns", pa.int64()), ("comm_ns", pa.int64()),
    ("memory_ns", pa.int64()), ("idle_pct", pa.float64()), ("compute_pct", pa.float64()),
    ("non_compute_pct", pa.float64()), ("comm_pct", pa.float64()), ("memory_pct", pa.float64()),
])
KERNEL_TYPES = ("COMPUTATION", "COMMUNICATION", "MEMORY")


def _hta_rows(work: GpuWork, drop_last_step: bool) -> pa.Table:
    """The work HTA counts, over its own span (no window): with ``drop_last_step`` and two or more steps, only
    work launched before the last step began (HTA's default, ``include_last_profiler_step=False``)."""
    t = work.table
    if drop_last_step and work.steps >= 2 and work.last_step_start is not None:
        t = t.filter(pc.fill_null(pc.less(t["launch"], work.last_step_start), False))
    return t.set_column(t.schema.get_field_index("start"), "start", t["raw_start"]) \
            .set_column(t.schema.get_field_index("end"), "end", t["cut_end"])


def temporal_breakdown(trace: Trace, drop_last_step: bool = False) -> pa.Table:
    """Per device, HTA's ``get_temporal_breakdown``: over the span of the device work (first start to last end),
    idle = span - busy, compute = union of kernels (not collectives), non-compute = busy - compute; plus the
    communication and memory (memcpy + memset) unions. Percentages are of the span."""
    work = device_work(trace)
    t = _hta_rows(work, drop_last_step)
    if t.num_rows == 0:
        return TEMPORAL_SCHEMA.empty_table()
    rank = trace.metadata.get("rank")
    cat = pc.cast(t["cat"], pa.int64())
    klass = pc.if_else(pc.equal(cat, COMPUTE), 0, pc.if_else(pc.equal(cat, COMM), 1, 2))
    dev = t["device"].combine_chunks()
    start, end, klass = t["start"].combine_chunks(), t["end"].combine_chunks(), combined(klass)
    busy = covered_by_group(merged_intervals(dev, start, end))
    by_class = covered_by_group(merged_intervals(pc.add(pc.multiply(dev, 4), klass), start, end))
    spans = pa.table({"d": dev, "s": start, "e": end}).group_by("d", use_threads=False) \
        .aggregate([("s", "min"), ("e", "max")])
    rows = []
    for d, s0, e1 in zip(spans["d"].to_pylist(), spans["s_min"].to_pylist(), spans["e_max"].to_pylist()):
        window = e1 - s0
        b = busy.get(d, 0)
        compute, comm, memory = (by_class.get(d * 4 + k, 0) for k in range(3))
        rows.append({"rank": rank if isinstance(rank, int) else None, "device": d, "window_ns": window,
                     "busy_ns": b, "idle_ns": window - b, "compute_ns": compute, "non_compute_ns": b - compute,
                     "comm_ns": comm, "memory_ns": memory, "idle_pct": share_pct(window - b, window),
                     "compute_pct": share_pct(compute, window), "non_compute_pct": share_pct(b - compute, window),
                     "comm_pct": share_pct(comm, window), "memory_pct": share_pct(memory, window)})
    return pa.Table.from_pylist(rows, schema=TEMPORAL_SCHEMA)


def kernel_type_breakdown(trace: Trace, drop_last_step: bool = False) -> pa.Table:
    """HTA's ``get_gpu_kernel_breakdown`` kernel-type table (with memory kernels): the busy time split by which
    types ran (COMPUTATION, COMMUNICATION, MEMORY, or "A overlapping B" when several did), summed over devices,
    with each part's share of the total."""
    work = device_work(trace)
    t = _hta_rows(work, drop_last_step)
    schema = pa.schema([("kernel_type", pa.string()), ("time_ns", pa.int64()), ("pct", pa.float64())])
    if t.num_rows == 0:
        return schema.empty_table()
    cat = pc.cast(t["cat"], pa.int64())
    bit = pc.if_else(pc.equal(cat, COMPUTE), 1, pc.if_else(pc.equal(cat, COMM), 2, 4))
    key = pc.add(pc.multiply(pc.add(combined(t["device"]), 1), 8), combined(bit))  # device -1 (unknown) stays >= 0
    m = merged_intervals(key, combined(t["start"]), combined(t["end"]))
    m = m.filter(pc.greater(m["end"], m["start"]))
    if m.num_rows == 0:
        return schema.empty_table()
    g = m["group"].combine_chunks()
    device = pc.divide(g, 8)
    value = pc.subtract(g, pc.multiply(device, 8))
    points = sweep(pa.table({"d": device, "v": value, "start": m["start"], "end": m["end"]}), by="d")
    state = pc.cumulative_sum(pc.multiply(combined(points["v"]), combined(points["delta"])))
    seg = combined(points["seg"])
    agg = pa.table({"state": state, "seg": seg}).filter(pc.greater(state, 0)) \
        .group_by("state", use_threads=False).aggregate([("seg", "sum")])
    total = pc.sum(agg["seg_sum"]).as_py() or 0
    rows = []
    for st, ns in zip(agg["state"].to_pylist(), agg["seg_sum"].to_pylist()):
        if ns <= 0:
            continue
        label = " overlapping ".join(name for i, name in enumerate(KERNEL_TYPES) if st & (1 << i))
        rows.append({"kernel_type": label, "time_ns": ns, "pct": share_pct(ns, total)})
    rows.sort(key=lambda r: -r["time_ns"])
    return pa.Table.from_pylist(rows, schema=schema)
