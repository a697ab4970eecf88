"""Which entry of the cache holds a trace file: the key says "this file has not changed since" by what the user
cannot restore: the file's path, size, mtime, ctime and inode, plus a hash of its first and last MiB (DESIGN.md,
"The cache entry": what the key trusts). An entry records the :class:`Source` it was built from, so that one found
under another trace's key (copied or renamed into place) is never served."""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from opscope.paths import cache_root

__all__ = ["CACHE_FORMAT", "Source", "cache_key", "cache_root", "source_of"]

# 17: every reader's numbers through ingest.numbers (refused or saturated, counted); text sources stop at a NUL tail;
# 16: meta.json records the trace the entry was built from (Source), checked before the entry is served;
# 15: the xplane reader writes XLA ops' HLO records (shapes, dtypes, output_shapes, concrete_inputs) and one op per
#     execution;
# 14: events.output_shapes (the outputs' shapes ONNX Runtime records); MIGraphX ops carry each operand's shape,
#     dtype and strides, then the output's (before: the output's alone);
# 13: copies and fills that run as kernels are kind memcpy/memset (derive.KIND_BY_NAME);
# 12: the numeric tables uncompressed and read in place (model.mapped): their columns are views of the page cache;
# 11: Arrow IPC files (NAME.arrow) instead of Parquet: written in a third of the time, read in two thirds;
# 10: copy_args.parquet (the args of memcpy/memset events, apart: the copies' sizes without every event's args);
# 9: ONNX Runtime profiles read by their own reader (before: every event kind other)
#: Bump when the model's tables change shape: old cache entries are then ignored.
#: 17: readers stop at a NUL run and count numbers beyond int64
CACHE_FORMAT = 17  # 8: self time of partly overlapping events counted once; 7: sums.json, ctime and inode in the key
_PROBE = 1 << 20


@dataclass(frozen=True)
class Source:
    """A trace file as it is now: its cache key and what the key hashes (besides the file's first and last MiB)."""

    key: str
    path: str
    size: int
    mtime_ns: int
    ctime_ns: int
    dev: int
    ino: int

    def record(self) -> dict[str, Any]:
        """What an entry keeps of the trace it was built from (its meta.json)."""
        return asdict(self)

    def describe(self, recorded: Any) -> str:
        """Why an entry that recorded ``recorded`` (:meth:`record` of the trace it was built from) is not this
        trace's: the other trace, or the same file as it was before."""
        if not isinstance(recorded, dict) or not isinstance(recorded.get("path"), str):
            return "it does not say which trace it was built from"
        if recorded["path"] != self.path:
            return f"it was built from {recorded['path']}"
        return "it was built from another version of this file"


def source_of(path: Path, variant: str = "") -> Source:
    """The :class:`Source` of ``path`` as read with the reader settings ``variant`` (a read that a setting may change,
    such as the gzip inflate cap, must not be served to a read with another setting)."""
    st = path.stat()
    resolved = str(path.resolve())
    h = hashlib.blake2b(digest_size=16)
    # ctime and inode: no tool sets them back (os.utime restores mtime only, and a rewrite changes ctime),
    # so an edit anywhere in the file is a new key without hashing gigabytes on every command.
    h.update(f"{CACHE_FORMAT}|{resolved}|{st.st_size}|{st.st_mtime_ns}|{st.st_ctime_ns}|"
             f"{st.st_dev}|{st.st_ino}|{variant}".encode())
    with open(path, "rb") as fh:
        h.update(fh.read(_PROBE))
        if st.st_size > _PROBE:
            fh.seek(max(_PROBE, st.st_size - _PROBE))
            h.update(fh.read(_PROBE))
    return Source(h.hexdigest(), resolved, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_dev, st.st_ino)


def cache_key(path: Path, variant: str = "") -> str:
    """The name of the entry of ``path`` (:func:`source_of`)."""
    return source_of(path, variant).key
