"""Process memory housekeeping (the one place that talks to the C library's allocator)."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util


def release_free_memory() -> None:
    """Hand memory that glibc keeps after large frees back to the system (no-op elsewhere).

    Parsing and deriving free many column-sized buffers; glibc keeps them in its heap, so without this
    the peak memory of a command is the sum of its stages' leftovers, not what it really holds (Dask's
    workers trim for the same reason).
    """
    with contextlib.suppress(OSError, AttributeError):  # not glibc
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)
