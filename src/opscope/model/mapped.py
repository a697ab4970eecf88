"""Tables read in place: an Arrow IPC file's columns as views of its pages, which the process lets go of as it runs.

A cache entry's events file is written uncompressed, so reading it is mapping it: the reader only points into the
map, nothing is decompressed or copied, and a column costs memory only where it is used. The pages are the kernel's
page cache, shared and clean. This module keeps them out of the process's resident set too: every
:data:`RELEASE_PERIOD_S` each mapped table's pages leave the process (``madvise(MADV_DONTNEED)``); a column used
again maps them back from the page cache, with no disk read and no copy (a 1 GB trace's 11 numeric columns, 190 MB:
3-4 ms). So a command holds the pages its analyses touched in the last few milliseconds, not every column it has
read. The releases run on a C thread that never takes the GIL (``_pages.c``), or, where that is not built, on a
Python thread. A Python thread also trims the C library's heap when freed buffers pile up in it
(:class:`opscope.sysmem.HeapTrimmer`). DESIGN.md, "The events file is read in place".
"""

from __future__ import annotations

import contextlib
import mmap
import threading
import weakref
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

from opscope.model.buffers import c_enabled
from opscope.sysmem import HeapTrimmer, switched_off

try:  # the releases without the GIL, where built (POSIX)
    from opscope.model import _pages  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - a build without a C compiler
    _pages = None

#: How often the pages of mapped tables leave the resident set. Shorter holds fewer pages at the cost of more
#: wake-ups; each walks the map's page tables (~0.1 ms for 300 MB) and the analyses map back what they still use
#: (fault-around maps 16 cached pages at a time). See BENCHMARKS.md, "The seventh session".
RELEASE_PERIOD_S = 0.002
#: How often the Python thread looks at the heap (and, without the C thread, releases the pages: it waits for the
#: GIL, so more often would only make it queue for it).
_PYTHON_PERIOD_S = 0.01


class MappedTable:
    """The table in an Arrow IPC file, read in place on first use (the file is mapped, read-only).

    Raises what opening, mapping or reading the file raises (OSError, ValueError, pyarrow.ArrowException); the caller
    says which file and what to do."""

    def __init__(self, file: Path) -> None:
        self.file = file
        self._table: pa.Table | None = None
        self._map: mmap.mmap | None = None
        self._lock = threading.Lock()
        #: whether the C thread releases the pages (else the Python thread does)
        self.released_in_c = False

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
                self.released_in_c = _watch_in_c(self, pages)
                _releaser.watch(self)
            return self._table

    def release(self) -> None:
        """Take the pages this process touched out of its resident set (they stay in the page cache)."""
        if self._map is not None:
            with contextlib.suppress(OSError, ValueError):
                self._map.madvise(mmap.MADV_DONTNEED)


def _watch_in_c(table: MappedTable, pages: pa.Buffer) -> bool:
    """Have the C thread release the map's pages (``pages``: all of it) until ``table`` goes; whether it took them."""
    if _pages is None or not c_enabled() or switched_off("madvise"):
        return False
    address = pages.address
    if not _pages.watch(address, pages.size, RELEASE_PERIOD_S):
        return False
    # Called as the table goes, before its map can be unmapped (the table holds it): unwatch returns once no release
    # of the map is under way, so the thread never touches an address that may be mapped to something else.
    weakref.finalize(table, _pages.unwatch, address)
    return True


class _Releaser:
    """A daemon Python thread while any mapped table lives: it trims the C library's heap where the analyses' freed
    buffers have piled up (:class:`opscope.sysmem.HeapTrimmer`: with the columns out of the process, what their
    analyses freed is the rest of what a command holds without using it), and releases the pages of the tables the C
    thread does not. It ends when no table is left (the next mapped table starts it again)."""

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
            if not self._release_all():
                return

    def _release_all(self) -> bool:
        """Release the pages of the live tables the C thread does not, and trim the heap; False (and the thread is
        done) when no table is left. (A function of its own: no reference to a table outlives it, so a table nobody
        uses can go while the thread sleeps.)"""
        with self._lock:
            tables = list(self._tables)
            if not tables:
                self._thread = None
                return False
        for table in tables:
            if not table.released_in_c and hasattr(mmap, "MADV_DONTNEED") and not switched_off("pyrelease"):
                table.release()
        self._trim()
        return True


_releaser = _Releaser()
