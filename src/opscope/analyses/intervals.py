"""Interval arithmetic on Arrow arrays: how long a set of (possibly overlapping) spans covers, the sweep over
span boundaries, and which span encloses an instant."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from itertools import accumulate

import pyarrow as pa
import pyarrow.compute as pc

from opscope.analyses.arrays import arange, combined, int64_values, local_index, native_loops, rows_where, scatter
from opscope.model.buffers import minus_one_as_null, true_positions, values_view

_INT64_MIN = -(1 << 63)


def union_ns(starts: pa.Array | pa.ChunkedArray, durs: pa.Array | pa.ChunkedArray,
             where: pa.Array | pa.ChunkedArray | None = None) -> int:
    """Total time covered by the union of the spans ``[start, start + dur)`` (of the rows where ``where`` is true).

    Sorted by start, span i adds ``max(0, M_i - max(s_i, M_{i-1}))`` where M is the running
    maximum of the ends: overlaps count once, gaps not at all.
    """
    found = _span_union_in_c(starts, durs, where)
    if found is not None:
        return found[0]
    if where is not None:
        keep = pc.fill_null(combined(where), False)
        starts, durs = pc.filter(combined(starts), keep), pc.filter(combined(durs), keep)
    if len(starts) == 0:
        return 0
    s = combined(starts)
    e = pc.add(s, combined(durs))
    if not is_sorted(s):  # the model keeps events in time order; other callers may not
        order = pc.sort_indices(s)
        s, e = s.take(order), e.take(order)
    running = pc.cumulative_max(e)
    prev = pa.concat_arrays([pa.array([s[0].as_py()], pa.int64()), running.slice(0, len(running) - 1)])
    lower = pc.max_element_wise(s, prev)
    added = pc.max_element_wise(pc.subtract(running, lower), 0)
    return int(pc.sum(added).as_py() or 0)


def span_bounds(starts: pa.Array | pa.ChunkedArray, durs: pa.Array | pa.ChunkedArray,
                where: pa.Array | pa.ChunkedArray | None = None) -> tuple[int, int] | None:
    """The earliest start and the latest end of the spans (of the rows where ``where`` is true); None without any."""
    found = _span_union_in_c(starts, durs, where)
    if found is not None:
        return (found[1], found[2]) if found[3] else None
    s, d = combined(starts), combined(durs)
    if where is not None:
        keep = pc.fill_null(combined(where), False)
        s, d = pc.filter(s, keep), pc.filter(d, keep)
    if len(s) == 0:
        return None
    return pc.min(s).as_py(), pc.max(pc.add(s, d)).as_py()


def _span_union_in_c(starts: pa.Array | pa.ChunkedArray, durs: pa.Array | pa.ChunkedArray,
                     where: pa.Array | pa.ChunkedArray | None) -> tuple[int, int, int, int] | None:
    """``_loops.span_union`` on these columns (no copy of the selected rows), or None where it is not built, a column
    is not int64 or holds nulls, or the selected starts are not in order: the Arrow definitions then run."""
    loops = native_loops()
    if loops is None:
        return None
    s, d = combined(starts), combined(durs)
    if s.type != pa.int64() or d.type != pa.int64() or s.null_count or d.null_count:
        return None
    mask = None if where is None else values_view(pc.cast(pc.fill_null(combined(where), False), pa.uint8()), "B")
    return loops.span_union(values_view(s, "q"), values_view(d, "q"), mask)


def clip(starts: pa.Array | pa.ChunkedArray, durs: pa.Array | pa.ChunkedArray, lo: int,
         hi: int) -> tuple[pa.Array, pa.Array, pa.Array]:
    """The parts of the spans ``[start, start + dur)`` inside ``[lo, hi)``: ``(inside, start, end)``, where
    ``inside`` marks the input spans that overlap it and ``start``/``end`` are the clipped parts of those."""
    s, d = combined(starts), combined(durs)
    start = pc.max_element_wise(s, lo)
    end = pc.min_element_wise(pc.add(s, d), hi)
    inside = pc.greater(end, start)
    return inside, pc.filter(start, inside), pc.filter(end, inside)


def is_sorted(values: pa.Array) -> bool:
    """Whether the values never decrease (nulls are not looked at)."""
    if len(values) < 2:
        return True
    return bool(pc.all(pc.greater_equal(values.slice(1), values.slice(0, len(values) - 1))).as_py())


def union_by_group(starts: pa.ChunkedArray, durs: pa.ChunkedArray, groups: pa.ChunkedArray) -> dict[int, int]:
    """:func:`union_ns` for each group at once: ``{group: covered ns}`` (rows with a null group are ignored)."""
    t = pa.table({"g": groups, "s": starts, "e": pc.add(starts, durs)})
    if t["g"].null_count:
        t = t.filter(pc.is_valid(t["g"]))
    if t.num_rows == 0:
        return {}
    return covered_by_group(merged_intervals(combined(t["g"]), combined(t["s"]), combined(t["e"])))


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
    merged = _merged_in_c(group, start, end, presorted)
    if merged is not None:
        return merged
    rows = arange(n)
    if not presorted:
        # the model keeps events in time order: then a (stable) sort by group alone gives the same order
        order = pc.sort_indices(group) if is_sorted(start) else \
            pc.sort_indices(pa.table({"g": group, "s": start}), [("g", "ascending"), ("s", "ascending")])
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
        groups = pc.unique(group).to_pylist()  # grouped (presorted): in their order; else ascending, as below
        for g in (groups if presorted else sorted(groups, key=lambda v: (v is None, v or 0))):
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


def _merged_in_c(group: pa.Array, start: pa.Array, end: pa.Array, presorted: bool) -> pa.Table | None:
    """:func:`merged_intervals` by ``_loops.merge_intervals`` (one pass, no sort), or None where it is not built, a
    column is not int64 or holds nulls, or it declines (a group's starts go back in time, a span ends before it
    starts): the Arrow definition above then runs."""
    loops = native_loops()
    columns = [combined(group), combined(start), combined(end)]
    if loops is None or any(c.type != pa.int64() or c.null_count for c in columns):
        return None
    found = loops.merge_intervals(*(values_view(c, "q") for c in columns), presorted)
    if found is None:
        return None
    count = len(found[0]) // 8
    # ``first`` as the Arrow definition types it: sort_indices' uint64 where it sorted, else int64 row numbers
    types = (pa.int64(), pa.int64(), pa.int64(), pa.int64() if presorted else pa.uint64())
    return pa.table({name: pa.Array.from_buffers(t, count, [None, pa.py_buffer(values)])
                     for name, t, values in zip(("group", "start", "end", "first"), types, found)})


def covered_by_group(merged: pa.Table) -> dict[int, int]:
    """``{group: covered ns}`` of a :func:`merged_intervals` table."""
    if merged.num_rows == 0:
        return {}
    t = pa.table({"g": merged["group"], "d": pc.subtract(merged["end"], merged["start"])})
    sums = t.group_by("g", use_threads=False).aggregate([("d", "sum")])
    return dict(zip(sums["g"].to_pylist(), sums["d_sum"].to_pylist()))


def innermost_enclosing(spans: pa.Table, queries: pa.Table) -> pa.Array:
    """For each query (``thread``, ``ts``): the position in ``spans`` of the innermost accepted span on the same
    thread with ``ts <= query ts < end``; null when there is none.

    ``spans`` has ``thread``, ``ts``, ``end`` (or ``dur``: the end is ``ts + dur``), ``parent`` (position of the
    enclosing span, as the model nests them) and optionally ``accept`` (bool), in time order (start, longest
    first). With a ``member`` column (bool) only the rows it marks are spans, their parents among them (the
    model's events and a layer's mask, without a copy of the layer's rows); the answer is still a row of
    ``spans``. One stable sort merges the
    queries among the span starts; the last span started at or before a query is the first candidate, and
    the answer lies on its chain of parents (every span holding the query is open when it starts), so a
    vectorized walk up the chain, dropping the queries answered at each step, finds it.
    """
    n_s, n_q = spans.num_rows, queries.num_rows
    if n_q == 0 or n_s == 0:
        return pa.nulls(n_q, pa.int64())
    found = _innermost_in_c(spans, queries)
    if found is not None:
        return found
    if "member" in spans.column_names:  # the definition: the members alone, their parents renumbered among them
        member = pc.fill_null(combined(spans["member"]), False)
        rows = rows_where(member)
        sub = spans.drop_columns(["member"]).filter(member)
        sub = sub.set_column(sub.column_names.index("parent"), "parent",
                             pc.take(local_index(member), pc.cast(combined(sub["parent"]), pa.int64())))
        return pc.take(rows, innermost_enclosing(sub, queries))
    span_thread, span_end = combined(spans["thread"]), _span_ends(spans)
    span_parent = combined(spans["parent"])
    accept = combined(spans["accept"]) if "accept" in spans.column_names else None
    q_thread, q_ts = combined(queries["thread"]), combined(queries["ts"])
    merged = pa.table({
        "thread": pa.concat_arrays([span_thread, q_thread]),
        "ts": pa.concat_arrays([combined(spans["ts"]), q_ts]),
        "q": pa.concat_arrays([pa.nulls(n_s, pa.int8()).fill_null(0), pa.nulls(n_q, pa.int8()).fill_null(1)]),
    })
    # At equal times a span sorts before a query (it holds it); the stable sort keeps spans longest first.
    order = pc.cast(pc.sort_indices(merged, [("thread", "ascending"), ("ts", "ascending"), ("q", "ascending")]),
                    pa.int64())
    del merged
    is_query = pc.greater_equal(order, n_s)
    last_span = pc.fill_null_forward(pc.if_else(is_query, pa.scalar(None, pa.int64()), order))
    cand_sorted = pc.filter(last_span, is_query)
    query_pos = pc.subtract(pc.filter(order, is_query), n_s)
    cand = pc.take(cand_sorted, pc.sort_indices(query_pos))  # back to query order
    same = pc.fill_null(pc.equal(pc.take(span_thread, cand), q_thread), False)
    pending = pc.cast(true_positions(same), pa.int64())
    c = pc.filter(cand, same)
    ts = pc.filter(q_ts, same)
    found_at, found = [], []
    while len(pending):
        hit = pc.greater(pc.take(span_end, c), ts)
        if accept is not None:
            hit = pc.and_(hit, pc.take(accept, c))
        found_at.append(pc.filter(pending, hit))
        found.append(pc.filter(c, hit))
        miss = pc.invert(hit)
        up = pc.take(span_parent, pc.filter(c, miss))
        pending, ts = pc.filter(pending, miss), pc.filter(ts, miss)
        valid = pc.is_valid(up)
        pending, ts, c = pc.filter(pending, valid), pc.filter(ts, valid), pc.filter(up, valid)
    if not found_at:
        return pa.nulls(n_q, pa.int64())
    return scatter(n_q, pa.concat_arrays(found_at), pc.cast(pa.concat_arrays(found), pa.int64()))


def _span_ends(spans: pa.Table) -> pa.Array:
    """The spans' ``end`` column, or ``ts + dur`` where they give durations."""
    if "end" in spans.column_names:
        return combined(spans["end"])
    return pc.add(combined(spans["ts"]), combined(spans["dur"]))


def _innermost_in_c(spans: pa.Table, queries: pa.Table) -> pa.Array | None:
    """:func:`innermost_enclosing` by the C loop (each query's thread's spans searched by start, then up their
    parents), or None where it cannot run: not built, nulls in the times or threads, a thread's spans out of order."""
    c_loops = native_loops()
    if c_loops is None:
        return None
    member = None
    if "member" in spans.column_names:
        member = pc.fill_null(combined(spans["member"]), False)
    end_is_dur = "end" not in spans.column_names
    columns = [pc.cast(combined(spans[c]), pa.int64()) for c in ("thread", "ts", "dur" if end_is_dur else "end")]
    if member is not None:  # a row that is no span may have no time
        columns = [pc.if_else(member, c, 0) if c.null_count else c for c in columns]
    columns += [pc.cast(combined(queries[c]), pa.int64()) for c in ("thread", "ts")]
    if any(c.null_count for c in columns):
        return None
    parent = pc.cast(combined(spans["parent"]), pa.int64())
    parent_valid = None
    if parent.null_count == len(parent):  # (an all-null column may have no values buffer)
        parent = pc.fill_null(parent, -1)
    elif parent.null_count:  # the parents' validity, not a copy with -1 for none (1 GB trace: 2.3 MB, not 18)
        parent_valid = values_view(pc.cast(pc.is_valid(parent), pa.uint8()), "B")
    accept = None
    if "accept" in spans.column_names:
        accept = values_view(pc.cast(pc.fill_null(combined(spans["accept"]), False), pa.uint8()), "B")
    out = bytearray(8 * queries.num_rows)
    s_thread, s_ts, s_end, q_thread, q_ts = (int64_values(c) for c in columns)
    try:
        c_loops.innermost(s_thread, s_ts, s_end, values_view(parent, "q"), accept, q_thread, q_ts, out,
                          None if member is None else values_view(pc.cast(member, pa.uint8()), "B"), parent_valid,
                          end_is_dur)
    except ValueError:  # spans out of time order on a thread: the Arrow walk says what that gives
        return None
    return minus_one_as_null(out, queries.num_rows)


def sweep(spans: pa.Table, by: str | None = None) -> pa.Table:
    """The boundaries of the spans (a table with ``start``, ``end`` and any columns to carry along) in time
    order: one row per boundary with the span's other columns, ``t``, ``delta`` (+1 at a start, -1 at an end)
    and ``seg``, the time to the next boundary (0 for the last one, and with ``by`` for the last of each group).

    Sorted by ``by`` (when given), ``t`` and ``delta``: at equal times ends come first, so spans that only touch
    never count as open together. The running sum of ``delta`` up to a row is how many spans are open over its
    ``seg``.
    """
    n = spans.num_rows
    carried = {c: pa.concat_arrays([combined(spans[c])] * 2) for c in spans.column_names if c not in ("start", "end")}
    points = pa.table({
        **carried,
        "t": pa.concat_arrays([combined(spans["start"]), combined(spans["end"])]),
        "delta": pa.concat_arrays([pa.repeat(pa.scalar(1, pa.int64()), n), pa.repeat(pa.scalar(-1, pa.int64()), n)]),
    })
    if n == 0:
        return points.append_column("seg", pa.array([], pa.int64()))
    keys = ([(by, "ascending")] if by else []) + [("t", "ascending"), ("delta", "ascending")]
    points = points.take(pc.sort_indices(points, keys))
    t = combined(points["t"])
    m = len(t)
    seg = pc.subtract(pa.concat_arrays([t.slice(1), t.slice(m - 1)]), t)
    if by:
        g = combined(points[by])
        seg = pc.if_else(pc.equal(g, pa.concat_arrays([g.slice(1), g.slice(m - 1)])), seg, 0)
    return points.append_column("seg", seg)


def covered_within(starts: Sequence[int] | pa.Array, ends: Sequence[int] | pa.Array,
                   spans: list[tuple[int, int]]) -> list[int]:
    """For disjoint ``[starts[i], ends[i])`` in time order, how much of each ``(lo, hi)`` span they cover.

    Prefix sums and a binary search per span: O((n + spans) log n), so a thousand steps over a million busy
    intervals stay fast. Given Arrow arrays, the sums are Arrow's and the search reads the buffers in place (no
    Python int per interval)."""
    if isinstance(starts, (pa.Array, pa.ChunkedArray)):
        durations = pc.subtract(combined(ends), combined(starts))
        starts, ends = int64_values(starts), int64_values(ends)
        through = int64_values(pc.cumulative_sum(durations)) if len(durations) else []  # sum up to and with i
    else:
        through = list(accumulate(e - s for s, e in zip(starts, ends)))

    def covered_before(t: int) -> int:
        i = bisect_right(starts, t) - 1  # the last interval starting at or before t
        return 0 if i < 0 else through[i] - ends[i] + min(t, ends[i])

    return [max(0, covered_before(hi) - covered_before(lo)) if hi > lo else 0 for lo, hi in spans]


def covered_spans(starts: pa.Array, ends: pa.Array, lo: pa.Array, hi: pa.Array) -> pa.Array:
    """:func:`covered_within` over arrays (int64 per span, 0 for an empty one): in C where built, else the
    definition."""
    m = len(lo)
    if not m or not len(starts):
        return pa.repeat(pa.scalar(0, pa.int64()), m)
    starts, ends, lo, hi = (combined(pc.cast(a, pa.int64())) for a in (starts, ends, lo, hi))
    loops = native_loops()
    if loops is not None and not any(a.null_count for a in (starts, ends, lo, hi)):
        out = bytearray(8 * m)
        if loops.covered_each(*(values_view(a, "q") for a in (starts, ends, lo, hi)), out):
            return pa.Array.from_buffers(pa.int64(), m, [None, pa.py_buffer(out)])
    return pa.array(covered_within(starts, ends, list(zip(lo.to_pylist(), hi.to_pylist()))), pa.int64())


def covered_keys(starts: pa.Array, ends: pa.Array, lo: pa.Array, hi: pa.Array, keys: pa.Array,
                 ) -> tuple[pa.Array, pa.Array]:
    """The ``keys`` (int64, one per interval ``[lo, hi)``) of the intervals the disjoint, time-ordered spans cover by
    more than 0 ns, and by how much (:func:`covered_spans`), in the intervals' order: in C where built without a
    column of every interval's answer (on a long trace, millions of host slices of which a cause covers a part)."""
    if len(lo) and len(starts):
        loops = native_loops()
        columns = [combined(pc.cast(a, pa.int64())) for a in (starts, ends, lo, hi, keys)]
        if loops is not None and not any(a.null_count for a in columns):
            out = loops.covered_hits(*(values_view(a, "q") for a in columns))
            if out is not None:
                n = len(out[0]) // 8
                kept, ns = (pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(b)]) for b in out)
                return kept, ns
    covered = covered_spans(starts, ends, lo, hi)
    hit = pc.greater(covered, 0)
    return pc.cast(pc.filter(keys, hit), pa.int64()), pc.filter(covered, hit)
