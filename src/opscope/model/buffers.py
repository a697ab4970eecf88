"""What opscope's C loops share on the Python side: whether they are on, and Arrow arrays as buffers and back.

The C parts (``ingest/chrome/_scan.c``, ``model/_derive.c``, ``analyses/_loops.c``, ``analyses/_graph.c``) each
have a Python (Arrow) definition beside them; ``OPSCOPE_NATIVE=0`` turns every one off, so the definitions run
(tests compare the two)."""

from __future__ import annotations

import os
from array import array
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc


def c_enabled() -> bool:
    """Whether the C parts may be used (``OPSCOPE_NATIVE`` is not ``0``); each also has to be built."""
    return os.environ.get("OPSCOPE_NATIVE", "1") != "0"


def one_array(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """One contiguous array: a chunked array's chunks combined (an empty array of its type when it has none), its
    one chunk as it is -- Arrow's ``combine_chunks`` copies even a single chunk, and a column read from the cache is
    one chunk: the copy cost time and fresh memory. A plain array as it is."""
    if not isinstance(values, pa.ChunkedArray):
        return values
    if values.num_chunks == 1:
        return values.chunk(0)
    return values.combine_chunks() if values.num_chunks else pa.array([], values.type)


def true_positions(mask: pa.Array | pa.ChunkedArray) -> pa.Array:
    """The positions (uint64) of the true values of a boolean mask, as ``pc.indices_nonzero`` gives them, taken on one
    array: pyarrow before 26.0.1 crashes the process (SIGSEGV) on a chunked array with no chunks.

    With the C loop (``model/_derive.c``) the positions are written into a buffer of exactly their count: Arrow's
    ``indices_nonzero`` grows its output as it goes and allocates from Arrow's default pool whatever pool it is given,
    which in a process tuned after pyarrow loaded is the allocator that keeps what it frees (opscope.runtime)."""
    values = one_array(mask)
    native = derive_loops()
    if native is None or len(values) == 0:
        return pc.indices_nonzero(values)  # noqa: TID251  the one call, on an Array
    if values.null_count:
        values = pc.fill_null(values, False)  # a null is not true
    count = pc.sum(values).as_py() or 0
    out = bytearray(8 * count)
    if native.true_positions(values.buffers()[1], values.offset, len(values), out) != count:
        raise ValueError("true_positions: the mask's true values and its count differ")
    return pa.Array.from_buffers(pa.uint64(), count, [None, pa.py_buffer(out)])


def position_marks(n: int, positions: pa.Array | pa.ChunkedArray) -> pa.Array:
    """A bool array of length ``n``, true at each of ``positions`` (integers, nulls skipped, each in 0..n-1): its
    bits set in place (``model/_derive.c``), where ``pc.is_in(arange(n), positions)`` would hash all ``n``; a
    ValueError where a position is outside. Without the C loop, one Python step per position (the definition)."""
    values = pc.cast(one_array(positions), pa.int64())
    native = derive_loops()
    bits = bytearray((n + 7) // 8)
    if native is not None:
        valid = None if not values.null_count else values_view(pc.cast(pc.is_valid(values), pa.uint8()), "B")
        outside = native.set_bits(values_view(values, "q"), valid, n, bits) if len(values) else 0
        if outside:
            raise ValueError(f"position_marks: {outside} position(s) outside 0..{n - 1}")
    else:
        for position in values.to_pylist():
            if position is None:
                continue
            if not 0 <= position < n:
                raise ValueError(f"position_marks: position {position} outside 0..{n - 1}")
            bits[position >> 3] |= 1 << (position & 7)
    return pa.Array.from_buffers(pa.bool_(), n, [None, pa.py_buffer(bits)])


def derive_loops() -> Any:
    """``model/_derive`` where it is built and the C parts are on, else None."""
    if not c_enabled():
        return None
    try:
        from opscope.model import _derive  # type: ignore[attr-defined]
    except ImportError:
        return None
    return _derive


def values_view(values: pa.Array | pa.ChunkedArray, fmt: str) -> memoryview:
    """The values of a null-free fixed-width array as a memoryview of ``fmt`` items (``q`` int64, ``i`` int32, ``B``
    uint8), read in place: no Python object per value. (Nulls are not looked at: their slots hold any value.)"""
    arr = one_array(values)
    if len(arr) == 0:
        return memoryview(array(fmt))
    return memoryview(arr.buffers()[1]).cast(fmt)[arr.offset:arr.offset + len(arr)]  # type: ignore[call-overload]


def minus_one_as_null(buffer: bytearray | array, n: int, value_type: pa.DataType | None = None) -> pa.Array:
    """``n`` values of ``value_type`` (int64, the default, or int32) a C loop wrote into ``buffer`` (-1: none) as an
    Arrow array, null where -1."""
    value_type = value_type or pa.int64()
    values = pa.Array.from_buffers(value_type, n, [None, pa.py_buffer(buffer)])
    return pc.if_else(pc.equal(values, -1), pa.scalar(None, value_type), values)
