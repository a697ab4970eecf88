"""Process memory housekeeping (the one place that talks to the C library's allocator)."""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import ctypes


@functools.cache
def switched_off(name: str) -> bool:
    """Whether ``$OPSCOPE_TUNING_OFF`` (names, comma-separated) turns the mechanism ``name`` off: trimmer (the heap
    trimmed by growth), sysalloc (Arrow on the C library's allocator), trims (malloc_trim at phase boundaries).
    For measuring what each is worth (bench/owned_memory.py --variant)."""
    return name in os.environ.get("OPSCOPE_TUNING_OFF", "").split(",")


@functools.cache
def _libc() -> ctypes.CDLL:
    import ctypes  # here: the command line imports this module at start-up, and only trimming needs ctypes

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
    if not switched_off("trims"):
        _malloc_trim()


def _malloc_trim() -> None:
    with contextlib.suppress(OSError, AttributeError):  # not glibc
        _libc().malloc_trim(0)


# No mallopt(M_ARENA_MAX, 1) any more (one malloc heap for every thread once a trace opened from the cache): with
# Arrow on the C library's allocator and the heap trimmed by growth, one heap or several made no difference beyond
# the runs' spread (1 GB trace, 7 interleaved runs: advise 341 / 344 MiB, diff 343 / 341, gpu --idle 226 / 224; the
# same CPU time). BENCHMARKS.md, "Owned memory".


#: The C library's heap is trimmed once the process's anonymous memory has grown by this much since the last trim (see
#: HeapTrimmer): bigger lets more freed memory stay resident, smaller trims (and faults pages back in) more often.
#: 32 MiB: a 1 GB trace's ``advise`` peaked at 430-446 MiB in three runs where 64 MiB gave 447-473 and 16 MiB
#: 420-447 (and 0.1 s more); BENCHMARKS.md, "The seventh session".
TRIM_GROWTH_BYTES = 32 << 20


def anonymous_bytes() -> int | None:
    """The process's resident memory that is not a file's pages (its heaps: Python's, the C library's, Arrow's), or
    None where the system does not say (not Linux)."""
    try:
        with open("/proc/self/statm", "rb") as fh:
            fields = fh.read().split()
        return (int(fields[1]) - int(fields[2])) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


class HeapTrimmer:
    """Trims the C library's heap (:func:`release_free_memory`) when called after the process's anonymous memory grew
    by :data:`TRIM_GROWTH_BYTES` since the last trim.

    glibc returns a freed buffer to the system only from the top of its heap or where it was mapped on its own; the
    analyses free column-sized buffers between the results they keep, so without a trim those pages stay resident,
    free, until the command ends (on a 1 GB trace's ``advise``, 150-230 MB of them at its peak). Trimming after every
    analysis cost more (the next one faulted the pages in again); by growth, a command trims a few times."""

    def __init__(self) -> None:
        self._floor = anonymous_bytes()

    def __call__(self) -> None:
        now = anonymous_bytes()
        if now is None or self._floor is None or switched_off("trimmer"):
            return
        if now >= self._floor + TRIM_GROWTH_BYTES:
            _malloc_trim()
            now = anonymous_bytes() or now
            self._floor = now
        else:
            self._floor = min(self._floor, now)


#: Arrow's allocator for this process (Arrow reads it once, at its first allocation): the C library's. Arrow's default,
#: mimalloc, keeps the pages it frees, and the allocations Arrow makes on its own account (Acero's group-by, which does
#: not take pyarrow's pool) bypass ``pyarrow.set_memory_pool``: with glibc's malloc the next analysis reuses them and
#: :func:`release_free_memory` hands them back where a phase ends (a 1 GB trace's commands peak 7-23% lower, and run
#: faster; BENCHMARKS.md, "The sixth session").
ARROW_POOL_ENV = "ARROW_DEFAULT_MEMORY_POOL"
_pool_set_here = False


def prefer_system_allocator() -> None:
    """For the command process, before pyarrow is imported: Arrow's buffers from the C library's allocator, unless
    the person running it chose an allocator. Programs this process starts do not inherit the choice
    (:func:`child_environment`)."""
    global _pool_set_here
    if ARROW_POOL_ENV in os.environ or "pyarrow" in sys.modules or switched_off("sysalloc"):
        return
    os.environ[ARROW_POOL_ENV] = "system"
    _pool_set_here = True


def use_system_pool() -> None:
    """pyarrow's pool: the C library's allocator, which returns freed buffers where Arrow's default keeps them, so a
    one-shot command's peak stays near the size of its columns. (It covers pyarrow's own calls; Arrow's allocations on
    its own account follow :func:`prefer_system_allocator`'s choice, made at the command's start.)"""
    import pyarrow as pa

    if not switched_off("sysalloc"):
        pa.set_memory_pool(pa.system_memory_pool())


def child_environment(env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (a copy of this process's environment when None) for a program opscope starts: without the allocator
    choice :func:`prefer_system_allocator` made for opscope itself."""
    env = dict(os.environ) if env is None else env
    if _pool_set_here:
        env.pop(ARROW_POOL_ENV, None)
    return env
