"""Interval arithmetic on Arrow arrays: how long a set of (possibly overlapping) spans covers."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc


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


def _one_chunk(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    return values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values


def _is_sorted(values: pa.Array) -> bool:
    if len(values) < 2:
        return True
    return bool(pc.all(pc.greater_equal(values.slice(1), values.slice(0, len(values) - 1))).as_py())


def union_by_group(starts: pa.ChunkedArray, durs: pa.ChunkedArray, groups: pa.ChunkedArray) -> dict[int, int]:
    """:func:`union_ns` for each group at once: ``{group: covered ns}`` (rows with a null group are ignored).

    One sort and one running maximum for all groups: group k's spans are shifted by k times the whole
    time range, so no running maximum carries over from one group into the next.
    """
    t = pa.table({"g": groups, "s": starts, "e": pc.add(starts, durs)}).filter(pc.is_valid(groups))
    if t.num_rows == 0:
        return {}
    t = t.take(pc.sort_indices(t, [("g", "ascending"), ("s", "ascending")]))
    g = t["g"].combine_chunks()
    base = pc.min(t["s"]).as_py()
    span = pc.max(t["e"]).as_py() - base + 1
    changed = pc.not_equal(g, pa.concat_arrays([g.slice(0, 1), g.slice(0, len(g) - 1)]))
    rank = pc.cumulative_sum(pc.cast(changed, pa.int64()))
    try:
        shift = pc.subtract_checked(pc.multiply_checked(rank, span), base)
        s = pc.add_checked(t["s"].combine_chunks(), shift)
        e = pc.add_checked(t["e"].combine_chunks(), shift)
    except pa.ArrowInvalid:  # too many groups over too long a time to shift within int64
        return {k: union_ns(part["s"], pc.subtract(part["e"], part["s"]))
                for k in pc.unique(g).to_pylist() for part in [t.filter(pc.equal(t["g"], k))]}
    running = pc.cumulative_max(e)
    prev = pa.concat_arrays([s.slice(0, 1), running.slice(0, len(running) - 1)])
    added = pc.max_element_wise(pc.subtract(running, pc.max_element_wise(s, prev)), 0)
    sums = pa.table({"g": g, "added": added}).group_by("g", use_threads=False).aggregate([("added", "sum")])
    return dict(zip(sums["g"].to_pylist(), sums["added_sum"].to_pylist()))
