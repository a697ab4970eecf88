"""The Parquet cache: a second open of the same trace file reads columns instead of JSON.

One directory per source file version, keyed by the file's path, size, mtime and a hash of its first
and last MiB. A cache directory is written under a temporary name and renamed into place, so readers
never see half a cache and an existing one is never overwritten.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from functools import partial
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from opscope.errors import TraceError
from opscope.model.schema import TABLE_SCHEMAS
from opscope.model.trace import ColumnLoader, Trace

#: Bump when the model's tables change shape: old cache entries are then ignored.
CACHE_FORMAT = 6  # 6: TF timelines' device rows are device work; TF runtime events are kind runtime
_PROBE = 1 << 20


def cache_root() -> Path:
    env = os.environ.get("OPSCOPE_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "opscope"


def cache_key(path: Path) -> str:
    st = path.stat()
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{CACHE_FORMAT}|{path.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode())
    with open(path, "rb") as fh:
        h.update(fh.read(_PROBE))
        if st.st_size > _PROBE:
            fh.seek(max(_PROBE, st.st_size - _PROBE))
            h.update(fh.read(_PROBE))
    return h.hexdigest()


def load(path: Path, root: Path | None = None) -> Trace | None:
    """The cached Trace of ``path``, or None if there is no valid entry."""
    entry = (root or cache_root()) / cache_key(path)
    meta_file = entry / "meta.json"
    if not meta_file.is_file():
        return None
    try:
        metadata = json.loads(meta_file.read_text())
        if not isinstance(metadata, dict):
            raise ValueError("meta.json is not an object")
        events_file = entry / "events.parquet"
        names = pq.read_schema(events_file).names
        # Every side table's footer too (cheap: footers only), so a truncated file is found here,
        # not as pyarrow's multi-line error in the middle of a command.
        for name in TABLE_SCHEMAS:
            if name != "events":
                pq.read_metadata(entry / f"{name}.parquet")
        tables: dict = {"events": ColumnLoader(names, partial(_read_columns, events_file))}
    except (OSError, ValueError, pa.ArrowException):
        # Unreadable entry: remove it and behave as a miss, so the caller re-parses and store()
        # writes a good entry (store never overwrites an entry whose meta.json exists).
        _discard(entry)
        return None
    for name in TABLE_SCHEMAS:
        if name != "events":
            # Read on first use: most commands never touch flows, memory or the JSON args.
            tables[name] = partial(_read_later, entry / f"{name}.parquet")
    metadata["from_cache"] = str(entry)
    return Trace(metadata=metadata, **tables)


def _discard(entry: Path) -> None:
    # Rename first so a concurrent reader never sees a half-deleted entry; ignore a racing remover.
    try:
        doomed = Path(tempfile.mkdtemp(prefix=".bad-", dir=entry.parent))
        os.replace(entry, doomed / "entry")
    except OSError:
        return
    shutil.rmtree(doomed, ignore_errors=True)


def _read(file: Path) -> pa.Table:
    return pq.read_table(file, memory_map=True)


def _read_columns(file: Path, names: list[str]) -> pa.Table:
    try:
        return pq.read_table(file, columns=names, memory_map=True)
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise TraceError(file, f"cache entry is unreadable ({exc})",
                         f"run again with --no-cache, or delete {file.parent}") from None


def _read_later(file: Path) -> pa.Table:
    try:
        return _read(file)
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise TraceError(file, f"cache entry is unreadable ({exc})",
                         f"run again with --no-cache, or delete {file.parent}") from None


def store(path: Path, trace: Trace, root: Path | None = None) -> Path | None:
    """Write the cache entry for ``path``; returns its directory, or None if it could not be written."""
    root = root or cache_root()
    entry = root / cache_key(path)
    if (entry / "meta.json").is_file():
        return entry
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=root))
    except OSError:
        return None
    try:
        for name, table in trace.tables().items():
            pq.write_table(table, tmp / f"{name}.parquet", compression="zstd")
        meta = {k: v for k, v in trace.metadata.items() if k != "from_cache"}
        (tmp / "meta.json").write_text(json.dumps(meta, default=str))
        os.rename(tmp, entry)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        return None
    return entry
