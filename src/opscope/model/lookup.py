"""``index_in`` for int64 columns (correlation ids, row ids): Arrow's ``pc.index_in`` (its definition), or one pass
of ``_derive.c`` over an open-addressing table where that is built: the same positions, about three times faster
on the million launches of a 1 GB trace (no memo table, no null bookkeeping per value)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from opscope.model.buffers import c_enabled, minus_one_as_null, one_array, values_view

try:
    from opscope.model import _derive  # type: ignore[attr-defined]
except ImportError:  # not built here: Arrow's index_in
    _derive = None


def index_in(keys: pa.Array | pa.ChunkedArray, values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Per key, the position (int32) of its first occurrence in ``values``, null where it does not occur; a null key
    finds the first null value. Exactly ``pc.index_in(keys, value_set=values)`` for int64 columns."""
    keys, values = one_array(keys), one_array(values)
    if (_derive is None or not c_enabled() or keys.type != pa.int64() or values.type != pa.int64()
            or len(values) >= 1 << 31):
        return pc.index_in(keys, value_set=values)
    out = bytearray(8 * len(keys))
    _derive.index_in(values_view(keys, "q"), _valid(keys), values_view(values, "q"), _valid(values), out)
    return pc.cast(minus_one_as_null(out, len(keys)), pa.int32())


def _valid(arr: pa.Array) -> memoryview | None:
    """One byte per value (1: valid), or None when none is null."""
    if arr.null_count == 0:
        return None
    return values_view(pc.cast(pc.is_valid(arr), pa.uint8()), "B")
