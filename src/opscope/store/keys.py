"""Which entry of the cache holds a trace file: the key says "this file has not changed since" by what the user
cannot restore: the file's path, size, mtime, ctime and inode, plus a hash of its first and last MiB (DESIGN.md,
"The cache entry": what the key trusts)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from opscope.paths import cache_root

__all__ = ["CACHE_FORMAT", "cache_key", "cache_root"]

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
CACHE_FORMAT = 15  # 8: self time of partly overlapping events counted once; 7: sums.json, ctime and inode in the key
_PROBE = 1 << 20


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
