"""Readers: one module per source format, each with ``sniff(path, head)`` and ``read(path, progress)``.

:func:`open_trace` picks the reader by content, runs it, completes the model (nesting, steps) and
keeps a Parquet cache so that the next open of the same file is fast.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from functools import partial
from pathlib import Path

from opscope.errors import TraceError
from opscope.ingest.source import ByteSource, check_readable
from opscope.model import cache
from opscope.model.derive import complete
from opscope.model.trace import Trace
from opscope.sysmem import release_free_memory

#: Reader modules in the order they are asked; the first whose ``sniff`` says yes reads the file.
#: Imported only when a file is parsed: a cached open needs none of them.
READERS = ("opscope.ingest.chrome_json",)
_HEAD = 64 << 10

Progress = Callable[[int, int], None]


def read_head(path: Path) -> bytes:
    """The first 64 KiB of the file's content (decompressed if gzip)."""
    source = ByteSource(path, block_size=_HEAD)
    blocks = source.blocks()
    try:
        head = next(blocks, b"")
    finally:
        blocks.close()
    if not head and source.compressed and source.truncated:
        raise TraceError(path, "gzip stream ends before any data", "the file is truncated")
    return head[:_HEAD]


def pick_reader(path: Path):
    head = read_head(path)
    if not head.strip():
        raise TraceError(path, "holds no data (only whitespace or an empty gzip stream)")
    for name in READERS:
        reader = importlib.import_module(name)
        if reader.sniff(path, head):
            return reader
    if head.lstrip()[:1] in (b"{", b"["):
        # JSON of some other shape: the reader says precisely what is missing
        return importlib.import_module("opscope.ingest.chrome_json")
    raise TraceError(path, "is not a trace format opscope reads",
                     "expected PyTorch/Kineto or Chrome trace JSON (.json or .json.gz)")


def open_trace(
    path: str | Path,
    *,
    use_cache: bool = True,
    progress: Progress | None = None,
    cache_dir: Path | None = None,
) -> Trace:
    """Read a trace file into the model, from the cache when the file has not changed.

    Without the cache, the full JSON args of every event (the ``args`` table, which only ``query``
    and a few analyses read) are not kept: the first use of ``trace.args`` reads the file again.
    """
    path = Path(path)
    check_readable(path)
    if use_cache:
        cached = cache.load(path, cache_dir)
        if cached is not None:
            return cached
    reader = pick_reader(path)
    try:
        trace = reader.read(path, progress=progress, keep_args=use_cache)
    except TraceError:
        raise
    except MemoryError:
        raise TraceError(path, "does not fit in memory", "try a machine with more RAM") from None
    except RecursionError:
        raise TraceError(path, "is nested too deeply to be a trace (hostile input?)") from None
    release_free_memory()
    trace = complete(trace)
    if use_cache:
        cache.store(path, trace, cache_dir)
    else:
        trace.args = partial(_args_of, path)
    return trace


def _args_of(path: Path):
    """The args table, read again from the file (same events, same order: the model is deterministic)."""
    reader = pick_reader(path)
    return complete(reader.read(path, keep_args=True)).args
