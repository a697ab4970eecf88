"""``arange``: consecutive int64 row numbers as an Arrow array, without a Python int per row (``pa.array(range(n))``:
0.6 s for 4 M rows): written in one pass into an uninitialised Arrow buffer by ``model/_derive.c``, or built by
Arrow (a cumulative sum of ones, three passes and three columns of memory) where that is not built."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from opscope.model.buffers import derive_loops


def arange(start: int, stop: int) -> pa.Array:
    """``start, start + 1, ..., stop - 1`` as int64 (empty when ``stop <= start``)."""
    n = max(0, stop - start)
    if n == 0:
        return pa.array([], pa.int64())
    native = derive_loops()
    if native is not None:
        numbers = pa.allocate_buffer(8 * n)  # every item is written: no zeroing first
        native.fill_range(numbers, start)
        return pa.Array.from_buffers(pa.int64(), n, [None, numbers])
    ones = pa.nulls(n, pa.int64()).fill_null(1)
    return pc.add(pc.cumulative_sum(ones), start - 1)
