"""Damage a cache entry the way a disk or a stray write does, for the cache tests."""

from __future__ import annotations

import os
from pathlib import Path

from opscope.store.keys import cache_key


def entry_of(path: Path, root: Path) -> Path:
    return root / cache_key(path)


def flip_in_data_pages(file: Path) -> int:
    """Invert a few bytes in the middle of the table file's record batches (never its footer); returns the offset.

    An Arrow IPC file ends with its footer, the footer's length (int32) and ``ARROW1``; what comes before the footer
    and after the leading magic and schema is the batches' data."""
    data = bytearray(file.read_bytes())
    footer_start = len(data) - 10 - int.from_bytes(data[-10:-6], "little")
    middle = (8 + footer_start) // 2 + footer_start // 4  # three quarters in: past the schema message
    assert 8 < middle < footer_start - 4, (middle, footer_start)
    for i in range(middle, middle + 4):
        data[i] ^= 0xFF
    file.write_bytes(bytes(data))
    return middle


def change_in_place(file: Path, how: str) -> None:
    """Change a table file the way a process outside opscope could while a command reads it: ``truncate`` it to
    4 KiB, or ``overwrite`` 4 KiB in the middle of its record batches in place (same size, other bytes)."""
    if how == "truncate":
        os.truncate(file, 4096)
        return
    assert how == "overwrite", how
    with open(file, "r+b") as fh:
        fh.seek(os.path.getsize(file) // 2)
        fh.write(b"\xa5" * 4096)


def padded_events(n: int = 30_000) -> list[dict]:
    """small_gpu_trace and ``n`` one-microsecond ops after it: an events table of a few MB, which the cache maps
    rather than reads (model.mapped.MAP_FROM_BYTES)."""
    from support.tracefiles import small_gpu_trace, x

    return small_gpu_trace() + [x("aten::pad", 4000 + 2 * i, 1) for i in range(n)]
