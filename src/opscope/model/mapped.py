"""Tables read in place: an Arrow IPC file's columns as views of its pages, checked where they are read.

A cache entry's numeric tables are written uncompressed, so reading one is mapping it: Arrow's reader only points
into the map, nothing is decompressed or copied, and the pages are the kernel's page cache, clean and shared: a
command owns none of them (its anonymous memory does not grow by the columns it reads).

A map shows the file as it is now, not as it was checked. Written in place from outside, the columns change under
the command; truncated, a read of a page the file no longer holds raises SIGBUS, which ends the process. So:

- the checksum is computed between two looks at the file's identity (size, mtime, ctime: a write or a truncation
  changes them), after the file is mapped: what was checked is what is mapped;
- the C guard (``_guard.c``) turns a SIGBUS in the map into zero pages and a mark;
- :meth:`MappedTable.verify` (the trace calls it after reading columns and after each analysis; the command before
  it ends, :func:`verify_all`) raises when the mark is set or the identity has changed since the check: what was
  computed from the table is then not given out, and the error names the file.

Without the guard (not built, or ``OPSCOPE_NATIVE=0``), and for small tables, the file is read into memory and
checked there instead: as safe (the bytes are the process's own), at the cost of the table's size in its memory.
DESIGN.md, "The cache entry".
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

from opscope.model.buffers import c_enabled

try:  # the guarded map, where built (POSIX)
    from opscope.model import _guard  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - a build without a C compiler
    _guard = None

try:  # the same CRC-32 (gzip's), with the CPU's carry-less multiply: 3x zlib's on this machine
    from isal.isal_zlib import crc32
except ImportError:  # pragma: no cover - isal is a dependency; a platform without its wheel uses zlib's
    from zlib import crc32

#: Files smaller than this are read into memory rather than mapped (the steps and counters tables: kilobytes).
MAP_FROM_BYTES = 1 << 20

#: what identifies the file's content for :meth:`MappedTable.verify`: size, mtime, ctime (a write or a truncation
#: changes them; the ctime also where the mtime was set back) and the link count (an unlink changes the ctime alone:
#: removing the entry while a command reads it is harmless, the map keeps the file)
_Identity = tuple[int, int, int, int]

_live: weakref.WeakSet[MappedTable] = weakref.WeakSet()
_live_lock = threading.Lock()


def _identity(st: os.stat_result) -> _Identity:
    return st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_nlink


def written_identity(st: os.stat_result) -> list[int]:
    """What a cache entry's writer keeps of a table's file to know it later without reading it: [size, inode, mtime
    ns, ctime ns] (no write, truncation, copy or rename over it keeps all four; :attr:`MappedTable.summed_as`)."""
    return [st.st_size, st.st_ino, st.st_mtime_ns, st.st_ctime_ns]


def _same(before: _Identity, now: _Identity) -> bool:
    if before[:2] != now[:2]:
        return False
    return before[2] == now[2] or before[3] != now[3]  # a ctime moved by a link count's change alone


def _read_sums(fd: int) -> list[int]:
    """[size, CRC-32] of the file open on ``fd``, read in 1 MiB pieces."""
    crc, size, at = 0, 0, 0
    while chunk := os.pread(fd, 1 << 20, at):
        crc = crc32(chunk, crc)
        size += len(chunk)
        at += len(chunk)
    return [size, crc]


def guarded() -> bool:
    """Whether large tables are mapped under the C guard (else they are read into memory)."""
    return _guard is not None and c_enabled()


def _failed(file: Path, exc: BaseException) -> Exception:
    return exc if isinstance(exc, Exception) else ValueError(str(exc))


class MappedTable:
    """The table in an Arrow IPC file, read in place (mapped read-only) and checked against ``sums`` (``[size,
    CRC-32]`` of the file as written) when first used.

    ``error(file, exc)`` makes the exception raised when the file is found damaged or changed (the cache removes the
    entry and says so). Opening and reading raise what they raise (OSError, ValueError, pyarrow.ArrowException)."""

    def __init__(self, file: Path, sums: list[int] | None = None,
                 error: Callable[[Path, BaseException], Exception] = _failed, summed_as: list[int] | None = None,
                 ) -> None:
        self.file = file
        self.sums = sums
        self.error = error
        #: [size, inode, mtime ns, ctime ns] the file had when ``sums`` was taken: a mapped file that still has it is
        #: the file summed, and is not read again for its checksum (store.files.IDENTITIES)
        self.summed_as = summed_as
        self._table: pa.Table | None = None
        self._metadata: dict[bytes, bytes] = {}
        self._mapping = None  # the guarded map (None: read into memory)
        self._fd: int | None = None  # the file, open for its identity while mapped
        self._identity: _Identity | None = None
        self._lock = threading.Lock()

    @property
    def table(self) -> pa.Table:
        with self._lock:
            if self._table is None:
                self._open()
            assert self._table is not None
            return self._table

    @property
    def metadata(self) -> dict[bytes, bytes]:
        """The file's footer metadata (the cache writes its row count there: ``num_rows``)."""
        self.table  # noqa: B018 - opened on first use
        return self._metadata

    @property
    def in_place(self) -> bool:
        """Whether the columns are views of the mapped file (else of the process's own copy)."""
        self.table  # noqa: B018
        return self._mapping is not None

    def _open(self) -> None:
        fd = os.open(self.file, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            st = os.fstat(fd)
            before = _identity(st)
            size = before[0]
            if self.sums is not None and size != self.sums[0]:
                raise ValueError(f"{self.file.name} is {size:,} bytes, written as {self.sums[0]:,}")
            if guarded() and size >= MAP_FROM_BYTES:
                mapping = _guard.Mapping(fd, size)
                data = memoryview(mapping)
                # read, not through the map: the map's pages are touched only where a column is used (the checksum
                # over the map made the whole file resident); what is read is what was checked so long as the
                # file's identity is the same after the check as before it. Not read at all where the file is still
                # the one whose bytes were summed (its identity then: nothing has written it since)
                unchanged = self.summed_as == written_identity(st)
                if self.sums is not None and not unchanged and _read_sums(fd) != self.sums:
                    raise ValueError(f"{self.file.name} does not match its checksum")
                if mapping.damaged() or not _same(before, _identity(os.fstat(fd))):
                    raise ValueError(f"{self.file.name} changed while it was checked")
            else:
                with os.fdopen(os.dup(fd), "rb") as fh:
                    mapping, data = None, memoryview(fh.read())
                if self.sums is not None and [len(data), crc32(data)] != self.sums:
                    raise ValueError(f"{self.file.name} does not match its checksum")
            # every column: with nothing to decompress the reader points into the buffer (asked for some fields only,
            # it copies the whole record batch instead)
            with pa.ipc.open_file(pa.py_buffer(data)) as reader:
                self._metadata = dict(reader.metadata or {})
                self._table = reader.read_all()
        except BaseException:
            os.close(fd)
            raise
        if mapping is None:
            os.close(fd)
            return
        # the file stays open while the table lives: verify() looks at its identity even once it is unlinked; and when
        # the table goes, a last look, so that a change that came after the last verify() is still said (verify_all)
        weakref.finalize(self, _last_look, self.file, mapping, fd, before, self.error)
        self._mapping, self._fd, self._identity = mapping, fd, before
        with _live_lock:
            _live.add(self)

    def verify(self) -> None:
        """Raise ``error(file, ...)`` when the mapped file has changed since it was checked (written or truncated from
        outside): a table read into memory never does."""
        if self._mapping is None or self._fd is None or self._identity is None:
            return
        problem = _changed(self.file, self._mapping, self._identity, self._fd)
        if problem is not None:
            raise self.error(self.file, problem)


def _changed(file: Path, mapping, identity: _Identity, fd: int) -> ValueError | None:
    """What is wrong with the mapped ``file`` (open on ``fd``) since it was checked as ``identity``, or None."""
    if mapping.damaged():
        return ValueError(f"{file.name} was truncated while it was read")
    try:
        now = _identity(os.fstat(fd))
    except (OSError, ValueError) as exc:  # (closed: the process is ending)
        return ValueError(str(exc))
    if not _same(identity, now):
        return ValueError(f"{file.name} changed while it was read")
    return None


def _last_look(file: Path, mapping, fd: int, identity: _Identity,
               error: Callable[[Path, BaseException], Exception]) -> None:
    """A mapped table's end (its trace is gone): whether its file changed after the last :meth:`MappedTable.verify`
    is kept for :func:`verify_all`, then the file is closed. Columns read from it may have been used meanwhile (a
    query's result, copied out of the map before its trace went)."""
    try:
        problem = _changed(file, mapping, identity, fd)
    finally:
        os.close(fd)
    if problem is not None:
        with _live_lock:
            _gone_changed.append((file, problem, error))


#: (file, what changed, its error) of mapped tables that went after a change (:func:`_last_look`)
_gone_changed: list[tuple[Path, ValueError, Callable[[Path, BaseException], Exception]]] = []


def verify_all() -> None:
    """:meth:`MappedTable.verify` of every mapped table of this process, and what the tables that have already gone
    found at their end (the command does it before it ends: an output computed from a file that changed under it is
    not given out as right)."""
    with _live_lock:
        tables = list(_live)
        gone = _gone_changed[:1]
        _gone_changed.clear()
    for table in tables:
        table.verify()
    for file, problem, error in gone:
        raise error(file, problem)
