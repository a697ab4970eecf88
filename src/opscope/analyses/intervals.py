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
    t = pa.table({"s": starts, "e": pc.add(starts, durs)})
    t = t.take(pc.sort_indices(t, [("s", "ascending")]))
    s = t["s"].combine_chunks()
    running = pc.cumulative_max(t["e"].combine_chunks())
    prev = pa.concat_arrays([pa.array([s[0].as_py()], pa.int64()), running.slice(0, len(running) - 1)])
    lower = pc.max_element_wise(s, prev)
    added = pc.max_element_wise(pc.subtract(running, lower), 0)
    return int(pc.sum(added).as_py() or 0)
