"""Kernel choice changes: the same op with the same input shapes ran different kernels in the two traces
(the "same conv, different algorithm" case: cuDNN/MIOpen heuristics, a library upgrade, another GPU)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from opscope.analyses.links import device_links
from opscope.analyses.names import short_names
from opscope.diff.normalize import Span
from opscope.model.memo import memoized
from opscope.model.schema import kind_mask
from opscope.model.trace import Trace

SCHEMA = pa.schema([("op", pa.string()), ("shapes", pa.string()), ("kernels_base", pa.string()),
                    ("kernels_new", pa.string()), ("gpu_base_ns", pa.int64()), ("gpu_new_ns", pa.int64())])

Choice = dict[tuple[str, str], tuple[frozenset[str], int]]  # (op, shapes) -> (kernel short names, device ns)


def kernels_by_op(trace: Trace, span: Span, links: dict[str, pa.Array] | None = None) -> Choice:
    """For each (innermost launching op, its input shapes): the short names of the kernels it launched and
    their total duration, over the span. ``links``: the trace's :func:`device_links`, when already computed."""
    # the grouped table is kept in the cache entry of a cached trace for the next diff
    grouped = _grouped(trace, span.steps, links)
    return {(op, shapes): (frozenset(k), ns) for op, shapes, k, ns in
            zip(grouped["op"].to_pylist(), grouped["shapes"].to_pylist(), grouped["kernel_distinct"].to_pylist(),
                grouped["dur_ns_sum"].to_pylist())}


@memoized(keep=True, ignore=("links",))
def _grouped(trace: Trace, steps: tuple[int, ...] | None, links: dict[str, pa.Array] | None) -> pa.Table:
    links = links if links is not None else device_links(trace)
    linked = pc.is_valid(links["op_row"])
    device_rows = pc.filter(links["device_row"], linked)
    op_rows = pc.filter(links["op_row"], linked)
    if len(device_rows) == 0:
        return pa.table({"op": pa.array([], pa.string()), "shapes": pa.array([], pa.string()),
                         "kernel_distinct": pa.array([], pa.list_(pa.string())),
                         "dur_ns_sum": pa.array([], pa.int64())})
    ev = trace.select(["name", "shapes", "dur_ns", "step", "kind"])
    # the rows that count, chosen before any name is turned into text: kernels (copies and memsets are not a kernel
    # choice) in the span's steps
    keep = pc.take(kind_mask(ev, ("kernel",)), device_rows)
    if steps is not None:
        keep = pc.and_(keep, pc.fill_null(pc.is_in(pc.take(ev["step"], device_rows),
                                                   pa.array(steps, pa.int64())), False))
    device_rows, op_rows = pc.filter(device_rows, keep), pc.filter(op_rows, keep)
    work = pa.table({
        "kernel": short_names(pc.take(ev["name"], device_rows)),
        "dur_ns": pc.take(ev["dur_ns"], device_rows),
        "op": pc.take(ev["name"], op_rows).cast(pa.string()),
        "shapes": pc.fill_null(pc.take(ev["shapes"], op_rows), ""),
    })
    return work.group_by(["op", "shapes"], use_threads=False).aggregate([("kernel", "distinct"), ("dur_ns", "sum")])


def kernel_choice_changes(base: Choice, new: Choice, span_base: Span, span_new: Span) -> pa.Table:
    """Rows for every (op, shapes) found in both traces whose kernels differ, largest device time first."""
    rows: list[dict[str, Any]] = []
    for key in set(base) & set(new):
        (kb, nsb), (kn, nsn) = base[key], new[key]
        if kb == kn:
            continue
        rows.append({"op": key[0], "shapes": key[1] or None, "kernels_base": ", ".join(sorted(kb)),
                     "kernels_new": ", ".join(sorted(kn)), "gpu_base_ns": round(nsb / span_base.divisor),
                     "gpu_new_ns": round(nsn / span_new.divisor)})
    rows.sort(key=lambda r: (-max(r["gpu_base_ns"], r["gpu_new_ns"]), r["op"], r["shapes"] or ""))
    return pa.Table.from_pylist(rows, schema=SCHEMA)
