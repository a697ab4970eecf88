"""Readers: turn a trace file into the model, one reader per source format (see :mod:`.registry`).

:func:`open_trace` picks the reader by content, runs it, completes the model (nesting, steps) and
keeps a cache of its tables (Arrow IPC files) so that the next open of the same file is fast.
"""

from __future__ import annotations

import contextlib
import threading
from functools import partial
from pathlib import Path

from opscope.errors import TraceError
from opscope.ingest import numbers
from opscope.ingest.registry import READERS, Progress, Reader, UnknownReaderError, pick_reader, read_head, reader_named
from opscope.ingest.source import check_readable, read_settings
from opscope.model.derive import complete
from opscope.model.schema import TABLE_SCHEMAS
from opscope.model.trace import Trace
from opscope.runtime import stage_done
from opscope.store import entry as cache
from opscope.store.keys import Source, cache_root, source_of

__all__ = ["READERS", "Progress", "Reader", "UnknownReaderError", "finish_cache_writes", "not_cached", "open_trace",
           "pick_reader", "read_head", "reader_named"]

#: Cache entries being written behind the command (``write_behind``): joined before the next open and at exit.
_pending_writes: list[threading.Thread] = []


def open_trace(
    path: str | Path,
    *,
    use_cache: bool = True,
    progress: Progress | None = None,
    cache_dir: Path | None = None,
    write_behind: bool = False,
) -> Trace:
    """Read a trace file into the model, from the cache when the file has not changed.

    Without the cache, the full JSON args of every event (the ``args`` table, which only ``query``
    and a few analyses read) are not kept: the first use of ``trace.args`` reads the file again.
    With ``write_behind`` a new cache entry is written on a thread while the caller analyses the trace (compression
    releases the GIL); the interpreter waits for it at exit, and the next ``open_trace`` first.
    """
    path = Path(path)
    check_readable(path)
    finish_cache_writes()
    rebuilt = None
    variant = read_settings()
    source = None
    if use_cache:
        source = source_of(path, variant)  # the file as it is before it is read: what an entry must match
        try:
            cached = cache.load(path, cache_dir, variant, source)
        except cache.CorruptEntryError as exc:
            rebuilt, cached = f"cache entry {exc}", None
        if cached is not None:
            return cached
    reader = pick_reader(path)
    try:
        trace = _read(reader, path, progress=progress, keep_args=use_cache)
    except TraceError:
        raise
    except MemoryError:
        raise TraceError(path, "does not fit in memory", "try a machine with more RAM") from None
    except RecursionError:
        raise TraceError(path, "is nested too deeply to be a trace (hostile input?)") from None
    stage_done()  # the parser's buffers: back to the system before completing allocates its own (tuned)
    # no cache directory (read-only, not a directory): the trace is read all the same, and the command says so
    draft = cache.begin(cache_dir) if use_cache else None

    def args_ready(args):  # the args text (~a quarter of the JSON) leaves memory once in the entry
        assert draft is not None
        draft.write_args(args)
        return draft.offload(partial(_args_again, path, cache_dir, variant))

    try:
        trace = complete(trace, args_ready=None if draft is None else args_ready)
    except BaseException:
        if draft is not None:
            draft.discard()
        raise
    if use_cache:
        if write_behind:
            # The tables are immutable Arrow tables; the metadata's keys and warnings are copied before the caller can
            # add to them (not a deep copy: a hostile header nested 10,000 deep would exceed the recursion limit).
            metadata = dict(trace.metadata)
            if isinstance(metadata.get("warnings"), list):
                metadata["warnings"] = list(metadata["warnings"])
            held = {name: trace.held_args() if name == "args" else getattr(trace, name) for name in TABLE_SCHEMAS}
            snapshot = Trace(metadata=metadata, copy_args=trace.copy_args, **held)
            writer = threading.Thread(target=_store_behind, args=(path, snapshot, cache_dir, variant, draft, source),
                                      name="opscope-cache-write")  # not a daemon: the interpreter waits for it
            writer.start()
            _pending_writes.append(writer)
        else:
            cache.write(path, trace, cache_dir, variant, draft, source)
        if rebuilt is not None:
            trace.metadata["cache_rebuilt"] = rebuilt  # said once by the CLI; never stored
    else:
        trace = trace.replace(args=partial(_args_of, path))
    stage_done()  # completing's temporaries, before the command's analyses (tuned)
    return trace


def _store_behind(path: Path, trace: Trace, cache_dir: Path | None, variant: str,
                  draft: cache.EntryDraft | None, source: Source | None) -> None:
    """``cache.write`` on the writer thread: whatever stops it leaves no entry (the next open parses again) and never
    a thread's traceback on stderr in the middle of the command's output (:func:`not_cached` says why instead)."""
    # a cache is an optimisation: the command's result does not depend on it
    try:
        cache.write(path, trace, cache_dir, variant, draft, source)
    except Exception as exc:
        if draft is not None:
            draft.discard()
        cache.unwritten(draft.root if draft is not None else cache_dir or cache_root(), exc)


def not_cached() -> list[cache.Unwritten]:
    """Each cache directory where this process could not cache a trace it read, and why, once every entry being
    written behind is done; each is given once."""
    finish_cache_writes()
    return cache.not_written()


def finish_cache_writes() -> None:
    """Wait until the cache entries being written behind (``open_trace(write_behind=True)``) are in place."""
    while _pending_writes:
        _pending_writes.pop().join()


def _args_again(path: Path, cache_dir: Path | None, variant: str):
    """The args table a first open let go of (:meth:`cache.EntryDraft.offload`): from the cache entry once it is
    written, else read again from the file."""
    finish_cache_writes()
    with contextlib.suppress(cache.CorruptEntryError, TraceError, OSError):
        cached = cache.load(path, cache_dir, variant)
        if cached is not None:
            return cached.args
    return _args_of(path)


def _args_of(path: Path):
    """The args table, read again from the file (same events, same order: the model is deterministic)."""
    return complete(_read(pick_reader(path), path, keep_args=True)).args


def _read(reader: Reader, path: Path, **options) -> Trace:
    """``reader.read``, with the numbers it could not hold (:mod:`.numbers`) said in one warning line."""
    with numbers.counting() as tally:
        trace = reader.read(path, **options)
    line = tally.warning()
    if line is not None:
        trace.warn(line, tally.total())
    return trace
