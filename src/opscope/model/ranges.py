"""``arange``: consecutive int64 row numbers as an Arrow array, built by Arrow (``pa.array(range(n))`` makes a
Python int per row: 0.6 s for 4 M rows, against ~20 ms here)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc


def arange(start: int, stop: int) -> pa.Array:
    """``start, start + 1, ..., stop - 1`` as int64 (empty when ``stop <= start``)."""
    n = max(0, stop - start)
    if n == 0:
        return pa.array([], pa.int64())
    ones = pa.nulls(n, pa.int64()).fill_null(1)
    return pc.add(pc.cumulative_sum(ones), start - 1)
