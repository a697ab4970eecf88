"""Interval arithmetic on Arrow arrays: how long a set of (possibly overlapping) spans covers."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from opscope.analyses.arrays import arange

_INT64_MIN = -(1 << 63)


def union_ns(starts: pa.Array | pa.ChunkedArray, durs: pa.Array | pa.ChunkedArray) -> int:
    """Total time covered by the union of the spans ``[start, start + dur)``.

    Sorted by start, span i adds ``max(0, M_i - max(s_i, M_{i-1}))`` where M is the running
    maximum of the ends: overlaps count once, gaps not at all.
    """
    if len(starts) == 0:
        return 0
    s = _one_chunk(starts)
    e = pc.add(s, _one_chunk(durs))
    if not _is_sorted(s):  # the model keeps events in time order; other callers may not
        order = pc.sort_indices(s)
        s, e = s.take(order), e.take(order)
    running = pc.cumulative_max(e)
    prev = pa.concat_arrays([pa.array([s[0].as_py()], pa.int64()), running.slice(0, len(running) - 1)])
    lower = pc.max_element_wise(s, prev)
    added = pc.max_element_wise(pc.subtract(running, lower), 0)
    return int(pc.sum(added).as_py() or 0)


def clip(starts: pa.Array | pa.ChunkedArray, durs: pa.Array | pa.ChunkedArray, lo: int,
         hi: int) -> tuple[pa.Array, pa.Array, pa.Array]:
    """The parts of the spans ``[start, start + dur)`` inside ``[lo, hi)``: ``(inside, start, end)``, where
    ``inside`` marks the input spans that overlap it and ``start``/``end`` are the clipped parts of those."""
    s, d = _one_chunk(starts), _one_chunk(durs)
    start = pc.max_element_wise(s, lo)
    end = pc.min_element_wise(pc.add(s, d), hi)
    inside = pc.greater(end, start)
    return inside, pc.filter(start, inside), pc.filter(end, inside)


def _one_chunk(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    return values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values


def _is_sorted(values: pa.Array) -> bool:
    if len(values) < 2:
        return True
    return bool(pc.all(pc.greater_equal(values.slice(1), values.slice(0, len(values) - 1))).as_py())


def union_by_group(starts: pa.ChunkedArray, durs: pa.ChunkedArray, groups: pa.ChunkedArray) -> dict[int, int]:
    """:func:`union_ns` for each group at once: ``{group: covered ns}`` (rows with a null group are ignored)."""
    t = pa.table({"g": groups, "s": starts, "e": pc.add(starts, durs)}).filter(pc.is_valid(groups))
    if t.num_rows == 0:
        return {}
    return covered_by_group(merged_intervals(_one_chunk(t["g"]), _one_chunk(t["s"]), _one_chunk(t["e"])))


def merged_intervals(group: pa.Array, start: pa.Array, end: pa.Array, presorted: bool = False) -> pa.Table:
    """The union of ``[start, end)`` per group as disjoint intervals: a table ``group, start, end, first``.

    Unless ``presorted`` (rows grouped, in start order within each group), rows are sorted by group and start.
    ``first`` is the input row that opens each interval. One running maximum serves every group: group k's
    times are shifted by k spans.
    """
    n = len(start)
    empty = pa.table({"group": pa.array([], pa.int64()), "start": pa.array([], pa.int64()),
                      "end": pa.array([], pa.int64()), "first": pa.array([], pa.int64())})
    if n == 0:
        return empty
    rows = arange(n)
    if not presorted:
        order = pc.sort_indices(pa.table({"g": group, "s": start}), [("g", "ascending"), ("s", "ascending")])
        group, start, end, rows = group.take(order), start.take(order), end.take(order), order
    changed = pa.concat_arrays([pa.array([True]), pc.not_equal(group.slice(1), group.slice(0, n - 1))])
    rank = pc.subtract(pc.cumulative_sum(pc.cast(changed, pa.int64())), 1)
    base = pc.min(start).as_py()
    span = pc.max(end).as_py() - base + 1
    try:
        offset = pc.subtract_checked(pc.multiply_checked(rank, span), base)
        s = pc.add_checked(start, offset)
        e = pc.add_checked(end, offset)
    except pa.ArrowInvalid:  # too many groups over too long a time to shift within int64: one at a time
        parts = []
        for g in pc.unique(group).to_pylist():
            keep = pc.equal(group, g)
            part = merged_intervals(pc.filter(group, keep), pc.filter(start, keep), pc.filter(end, keep), True)
            parts.append(part.set_column(3, "first", pc.take(pc.filter(rows, keep), part["first"])))
        return pa.concat_tables(parts)
    running = pc.cumulative_max(e)
    prev = pa.concat_arrays([pa.array([_INT64_MIN], pa.int64()), running.slice(0, n - 1)])
    new = pc.greater(s, prev)
    last = pa.concat_arrays([new.slice(1), pa.array([True])])
    return pa.table({
        "group": pc.filter(group, new),
        "start": pc.filter(start, new),
        "end": pc.subtract(pc.filter(running, last), pc.filter(offset, last)),
        "first": pc.filter(rows, new),
    })


def covered_by_group(merged: pa.Table) -> dict[int, int]:
    """``{group: covered ns}`` of a :func:`merged_intervals` table."""
    if merged.num_rows == 0:
        return {}
    t = pa.table({"g": merged["group"], "d": pc.subtract(merged["end"], merged["start"])})
    sums = t.group_by("g", use_threads=False).aggregate([("d", "sum")])
    return dict(zip(sums["g"].to_pylist(), sums["d_sum"].to_pylist()))


