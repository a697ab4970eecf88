"""What opscope's C loops share on the Python side: whether they are on, and Arrow arrays as buffers and back.

The C parts (``ingest/chrome/_scan.c``, ``model/_derive.c``, ``analyses/_loops.c``, ``analyses/_graph.c``) each
have a Python (Arrow) definition beside them; ``OPSCOPE_NATIVE=0`` turns every one off, so the definitions run
(tests compare the two)."""

from __future__ import annotations

import os
from array import array

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
    array: pyarrow before 26.0.1 crashes the process (SIGSEGV) on a chunked array with no chunks."""
    return pc.indices_nonzero(one_array(mask))  # noqa: TID251  the one call, on an Array


def values_view(values: pa.Array | pa.ChunkedArray, fmt: str) -> memoryview:
    """The values of a null-free fixed-width array as a memoryview of ``fmt`` items (``q`` int64, ``i`` int32, ``B``
    uint8), read in place: no Python object per value. (Nulls are not looked at: their slots hold any value.)"""
    arr = one_array(values)
    if len(arr) == 0:
        return memoryview(array(fmt))
    return memoryview(arr.buffers()[1]).cast(fmt)[arr.offset:arr.offset + len(arr)]  # type: ignore[call-overload]


def minus_one_as_null(buffer: bytearray | array, n: int) -> pa.Array:
    """``n`` int64 values a C loop wrote into ``buffer`` (-1: none) as an Arrow array, null where -1."""
    values = pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(buffer)])
    return pc.if_else(pc.equal(values, -1), pa.scalar(None, pa.int64()), values)
