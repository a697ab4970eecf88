"""Tables read in place: an Arrow IPC file's columns as views of its pages.

A cache entry's numeric tables are written uncompressed, so reading one is mapping it: the reader only points into
the map, nothing is decompressed or copied, and a column costs memory only where it is used. The pages are the
kernel's page cache, shared and clean: the process owns none of them (its anonymous memory does not grow by the
columns it reads; they count in its resident set while mapped, which is not what a command owns).
DESIGN.md, "The events file is read in place".
"""

from __future__ import annotations

import mmap
import threading
from pathlib import Path

import pyarrow as pa

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
            return self._table
