"""A cache entry: a second open of the same trace file reads columns (Arrow IPC files) instead of JSON.

One directory per source file version (:mod:`.keys`). An entry is written under a temporary name and renamed into
place, so readers never see half an entry and a published one is never overwritten or modified.
Every file of an entry has its size and CRC-32 in ``sums.json`` (:mod:`.files`): the events table and meta.json are
checked when the entry is opened (a corrupt one is removed and the trace re-parsed), the other tables
when they are first read (a corrupt one is an error that removes the entry, so the next run rebuilds it).
meta.json records the trace the entry was built from (:class:`~.keys.Source`): an entry that is not the trace's at
hand (copied or renamed into place) is removed and rebuilt like a corrupt one, never served.

A cache that cannot be written (read-only, full, not a directory) costs speed, not the command: the trace is read
without it and :func:`not_written` says why nothing was cached, for the command to say once.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import NamedTuple

import pyarrow as pa

from opscope.errors import TraceError
from opscope.model.mapped import MappedTable, written_identity
from opscope.model.memo import attach_results
from opscope.model.schema import TABLE_SCHEMAS
from opscope.model.trace import ColumnLoader, Trace
from opscope.store import files
from opscope.store.keys import Source, cache_root, source_of
from opscope.store.results import ResultStore
from opscope.threads import side_by_side

#: What write() never writes into meta.json: facts about this open, not about the trace.
_NOT_STORED = ("from_cache", "cache_rebuilt")
#: meta.json's record of the trace the entry was built from (:meth:`Source.record`); not the trace's metadata
BUILT_FROM = "built_from"


class Unwritten(NamedTuple):
    """A cache directory where nothing could be cached, and why."""

    directory: str
    why: str
    #: whether the trace was at fault (it changed while it was read), not the directory
    trace_changed: bool = False


#: cache directory -> why this process could not write an entry there (the first reason), for :func:`not_written`
_unwritten: dict[str, Unwritten] = {}
_unwritten_lock = threading.Lock()


class CorruptEntryError(Exception):
    """The cache entry of a trace was damaged, or was not this trace's; it has been removed. ``str()`` says what
    was wrong, as it follows "cache entry": "was corrupt (...)", "did not belong to this trace (...)"."""


def not_written() -> list[Unwritten]:
    """Each cache directory this process could not write an entry into since the last call (a read-only, full or
    impossible directory; a trace that changed while it was read), with why; then forgotten."""
    with _unwritten_lock:
        said = list(_unwritten.values())
        _unwritten.clear()
    return said


def unwritten(directory: Path, why: BaseException | str, trace_changed: bool = False) -> None:
    """Note that nothing could be cached in ``directory`` (:func:`not_written`)."""
    if isinstance(why, str):
        text = why
    elif isinstance(why, FileExistsError) and not directory.is_dir():
        text = "not a directory"  # (mkdir's word for a file in its place: "File exists")
    elif isinstance(why, OSError) and why.errno:
        text = os.strerror(why.errno)  # "Read-only file system", "No space left on device" (not pyarrow's wrapping)
    else:
        text = _first_line(why)
    with _unwritten_lock:
        _unwritten.setdefault(str(directory), Unwritten(str(directory), text, trace_changed))


def load(path: Path, root: Path | None = None, variant: str = "", source: Source | None = None) -> Trace | None:
    """The cached Trace of ``path`` (whose :class:`Source` is ``source`` when the caller has it), or None if there
    is no entry. Raises CorruptEntryError (after removing the entry) when there was one but it is damaged or not
    this trace's, so the caller re-parses and can say why."""
    source = source or source_of(path, variant)
    entry = (root or cache_root()) / source.key
    meta_file = entry / "meta.json"
    try:
        if not meta_file.is_file():
            return None
    except OSError:  # a cache directory this process may not look into: no entry (write() says why none is made)
        return None
    try:
        sums = json.loads((entry / "sums.json").read_text())
        if not isinstance(sums, dict):
            raise ValueError("sums.json is not an object")
        files.check(meta_file, sums)
        metadata = json.loads(meta_file.read_text())
        if not isinstance(metadata, dict):
            raise ValueError("meta.json is not an object")
        built_from = metadata.pop(BUILT_FROM, None)
        if not isinstance(built_from, dict) or built_from.get("key") != source.key:
            _discard(entry)
            raise CorruptEntryError(f"did not belong to this trace ({source.describe(built_from)})")
        events_file = files.table_file(entry, "events")
        # every command reads it: mapped and checked now, so a bad one is rebuilt here
        mapped = MappedTable(events_file, files.sums_of(events_file, sums), _unreadable,
                             files.identity_of(events_file, sums))
        names, rows = mapped.table.schema.names, mapped.metadata.get(b"num_rows", b"")
        if not rows.isdigit():
            raise ValueError(f"{events_file.name} does not say how many rows it holds")
        # Every side table's footer too (cheap: footers only), so a truncated file is found here,
        # not as pyarrow's multi-line error in the middle of a command.
        for name in (*TABLE_SCHEMAS, *files.DERIVED):
            if name != "events":
                files.footer(files.table_file(entry, name))
        tables: dict = {"events": ColumnLoader(names, partial(_read_columns, mapped, names), int(rows),
                                               verify=mapped.verify)}
    except (OSError, ValueError, pa.ArrowException) as exc:
        # Unreadable entry: remove it and let the caller re-parse, so write() writes a good entry
        # (write() never overwrites an entry whose meta.json exists).
        _discard(entry)
        raise CorruptEntryError(f"was corrupt ({_first_line(exc)})") from None
    for name in (*TABLE_SCHEMAS, *files.DERIVED):
        if name != "events":
            # Read (and checked) on first use: most commands never touch flows, memory or the JSON args.
            tables[name] = _LaterTable(files.table_file(entry, name), sums, name in files.IN_PLACE)
    metadata["from_cache"] = str(entry)
    trace = Trace(metadata=metadata, **tables)
    attach_results(trace, ResultStore(entry))  # what analyses keep for the next command on this entry
    return trace


def _first_line(exc: BaseException) -> str:
    # pyarrow's messages can run to several lines; the user gets one.
    text = str(exc).strip().splitlines()
    return text[0] if text else exc.__class__.__name__


def _discard(entry: Path) -> None:
    # Rename first so a concurrent reader never sees a half-deleted entry; ignore a racing remover.
    try:
        doomed = Path(tempfile.mkdtemp(prefix=".bad-", dir=entry.parent))
    except OSError as exc:  # a read-only cache: the entry stays, and no good one can take its place
        unwritten(entry.parent, f"{entry.name} cannot be removed: {exc.strerror or _first_line(exc)}")
        return
    with contextlib.suppress(OSError):  # removed meanwhile
        os.replace(entry, doomed / "entry")
    shutil.rmtree(doomed, ignore_errors=True)


def _unreadable(file: Path, exc: BaseException) -> TraceError:
    # Found in the middle of a command: too late to re-parse, so remove the entry and the next run rebuilds it.
    _discard(file.parent)
    return TraceError(file, f"cache entry was corrupt ({_first_line(exc)}) and has been removed",
                      "run the command again to rebuild it from the trace")


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


class _LaterTable:
    """A side table of the entry, read (and checked) on first use by calling it. A compressed one (not read in
    place) can also be read batch by batch: ``batches()`` (:meth:`opscope.model.trace.Trace.args_of` picks rows that
    way); None for a table read in place."""

    def __init__(self, file: Path, sums: dict, in_place: bool) -> None:
        self.file, self.sums, self.in_place = file, sums, in_place
        self.batches: Callable[[], Iterator[pa.RecordBatch]] | None = None if in_place else self._batches

    def __call__(self) -> pa.Table | MappedTable:
        return _read_later(self.file, self.sums, self.in_place)

    def _batches(self) -> Iterator[pa.RecordBatch]:
        try:
            yield from files.ipc_batches(self.file, self.sums)
        except (OSError, ValueError, pa.ArrowException) as exc:
            raise _unreadable(self.file, exc) from None


def _read_later(file: Path, sums: dict, in_place: bool) -> pa.Table | MappedTable:
    try:
        if in_place:
            mapped = MappedTable(file, files.sums_of(file, sums), _unreadable, files.identity_of(file, sums))
            mapped.table  # noqa: B018 - mapped and checked now, so that a bad file is an error here
            return mapped  # (the trace keeps it, and verifies it after each analysis)
        return files.read_ipc(file, sums)
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise _unreadable(file, exc) from None


class EntryDraft:
    """A cache entry begun before its trace is complete: the temporary directory :func:`write` fills and renames,
    with the ``args`` table (the JSON text of every event: the biggest table, final once ``complete`` has sorted the
    events) compressed into it on a thread of its own while ``complete`` nests the events. Then the trace can let go
    of that table (:meth:`offload`) for the rest of the command: it is read back from the entry where needed.

    ``complete(trace, args_ready=...)``, where ``args_ready`` calls :meth:`write_args` and returns
    ``draft.offload(loader)``, then ``write(...,
    draft=draft)``, or :meth:`discard` where the trace is not stored. Made by :func:`begin`."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root or cache_root()
        self.root.mkdir(parents=True, exist_ok=True)
        self.dir = Path(tempfile.mkdtemp(prefix=".tmp-", dir=self.root))
        #: what the trace holds instead of its args after :meth:`offload`
        self.loader: Callable[[], pa.Table] | None = None
        #: why the args table could not be written (a full disk), once :meth:`args_written` is False
        self.error: OSError | None = None
        self._written = False
        self._thread: threading.Thread | None = None

    def write_args(self, args: pa.Table) -> None:
        """Start writing ``args`` (the trace's final args table) into the entry."""

        def write() -> None:
            # a failure leaves the entry without its args: write() then gives the entry up
            try:
                files.write_table(args, files.table_file(self.dir, "args"))
                self._written = True
            except (OSError, pa.ArrowException) as exc:
                self.error = exc if isinstance(exc, OSError) else OSError(_first_line(exc))

        self._thread = threading.Thread(target=write, name="opscope-cache-args")
        self._thread.start()

    def offload(self, loader: Callable[[], pa.Table]) -> Callable[[], pa.Table] | None:
        """What the completed trace holds instead of its args table: ``loader``, once the table is being written
        here (it is held until then through this draft's writer alone); None when it is not."""
        if self._thread is None:
            return None
        self.loader = loader
        return loader

    def args_written(self) -> bool:
        """Whether the args table is in the entry (waits for the writer)."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        return self._written

    def discard(self) -> None:
        self.args_written()
        shutil.rmtree(self.dir, ignore_errors=True)


def begin(root: Path | None = None) -> EntryDraft | None:
    """A new :class:`EntryDraft` in ``root`` (the cache directory), or None where none can be made there (a
    read-only or impossible directory: :func:`not_written` says so)."""
    try:
        return EntryDraft(root)
    except OSError as exc:
        unwritten(root or cache_root(), exc)
        return None


def write(path: Path, trace: Trace, root: Path | None = None, variant: str = "",
          draft: EntryDraft | None = None, source: Source | None = None) -> Path | None:
    """Write the cache entry for ``path``; returns its directory, or None if it could not be written (and
    :func:`not_written` says why). ``draft``: the entry begun while the trace was completed (with its args table
    written, or being written); write() finishes it or discards it. ``source``: the trace file as it was before it was
    read (:func:`~.keys.source_of`); a file that is not the same now changed while it was read, and is not cached."""
    root = draft.root if draft is not None else root or cache_root()
    now: Source | None = None
    try:
        now = source_of(path, variant)
        changed = f"{path} changed while it was read" if source is not None and now != source else ""
    except OSError as exc:
        changed = f"{path} cannot be read again ({exc.strerror or _first_line(exc)})"
    if now is None or changed:
        if draft is not None:
            draft.discard()
        unwritten(root, changed, trace_changed=True)
        return None
    entry = root / now.key
    if _belongs(entry, now):  # published meanwhile (another command on the same trace)
        if draft is not None:
            draft.discard()
        return entry
    try:
        if draft is not None:
            tmp = draft.dir
        else:
            root.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=root))
    except OSError as exc:
        unwritten(root, exc)
        return None
    try:
        tables = {name: getattr(trace, name) for name in TABLE_SCHEMAS if name != "args"}
        tables["copy_args"] = trace.copy_args
        held = trace.held_args()
        if draft is None or held is not draft.loader:
            tables["args"] = trace.args  # (a table the trace still holds, or was given after the draft began)
        elif not draft.args_written():  # the trace let go of its args and they did not reach the entry
            raise draft.error or OSError("the args table could not be written")
        write_tables(tables, tmp)
        meta = {k: v for k, v in trace.metadata.items() if k not in _NOT_STORED}
        meta[BUILT_FROM] = now.record()
        (tmp / "meta.json").write_text(json.dumps(meta, default=str))
        sums: dict = {f.name: files.file_sum(f) for f in tmp.iterdir()}
        # the tables read in place as they are now: renaming the directory below changes none of their identities
        sums[files.IDENTITIES] = {f.name: written_identity(f.stat()) for f in tmp.iterdir()
                                  if f.name in {files.table_file(tmp, name).name for name in files.IN_PLACE}}
        (tmp / "sums.json").write_text(json.dumps(sums))
        os.rename(tmp, entry)  # whole or not at all: the entry appears under its name only now
    except OSError as exc:
        if draft is not None:
            draft.args_written()  # its writer is done with the directory
        shutil.rmtree(tmp, ignore_errors=True)
        if _belongs(entry, now):  # another command published the same entry first
            return entry
        unwritten(root, exc)
        return None
    return entry


def published(path: Path, root: Path | None = None, variant: str = "") -> Path | None:
    """The published entry of ``path`` as it is now, or None (none, or one that is not this trace's)."""
    source = source_of(path, variant)
    entry = (root or cache_root()) / source.key
    return entry if _belongs(entry, source) else None


def _belongs(entry: Path, source: Source) -> bool:
    """Whether ``entry`` is published (its meta.json in place) and built from ``source``."""
    try:
        return json.loads((entry / "meta.json").read_text()).get(BUILT_FROM, {}).get("key") == source.key
    except (OSError, ValueError, AttributeError):
        return False


def write_tables(tables: dict[str, pa.Table], directory: Path) -> None:
    """Each table as ``NAME.arrow``, on two threads (compression releases the GIL), the tables dealt largest first to
    the thread with fewer bytes so far: the events on one, the args text on the other. The helper's error is raised
    here.

    Arrow IPC files, not Parquet: the columns are written as they are in memory (dictionaries stay dictionaries), so
    there is no encoding to do or undo. The numeric tables (:data:`files.IN_PLACE`: the events, memory records...) are
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

    def write_share(names: list[str]) -> None:
        for name in names:
            files.write_table(tables[name], files.table_file(directory, name))

    side_by_side(lambda: write_share(shares[1]), lambda: write_share(shares[0]), "opscope-cache-write")
