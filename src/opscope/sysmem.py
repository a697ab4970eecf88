"""Process memory housekeeping (the one place that talks to the C library's allocator)."""

from __future__ import annotations

import contextlib
import ctypes
import functools


@functools.cache
def _libc() -> ctypes.CDLL:
    # glibc's soname first: ctypes.util.find_library runs `ldconfig -p` in a child process (milliseconds that
    # every command paid at start-up); it is asked only where that name does not load (not glibc)
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        from ctypes.util import find_library

        return ctypes.CDLL(find_library("c") or "libc.so.6")


def release_free_memory() -> None:
    """Hand memory that glibc keeps after large frees back to the system (no-op elsewhere).

    Parsing and deriving free many column-sized buffers; glibc keeps them in its heap, so without this
    the peak memory of a command is the sum of its stages' leftovers, not what it really holds (Dask's
    workers trim for the same reason).
    """
    with contextlib.suppress(OSError, AttributeError):  # not glibc
        _libc().malloc_trim(0)
