"""Kernel -> launch -> operator links through correlation ids."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from opscope.model.trace import Trace

_MAX_CLIMB = 16


def launching_op(trace: Trace, device_rows: pa.Table) -> pa.Array:
    """For each device event in ``device_rows``, the name of the innermost ``cpu_op`` that launched it.

    The device event's correlation id finds its runtime launch; the launch's ancestors are climbed
    until a ``cpu_op``. Null where the trace has no such link.
    """
    events = trace.events
    kind = events["kind"].cast(pa.string())
    runtime = pc.equal(kind, "runtime")
    rt_corr = pc.filter(events["correlation"], runtime).combine_chunks()
    rt_row = pc.filter(events["event_id"], runtime).combine_chunks()
    where = pc.index_in(device_rows["correlation"], value_set=rt_corr)
    row = pc.take(rt_row, where)  # event_id == row index (events are stored in id order)
    parents = events["parent"].combine_chunks()
    kinds = kind.combine_chunks()
    names = events["name"].cast(pa.string()).combine_chunks()
    found = pa.nulls(len(row), pa.string())
    current = pc.take(parents, row)
    for _ in range(_MAX_CLIMB):
        if pc.all(pc.is_null(current)).as_py() is not False:
            break
        is_op = pc.fill_null(pc.equal(pc.take(kinds, current), "cpu_op"), False)
        found = pc.if_else(pc.and_(is_op, pc.is_null(found)), pc.take(names, current), found)
        current = pc.if_else(is_op, pa.scalar(None, pa.int64()), pc.take(parents, current))
    return found
