"""Damage a cache entry the way a disk or a stray write does, for the cache tests."""

from __future__ import annotations

from pathlib import Path

from opscope.model import cache as cache_mod


def entry_of(path: Path, root: Path) -> Path:
    return root / cache_mod.cache_key(path)


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
