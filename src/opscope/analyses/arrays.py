"""Small Arrow array builders shared by the analyses."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc


def arange(n: int) -> pa.Array:
    """0, 1, ..., n - 1 as int64, built by Arrow (no Python int per value)."""
    if n == 0:
        return pa.array([], pa.int64())
    return pc.subtract(pc.cumulative_sum(pa.repeat(pa.scalar(1, pa.int64()), n)), 1)
