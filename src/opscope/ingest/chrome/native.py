"""The optional C reader of event chunks (``_scan.c``): whether it is built and enabled, and its buffers as Arrow.

A :class:`Scanner` reads each chunk of the event array straight into column buffers when the chunk is the common
case (see the C file for what it declines) and holds the rows of several chunks; the reader takes them as one
:class:`NativeBatch` (the per-batch work on the Python side is paid once per ~64k rows, not per chunk). A declined
chunk leaves nothing behind and takes the Python path; the rows held are taken first, so the rows keep the file's
order. Where the extension is not built (no C compiler at install) or ``OPSCOPE_NATIVE=0`` is set, every chunk
takes the Python path, which gives the same tables.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from opscope.model.buffers import c_enabled

try:
    from opscope.ingest.chrome import _scan  # type: ignore[attr-defined]
except ImportError:  # not built here: the Python path reads every chunk
    _scan = None

#: Rows held before the reader takes them: enough that the per-batch work is small, few enough that they stay small.
TAKE_ROWS = 1 << 16


class Accepted:
    """What decoding a chunk returns when the C reader kept its rows: the events it left to the Python path
    (metadata and counters, as one JSON array, or None) and whether the chunk reads float times exactly."""

    __slots__ = ("exact", "rest")

    def __init__(self, rest: bytes | None, exact: bool) -> None:
        self.rest = rest
        self.exact = exact


def scanner() -> Any:
    """A new ``_scan.Scanner``, or None where the C reader is absent or turned off (``OPSCOPE_NATIVE=0``)."""
    if _scan is None or not c_enabled():
        return None
    return _scan.Scanner()


class NativeBatch:
    """The rows a Scanner held (events, flows, memory records), as Arrow arrays on demand."""

    __slots__ = ("columns", "flows", "markers", "memory", "rows")

    def __init__(self, columns: dict[str, Any]) -> None:
        self.columns = columns
        self.rows: int = columns["rows"]
        self.markers: int = columns["markers"]  # rows that are instant markers
        self.flows: int = columns["flows"]
        self.memory: int = columns["memory"]

    def ints(self, name: str, n: int) -> pa.Array:
        valid, data = self.columns[name]
        return pa.Array.from_buffers(pa.int64(), n, [None if valid is None else pa.py_buffer(valid),
                                                     pa.py_buffer(data)])

    def texts(self, name: str, n: int) -> pa.Array:
        valid, offsets, data = self.columns[name]
        return pa.Array.from_buffers(pa.string(), n, [None if valid is None else pa.py_buffer(valid),
                                                      pa.py_buffer(offsets), pa.py_buffer(data)])
