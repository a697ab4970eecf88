"""Per-kernel table: device work grouped by name (and by launching op with ``by_op``)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from opscope.analyses.filters import EventFilter
from opscope.analyses.launch import launching_op
from opscope.analyses.ops import _pct, sort_table
from opscope.model.trace import Trace

DEVICE_WORK = ("kernel", "comm", "memcpy", "memset")


def kernel_table(trace: Trace, filt: EventFilter | None = None, by_op: bool = False,
                 sort: str = "total_ns") -> pa.Table:
    """One row per kernel name: calls, total/avg/min/max, share of all device time, streams."""
    filt = filt or EventFilter()
    kinds = filt.kinds or DEVICE_WORK
    filt = EventFilter(kinds=kinds, match=filt.match, exclude=filt.exclude, steps=filt.steps)
    rows = filt.apply(trace.select(["kind", "name", "dur_ns", "stream", "step", "correlation"]))
    table = pa.table({
        "name": rows["name"].cast(pa.string()),
        "kind": rows["kind"].cast(pa.string()),
        "dur_ns": rows["dur_ns"],
        "stream": pc.cast(rows["stream"], pa.string()),
    })
    keys = ["name", "kind"]
    if by_op:
        table = table.append_column("op", launching_op(trace, rows))
        table = table.set_column(table.schema.get_field_index("op"), "op",
                                 pc.fill_null(table["op"], "(no launching op)"))
        keys = ["op"] + keys
    grouped = table.group_by(keys, use_threads=False).aggregate([
        ("dur_ns", "count"), ("dur_ns", "sum"), ("dur_ns", "min"), ("dur_ns", "max"),
        ("stream", "distinct"),
    ])
    total = grouped["dur_ns_sum"]
    calls = grouped["dur_ns_count"]
    streams = [",".join(sorted((s for s in v if s is not None), key=_num)) for v in
               grouped["stream_distinct"].to_pylist()]
    out = pa.table({
        **{k: grouped[k] for k in keys},
        "calls": calls,
        "total_ns": total,
        "avg_ns": pc.cast(pc.round(pc.divide(pc.cast(total, pa.float64()), calls)), pa.int64()),
        "min_ns": grouped["dur_ns_min"],
        "max_ns": grouped["dur_ns_max"],
        "pct": _pct(total, pc.sum(total).as_py() or 0),
        "streams": pa.array(streams, pa.string()),
    })
    return sort_table(out, sort)


def _num(text: str):
    return (0, int(text)) if text.lstrip("-").isdigit() else (1, text)
