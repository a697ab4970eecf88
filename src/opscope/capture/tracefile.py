"""Saving a profiler's window as a trace file that is complete or absent, never truncated, and never written
through a name someone else planted.

Torch's export writes ``NAME.tmp`` beside its target and renames it only on success, logging a failed write
("Failed to write to log file!") without raising; for ``.gz`` targets it compresses a file in the system
temp directory into the target, whatever that file holds. So the export goes into a private staging
directory (see :func:`opscope.capture.outdir.staging_dir`), is checked, compressed there when asked, and
only then published under the first free final name.
"""

from __future__ import annotations

import errno
import gzip
import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from opscope.capture.outdir import publish, staging_dir


class TraceNotWrittenError(OSError):
    """The profiler wrote no complete trace file, or every name offered was taken."""


def save_trace(prof: Any, directory: Path, names: Iterable[str]) -> Path:
    """Export ``prof`` (a ``torch.profiler.profile``) into ``directory`` under the first of ``names`` that is
    free (gzip-compressed when it ends in ``.gz``) and return its path. A failed write (disk full) raises
    OSError and leaves nothing behind."""
    with staging_dir(directory) as staging:
        raw = staging / "window.json"
        prof.export_chrome_trace(str(raw))
        _check_complete(raw, directory)
        tried = []
        for name in names:
            tried.append(name)
            written = raw
            if name.endswith(".gz"):
                written = staging / "window.json.gz"
                if not written.exists():
                    with open(raw, "rb") as fin, gzip.open(written, "wb") as fout:
                        shutil.copyfileobj(fin, fout, 1 << 20)
            try:
                publish(written, directory / name)
            except FileExistsError:
                continue  # a file of that name is there (not ours to replace)
            return directory / name
    raise TraceNotWrittenError(errno.EEXIST, f"every name from {tried[0] if tried else '?'} on is taken")


def _check_complete(raw: Path, directory: Path) -> None:
    """A missing file (torch's failed write) or one that does not end its JSON is an OSError."""
    try:
        size = raw.stat().st_size
        with open(raw, "rb") as fh:
            fh.seek(max(0, size - 64))
            tail = fh.read().rstrip()
    except FileNotFoundError:
        tail = b""
    if not tail.endswith((b"}", b"]")):
        if _disk_full(directory):
            raise TraceNotWrittenError(errno.ENOSPC, "no space left on device: the profiler could not write "
                                                     "its trace")
        raise TraceNotWrittenError(errno.EIO, "the profiler could not write its trace (disk full or a file size "
                                              "limit?)")


def _disk_full(directory: Path) -> bool:
    try:
        st = os.statvfs(directory)
    except OSError:
        return False
    return st.f_bavail == 0 or (os.geteuid() == 0 and st.f_bfree == 0)
