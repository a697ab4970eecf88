"""Damage a cache entry the way a disk or a stray write does, for the cache tests."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from opscope.model import cache as cache_mod


def entry_of(path: Path, root: Path) -> Path:
    return root / cache_mod.cache_key(path)


def flip_in_data_pages(file: Path) -> int:
    """Invert a few bytes in the middle of the first column chunk's pages (never the footer); returns the offset."""
    column = pq.ParquetFile(file).metadata.row_group(0).column(0)
    start = column.dictionary_page_offset or column.data_page_offset
    middle = start + column.total_compressed_size // 2
    data = bytearray(file.read_bytes())
    footer_start = len(data) - 8 - int.from_bytes(data[-8:-4], "little")
    assert start < middle < footer_start, (start, middle, footer_start)
    for i in range(middle, middle + 4):
        data[i] ^= 0xFF
    file.write_bytes(bytes(data))
    return middle
