"""The columnar cache: a second open of the same trace file reads columns (Arrow IPC files) instead of JSON.

One directory per source file version. The key says "this file has not changed since" by what the user
cannot restore: the file's path, size, mtime, ctime and inode, plus a hash of its first and last MiB
(DESIGN.md, "The cache entry": what the key trusts). A cache directory is written under a temporary name and
renamed into place, so readers never see half a cache and an existing one is never overwritten.
Every file of an entry has its size and CRC-32 in ``sums.json``: the events table and meta.json are
checked when the entry is opened (a corrupt one is removed and the trace re-parsed), the other tables
when they are first read (a corrupt one is an error that removes the entry, so the next run rebuilds it).
A checksum covers the bytes that are read: the numeric tables' is taken once they are mapped, and the file's identity
(size, mtime, ctime) is the same after it as before and after every analysis (:mod:`opscope.model.mapped`, which also
makes a table truncated from outside while mapped an error, never SIGBUS); the compressed ones' over the bytes read
into memory before they are decompressed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import threading
import zlib
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa

from opscope.errors import TraceError
from opscope.model.mapped import MappedTable
from opscope.model.schema import TABLE_SCHEMAS
from opscope.model.trace import ColumnLoader, Trace
from opscope.threads import side_by_side

# 13: copies and fills that run as kernels are kind memcpy/memset (derive.KIND_BY_NAME);
# 12: the numeric tables uncompressed and read in place (model.mapped): their columns are views of the page cache;
# 11: Arrow IPC files (NAME.arrow) instead of Parquet: written in a third of the time, read in two thirds;
# 10: copy_args.parquet (the args of memcpy/memset events, apart: the copies' sizes without every event's args);
# 9: ONNX Runtime profiles read by their own reader (before: every event kind other)
#: Bump when the model's tables change shape: old cache entries are then ignored.
CACHE_FORMAT = 13  # 8: self time of partly overlapping events counted once; 7: sums.json, ctime and inode in the key
#: Derived tables an entry holds beside the model's (TABLE_SCHEMAS): read like them, on first use.
DERIVED = ("copy_args",)
#: A table's file in an entry: ``NAME.arrow`` (the Arrow IPC file format, also known as Feather V2)
TABLE_SUFFIX = ".arrow"
_PROBE = 1 << 20
_CHUNK = 1 << 20

try:  # the same CRC-32 (gzip's), with the CPU's carry-less multiply: 3x zlib's on this machine
    from isal.isal_zlib import crc32 as _crc32
except ImportError:  # pragma: no cover - isal is a dependency; a platform without its wheel uses zlib's
    _crc32 = zlib.crc32
#: What store() never writes into meta.json: facts about this open, not about the trace.
_NOT_STORED = ("from_cache", "cache_rebuilt")


class CorruptEntryError(Exception):
    """The cache entry of a trace was damaged; it has been removed. ``str()`` says what was wrong."""


def cache_root() -> Path:
    env = os.environ.get("OPSCOPE_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "opscope"


def cache_key(path: Path, variant: str = "") -> str:
    """The entry of ``path`` as read with the reader settings ``variant`` (a read that a setting may change,
    such as the gzip inflate cap, must not be served to a read with another setting)."""
    st = path.stat()
    h = hashlib.blake2b(digest_size=16)
    # ctime and inode: no tool sets them back (os.utime restores mtime only, and a rewrite changes ctime),
    # so an edit anywhere in the file is a new key without hashing gigabytes on every command.
    h.update(f"{CACHE_FORMAT}|{path.resolve()}|{st.st_size}|{st.st_mtime_ns}|{st.st_ctime_ns}|"
             f"{st.st_dev}|{st.st_ino}|{variant}".encode())
    with open(path, "rb") as fh:
        h.update(fh.read(_PROBE))
        if st.st_size > _PROBE:
            fh.seek(max(_PROBE, st.st_size - _PROBE))
            h.update(fh.read(_PROBE))
    return h.hexdigest()


def _sum(file: Path) -> list[int]:
    """[size, CRC-32] of a file: CRC-32 because it finds flipped bits at GB/s (ISA-L's: ~10 GB/s here, 3x zlib's;
    blake2b: ~0.7); every command checks the events file, so this is start-up time."""
    crc, size = 0, 0
    with open(file, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            crc = _crc32(chunk, crc)
            size += len(chunk)
    return [size, crc]


def _check(file: Path, sums: dict) -> None:
    if _sum(file) != sums.get(file.name):
        raise ValueError(f"{file.name} does not match its checksum")


def _sums_of(file: Path, sums: dict) -> list[int]:
    """``[size, CRC-32]`` of ``file`` as written, from the entry's sums.json."""
    value = sums.get(file.name)
    if not (isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) for v in value)):
        raise ValueError(f"sums.json has no checksum of {file.name}")
    return value


def load(path: Path, root: Path | None = None, variant: str = "") -> Trace | None:
    """The cached Trace of ``path``, or None if there is no entry. Raises CorruptEntryError (after removing
    the entry) when there was one but it is damaged, so the caller re-parses and can say why."""
    entry = (root or cache_root()) / cache_key(path, variant)
    meta_file = entry / "meta.json"
    if not meta_file.is_file():
        return None
    try:
        sums = json.loads((entry / "sums.json").read_text())
        if not isinstance(sums, dict):
            raise ValueError("sums.json is not an object")
        _check(meta_file, sums)
        metadata = json.loads(meta_file.read_text())
        if not isinstance(metadata, dict):
            raise ValueError("meta.json is not an object")
        events_file = table_file(entry, "events")
        # every command reads it: mapped and checked now, so a bad one is rebuilt here
        mapped = MappedTable(events_file, _sums_of(events_file, sums), _unreadable)
        names, rows = mapped.table.schema.names, mapped.metadata.get(b"num_rows", b"")
        if not rows.isdigit():
            raise ValueError(f"{events_file.name} does not say how many rows it holds")
        # Every side table's footer too (cheap: footers only), so a truncated file is found here,
        # not as pyarrow's multi-line error in the middle of a command.
        for name in (*TABLE_SCHEMAS, *DERIVED):
            if name != "events":
                _footer(table_file(entry, name))
        tables: dict = {"events": ColumnLoader(names, partial(_read_columns, mapped, names), int(rows),
                                               verify=mapped.verify)}
    except (OSError, ValueError, pa.ArrowException) as exc:
        # Unreadable entry: remove it and let the caller re-parse, so store() writes a good entry
        # (store never overwrites an entry whose meta.json exists).
        _discard(entry)
        raise CorruptEntryError(_first_line(exc)) from None
    for name in (*TABLE_SCHEMAS, *DERIVED):
        if name != "events":
            # Read (and checked) on first use: most commands never touch flows, memory or the JSON args.
            tables[name] = partial(_read_later, table_file(entry, name), sums, name in IN_PLACE)
    metadata["from_cache"] = str(entry)
    return Trace(metadata=metadata, results=ResultStore(entry), **tables)


def _first_line(exc: BaseException) -> str:
    # pyarrow's messages can run to several lines; the user gets one.
    text = str(exc).strip().splitlines()
    return text[0] if text else exc.__class__.__name__


def _discard(entry: Path) -> None:
    # Rename first so a concurrent reader never sees a half-deleted entry; ignore a racing remover.
    try:
        doomed = Path(tempfile.mkdtemp(prefix=".bad-", dir=entry.parent))
        os.replace(entry, doomed / "entry")
    except OSError:
        return
    shutil.rmtree(doomed, ignore_errors=True)


def _unreadable(file: Path, exc: BaseException) -> TraceError:
    # Found in the middle of a command: too late to re-parse, so remove the entry and the next run rebuilds it.
    _discard(file.parent)
    return TraceError(file, f"cache entry was corrupt ({_first_line(exc)}) and has been removed",
                      "run the command again to rebuild it from the trace")


def table_file(entry: Path, name: str) -> Path:
    return entry / f"{name}{TABLE_SUFFIX}"


def _footer(file: Path) -> tuple[list[str], int]:
    """The column names and row count of a table file, from its footer alone (read, not mapped: a file truncated
    meanwhile is a short read, not SIGBUS)."""
    with pa.OSFile(str(file)) as source:
        reader = pa.ipc.open_file(source)
        rows = (reader.metadata or {}).get(b"num_rows")
        if rows is None or not rows.isdigit():
            raise ValueError(f"{file.name} does not say how many rows it holds")
        return reader.schema.names, int(rows)


def _read_ipc(file: Path, sums: dict) -> pa.Table:
    """The table in ``file``, decompressed: the compressed bytes are read into memory and checked there, so what is
    decompressed is what was checked."""
    data = file.read_bytes()
    if [len(data), _crc32(data)] != _sums_of(file, sums):
        raise ValueError(f"{file.name} does not match its checksum")
    return pa.ipc.open_file(pa.py_buffer(data)).read_all()


def _read_columns(mapped: MappedTable, columns: list[str], names: list[str]) -> pa.Table:
    """The columns ``names`` of the mapped events file whose columns are ``columns`` (its footer's, read when the entry
    opened), in that order: views of the file, nothing read until used."""
    try:
        missing = sorted(set(names) - set(columns))
        if missing:
            raise ValueError(f"{mapped.file.name} has no column {missing[0]!r}")
        return mapped.table.select(names)
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise _unreadable(mapped.file, exc) from None


def _read_later(file: Path, sums: dict, in_place: bool) -> pa.Table | MappedTable:
    try:
        if in_place:
            mapped = MappedTable(file, _sums_of(file, sums), _unreadable)
            mapped.table  # noqa: B018 - mapped and checked now, so that a bad file is an error here
            return mapped  # (the trace keeps it, and verifies it after each analysis)
        return _read_ipc(file, sums)
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise _unreadable(file, exc) from None


class EntryDraft:
    """A cache entry begun before its trace is complete: the temporary directory :func:`store` fills and renames,
    with the ``args`` table (the JSON text of every event: the biggest table, final once ``complete`` has sorted the
    events) compressed into it on a thread of its own while ``complete`` nests the events. Then the trace can let go
    of that table (:meth:`offload`) for the rest of the command: it is read back from the entry where needed.

    ``complete(trace, args_ready=draft.write_args)``, ``draft.offload(trace, loader)``, then ``store(...,
    draft=draft)``, or :meth:`discard` where the trace is not stored."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root or cache_root()
        self.root.mkdir(parents=True, exist_ok=True)
        self.dir = Path(tempfile.mkdtemp(prefix=".tmp-", dir=self.root))
        #: what the trace holds instead of its args after :meth:`offload`
        self.loader: Callable[[], pa.Table] | None = None
        self._written = False
        self._thread: threading.Thread | None = None

    def write_args(self, args: pa.Table) -> None:
        """Start writing ``args`` (the trace's final args table) into the entry."""

        def write() -> None:
            # a failure leaves the entry without its args: store() then gives the entry up
            with contextlib.suppress(OSError, pa.ArrowException):
                _write_table(args, table_file(self.dir, "args"))
                self._written = True

        self._thread = threading.Thread(target=write, name="opscope-cache-args")
        self._thread.start()

    def offload(self, trace: Trace, loader: Callable[[], pa.Table]) -> None:
        """Have ``trace`` let go of its args table for ``loader`` once it is written here (it holds it until then
        through this draft's writer alone)."""
        if self._thread is not None:
            self.loader = loader
            trace.offload_args(loader)

    def args_written(self) -> bool:
        """Whether the args table is in the entry (waits for the writer)."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        return self._written

    def discard(self) -> None:
        self.args_written()
        shutil.rmtree(self.dir, ignore_errors=True)


def store(path: Path, trace: Trace, root: Path | None = None, variant: str = "",
          draft: EntryDraft | None = None) -> Path | None:
    """Write the cache entry for ``path``; returns its directory, or None if it could not be written. ``draft``: the
    entry begun while the trace was completed (with its args table written, or being written); store finishes it or
    discards it."""
    root = draft.root if draft is not None else root or cache_root()
    entry = root / cache_key(path, variant)
    if (entry / "meta.json").is_file():
        if draft is not None:
            draft.discard()
        return entry
    try:
        if draft is not None:
            tmp = draft.dir
        else:
            root.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=root))
    except OSError:
        return None
    try:
        tables = {name: getattr(trace, name) for name in TABLE_SCHEMAS if name != "args"}
        tables["copy_args"] = trace.copy_args
        held = trace.held_args()
        if draft is None or held is not draft.loader:
            tables["args"] = trace.args  # (a table the trace still holds, or was given after the draft began)
        elif not draft.args_written():  # the trace let go of its args and they did not reach the entry
            raise OSError("the args table could not be written")
        _write_tables(tables, tmp)
        meta = {k: v for k, v in trace.metadata.items() if k not in _NOT_STORED}
        (tmp / "meta.json").write_text(json.dumps(meta, default=str))
        sums = {f.name: _sum(f) for f in tmp.iterdir()}
        (tmp / "sums.json").write_text(json.dumps(sums))
        os.rename(tmp, entry)
    except OSError:
        if draft is not None:
            draft.args_written()  # its writer is done with the directory
        shutil.rmtree(tmp, ignore_errors=True)
        return None
    return entry


#: The tables written uncompressed and read in place (model.mapped): the numeric ones the analyses read. Not the args
#: (text: zstd) nor the flows (LZ4: no analysis reads them from the cache, and in place they are 43 MB of the 1 GB
#: trace's entry instead of 17).
IN_PLACE = ("events", "counters", "memory", "steps")
#: Compression of a table's file (see _write_tables); None: uncompressed
_COMPRESSION: dict[str, str | None] = {**dict.fromkeys(IN_PLACE), "args": "zstd", "copy_args": "zstd"}


def _write_ipc(table: pa.Table, sink: Any, compression: str | None, metadata: dict[str, str] | None = None,
               use_threads: bool = True) -> None:
    """``table`` as an Arrow IPC file into ``sink`` (the cache's tables and the kept results alike)."""
    options = pa.ipc.IpcWriteOptions(compression=compression, use_threads=use_threads)
    with pa.ipc.new_file(sink, table.schema, options=options, metadata=metadata) as writer:
        # an IPC file holds one dictionary per column: chunks that each have their own are given a common one
        writer.write_table(table.unify_dictionaries())


def _write_table(table: pa.Table, file: Path) -> None:
    """``table`` as an Arrow IPC file, its row count in the footer (read without reading a batch)."""
    # compressed on this thread: _write_tables runs two of these at once, and Arrow's own pool (use_threads) would
    # queue both tables' buffers behind each other and behind the analyses' Arrow work
    with pa.OSFile(str(file), "wb") as sink:
        _write_ipc(table, sink, _COMPRESSION.get(file.stem, "lz4"), {"num_rows": str(table.num_rows)},
                   use_threads=False)


def _write_tables(tables: dict[str, pa.Table], directory: Path) -> None:
    """Each table as ``NAME.arrow``, on two threads (compression releases the GIL), the tables dealt largest first to
    the thread with fewer bytes so far: the events on one, the args text on the other. The helper's error is raised
    here.

    Arrow IPC files, not Parquet: the columns are written as they are in memory (dictionaries stay dictionaries), so
    there is no encoding to do or undo. The numeric tables (:data:`IN_PLACE`: the events, memory records...) are
    uncompressed, to be read in place (:mod:`opscope.model.mapped`: a mapped column costs no decompression and, once
    used, no memory of the process's own): the 1 GB trace's events take 290 MB (LZ4: 68 MB, read in 0.12 s into
    memory the command then held). The args text is zstd (less than half of LZ4's size, and rarely read)."""
    if not tables:
        return
    shares: tuple[list[str], list[str]] = ([], [])
    loads = [0, 0]
    for name in sorted(tables, key=lambda name: -tables[name].nbytes):
        lighter = loads.index(min(loads))
        shares[lighter].append(name)
        loads[lighter] += tables[name].nbytes

    def write(names: list[str]) -> None:
        for name in names:
            _write_table(tables[name], table_file(directory, name))

    side_by_side(lambda: write(shares[1]), lambda: write(shares[0]), "opscope-cache-write")


# --- results of analyses, kept beside the tables -----------------------------------------------------------

_RESULT_HEADER = 12  # payload size (8 bytes) and CRC-32 (4 bytes), little-endian
_fingerprint: str | None = None


def code_fingerprint() -> str:
    """A hash of opscope's own files (code and data) and pyarrow's version: a result computed by other code is
    never served. Hashed once per process (~180 small files: milliseconds)."""
    global _fingerprint
    if _fingerprint is None:
        root = Path(__file__).resolve().parent.parent
        h = hashlib.blake2b(digest_size=16)
        h.update(f"{CACHE_FORMAT}|{pa.__version__}".encode())
        for file in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                           and p.suffix != ".pyc"):
            h.update(str(file.relative_to(root)).encode() + b"\0")
            h.update(file.read_bytes())
        _fingerprint = h.hexdigest()
    return _fingerprint


class ResultStore:
    """What analyses computed on a cached trace, kept in its entry for the next command: Arrow tables (IPC,
    LZ4-compressed) and JSON values, one file each, in ``results/<code fingerprint>/`` and named by a hash of the
    analysis' key.

    Written by the first command that computes a result, atomically (a temporary name renamed into place) and
    with its size and CRC-32 in front; a file that fails the check is removed and the result computed again. A
    result that cannot be written (read-only cache, full disk) is simply not kept. Writing removes the results of
    other code (another opscope version): they would never be read again by this one."""

    def __init__(self, entry: Path) -> None:
        self.root = entry / "results"
        self._pruned = False

    @property
    def dir(self) -> Path:
        return self.root / code_fingerprint()

    def _file(self, key: str) -> Path:
        return self.dir / hashlib.blake2b(key.encode(), digest_size=16).hexdigest()

    def _prune(self) -> None:
        # once per store: the folders of other fingerprints (another version's results) go
        self._pruned = True
        mine = self.dir.name
        with contextlib.suppress(OSError):
            for other in self.root.iterdir():
                if other.name == mine:
                    continue
                if other.is_dir():
                    shutil.rmtree(other, ignore_errors=True)
                else:
                    other.unlink(missing_ok=True)

    def get(self, key: str) -> tuple[bool, Any]:
        """``(True, the stored value)``, or ``(False, None)`` when there is none (or it was damaged: removed)."""
        file = self._file(key)
        try:
            data = file.read_bytes()
        except OSError:
            return False, None
        size, crc = int.from_bytes(data[:8], "little"), int.from_bytes(data[8:_RESULT_HEADER], "little")
        payload = memoryview(data)[_RESULT_HEADER:]
        try:
            if len(payload) != size or _crc32(payload) != crc:
                raise ValueError("checksum")
            if payload[:1] == b"{":
                return True, json.loads(bytes(payload))["v"]
            with pa.ipc.open_file(pa.py_buffer(bytes(payload))) as reader:
                return True, reader.read_all()
        except (ValueError, KeyError, TypeError, pa.ArrowException):
            with contextlib.suppress(OSError):
                file.unlink()  # damaged: computed again and rewritten
            return False, None

    def put(self, key: str, value: Any) -> None:
        """Keep ``value`` (a pyarrow Table, or a JSON value that survives a round trip: str, int, float, bool,
        None, lists and str-keyed dicts of them) for the next command."""
        try:
            if isinstance(value, pa.Table):
                sink = pa.BufferOutputStream()
                _write_ipc(value, sink, "lz4")  # as the tables: read back fastest
                payload = sink.getvalue().to_pybytes()
            else:
                text = json.dumps({"v": value}, allow_nan=True)
                if json.loads(text)["v"] != value:  # a tuple, a non-str key: would come back different
                    return
                payload = text.encode()
        except (TypeError, ValueError, RecursionError, pa.ArrowException):
            return  # not a value this store can keep: computed again next time
        if not self._pruned:
            self._prune()
        file = self._file(key)
        try:
            self.root.mkdir(exist_ok=True)  # not parents: an entry removed meanwhile is not made again here
            self.dir.mkdir(exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=self.dir)
        except OSError:
            return  # a read-only or full cache: the result is not kept
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(len(payload).to_bytes(8, "little") + _crc32(payload).to_bytes(4, "little"))
                fh.write(payload)
            os.replace(tmp, file)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
