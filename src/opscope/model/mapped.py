"""Tables read in place: an Arrow IPC file's columns as views of its pages.

A cache entry's numeric tables are written uncompressed, so reading one is mapping it: the reader only points into
the map, nothing is decompressed or copied, and a column costs memory only where it is used. The pages are the
kernel's page cache, shared and clean: the process owns none of them (its anonymous memory does not grow by the
columns it reads; they count in its resident set while mapped, which is not what a command owns). A Python thread
trims the C library's heap when freed buffers pile up in it (:class:`opscope.sysmem.HeapTrimmer`).
DESIGN.md, "The events file is read in place".
"""

from __future__ import annotations

import mmap
import threading
import weakref
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

from opscope.sysmem import HeapTrimmer

#: How often the Python thread looks at the heap.
_PYTHON_PERIOD_S = 0.01

# No release of the mapped pages any more (a C thread called madvise(MADV_DONTNEED) on them every 2 ms, a Python one
# every 10 ms where that was not built): it moved only the page cache's share of the resident set. Interleaved on the
# 1 GB trace, 5 runs of each cached command with it on, with the Python thread instead and with neither: the same
# peak anonymous memory within the runs' spread (advise 335 / 330 / 338 MiB, diff 348 / 351 / 347) and the same time
# (BENCHMARKS.md, "Owned memory").


class MappedTable:
    """The table in an Arrow IPC file, read in place on first use (the file is mapped, read-only).

    Raises what opening, mapping or reading the file raises (OSError, ValueError, pyarrow.ArrowException); the caller
    says which file and what to do."""

    def __init__(self, file: Path) -> None:
        self.file = file
        self._table: pa.Table | None = None
        self._map: mmap.mmap | None = None
        self._lock = threading.Lock()

    @property
    def table(self) -> pa.Table:
        with self._lock:
            if self._table is None:
                with open(self.file, "rb") as fh:
                    self._map = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
                pages = pa.py_buffer(self._map)
                # every column: with nothing to decompress the reader points into the map (asked for some fields
                # only, it copies the whole record batch instead)
                self._table = pa.ipc.open_file(pa.BufferReader(pages)).read_all()
                _releaser.watch(self)
            return self._table


class _Releaser:
    """A daemon Python thread while any mapped table lives: it trims the C library's heap where the analyses' freed
    buffers have piled up (:class:`opscope.sysmem.HeapTrimmer`). It ends when no table is left (the next mapped table
    starts it again)."""

    def __init__(self) -> None:
        self._tables: weakref.WeakSet[MappedTable] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._trim: Callable[[], None] = lambda: None

    def watch(self, table: MappedTable) -> None:
        with self._lock:
            self._tables.add(table)
            if self._thread is None:
                self._trim = HeapTrimmer()
                self._thread = threading.Thread(target=self._run, name="opscope-release-pages", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        stop = threading.Event()  # never set: a wait that sleeps without holding the GIL
        while True:
            stop.wait(_PYTHON_PERIOD_S)
            if not self._trim_while_tables_live():
                return

    def _trim_while_tables_live(self) -> bool:
        """Trim the heap; False (and the thread is done) when no table is left."""
        with self._lock:
            if not self._tables:
                self._thread = None
                return False
        self._trim()
        return True


_releaser = _Releaser()
