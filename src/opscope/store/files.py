"""The files of a cache entry: one Arrow IPC file per table (``NAME.arrow``) and every file's size and CRC-32
(``sums.json``).

A checksum covers the bytes that are read: the numeric tables' is taken once they are mapped, and the file's identity
(size, mtime, ctime) is the same after it as before and after every analysis (:mod:`opscope.model.mapped`, which also
makes a table truncated from outside while mapped an error, never SIGBUS); the compressed ones' over the bytes read
into memory before they are decompressed. The identity each table read in place had when its entry was written is
kept too (``sums.json``'s :data:`IDENTITIES`): a file whose identity is still that one is the file whose bytes the
writer summed, so its checksum is not read again (a write or a truncation changes its size, mtime or ctime; a copy of
the entry, its inode), which spares every command a read of the events table (300 MB on a 1 GB trace).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

#: Derived tables an entry holds beside the model's (TABLE_SCHEMAS): read like them, on first use.
DERIVED = ("copy_args",)
#: A table's file in an entry: ``NAME.arrow`` (the Arrow IPC file format, also known as Feather V2)
TABLE_SUFFIX = ".arrow"
#: The tables written uncompressed and read in place (model.mapped): the numeric ones the analyses read. Not the args
#: (text: zstd) nor the flows (LZ4: no analysis reads them from the cache, and in place they are 43 MB of the 1 GB
#: trace's entry instead of 17).
IN_PLACE = ("events", "counters", "memory", "steps")
#: The key of sums.json that holds, per table read in place, its file's identity as written: [size, inode, mtime ns,
#: ctime ns] (:func:`~opscope.model.mapped.written_identity`)
IDENTITIES = "@identity"
#: Compression of a table's file (see entry.write_tables); None: uncompressed
COMPRESSION: dict[str, str | None] = {**dict.fromkeys(IN_PLACE), "args": "zstd", "copy_args": "zstd"}
_CHUNK = 1 << 20

try:  # the same CRC-32 (gzip's), with the CPU's carry-less multiply: 3x zlib's on this machine
    from isal.isal_zlib import crc32
except ImportError:  # pragma: no cover - isal is a dependency; a platform without its wheel uses zlib's
    crc32 = zlib.crc32


def table_file(entry: Path, name: str) -> Path:
    return entry / f"{name}{TABLE_SUFFIX}"


def file_sum(file: Path) -> list[int]:
    """[size, CRC-32] of a file: CRC-32 because it finds flipped bits at GB/s (ISA-L's: ~10 GB/s here, 3x zlib's;
    blake2b: ~0.7); every command checks the events file, so this is start-up time."""
    crc, size = 0, 0
    with open(file, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            crc = crc32(chunk, crc)
            size += len(chunk)
    return [size, crc]


def check(file: Path, sums: dict) -> None:
    if file_sum(file) != sums.get(file.name):
        raise ValueError(f"{file.name} does not match its checksum")


def identity_of(file: Path, sums: dict) -> list[int] | None:
    """``file``'s :func:`~opscope.model.mapped.written_identity` when its entry was written (None: not kept, as in
    entries of earlier versions)."""
    value = sums.get(IDENTITIES, {})
    found = value.get(file.name) if isinstance(value, dict) else None
    return found if isinstance(found, list) and len(found) == 4 and all(isinstance(v, int) for v in found) else None


def sums_of(file: Path, sums: dict) -> list[int]:
    """``[size, CRC-32]`` of ``file`` as written, from the entry's sums.json."""
    value = sums.get(file.name)
    if not (isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) for v in value)):
        raise ValueError(f"sums.json has no checksum of {file.name}")
    return value


def footer(file: Path) -> tuple[list[str], int]:
    """The column names and row count of a table file, from its footer alone (read, not mapped: a file truncated
    meanwhile is a short read, not SIGBUS)."""
    with pa.OSFile(str(file)) as source:
        reader = pa.ipc.open_file(source)
        rows = (reader.metadata or {}).get(b"num_rows")
        if rows is None or not rows.isdigit():
            raise ValueError(f"{file.name} does not say how many rows it holds")
        return reader.schema.names, int(rows)


def read_ipc(file: Path, sums: dict) -> pa.Table:
    """The table in ``file``, decompressed: the compressed bytes are read into memory and checked there, so what is
    decompressed is what was checked."""
    data = file.read_bytes()
    if [len(data), crc32(data)] != sums_of(file, sums):
        raise ValueError(f"{file.name} does not match its checksum")
    return pa.ipc.open_file(pa.py_buffer(data)).read_all()


def ipc_batches(file: Path, sums: dict) -> Iterator[pa.RecordBatch]:
    """The record batches of the table in ``file``, decompressed one at a time as they are asked for: the
    compressed bytes are read and checked as :func:`read_ipc` does, so a table of text need never be held whole."""
    data = file.read_bytes()
    if [len(data), crc32(data)] != sums_of(file, sums):
        raise ValueError(f"{file.name} does not match its checksum")
    reader = pa.ipc.open_file(pa.py_buffer(data))
    for i in range(reader.num_record_batches):
        yield reader.get_batch(i)


def write_ipc(table: pa.Table, sink: Any, compression: str | None, metadata: dict[str, str] | None = None,
              use_threads: bool = True) -> None:
    """``table`` as an Arrow IPC file into ``sink`` (the cache's tables and the kept results alike)."""
    options = pa.ipc.IpcWriteOptions(compression=compression, use_threads=use_threads)
    with pa.ipc.new_file(sink, table.schema, options=options, metadata=metadata) as writer:
        # an IPC file holds one dictionary per column: chunks that each have their own are given a common one
        writer.write_table(table.unify_dictionaries())


def write_table(table: pa.Table, file: Path) -> None:
    """``table`` as an Arrow IPC file, its row count in the footer (read without reading a batch)."""
    # compressed on this thread: entry.write_tables runs two of these at once, and Arrow's own pool (use_threads) would
    # queue both tables' buffers behind each other and behind the analyses' Arrow work
    with pa.OSFile(str(file), "wb") as sink:
        write_ipc(table, sink, COMPRESSION.get(file.stem, "lz4"), {"num_rows": str(table.num_rows)},
                  use_threads=False)
