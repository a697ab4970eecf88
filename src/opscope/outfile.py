"""Writing one output file (a report, an export, a drawing) without ever losing what is already there.

The content goes to a hidden temporary file beside the target first; only a complete file takes the target's
name, so an interrupted or failed write leaves the target as it was. Without ``force`` the name is taken only
if it is free (a hard link never replaces a file, nor follows a link planted there); with ``force`` an existing
regular file is replaced atomically.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from opscope.errors import UsageError


def check_target(path: Path, force: bool) -> None:
    """Fail early (before any analysis runs) when ``path`` cannot become the output: it exists and ``force``
    is off, it is a directory or not a regular file, or its directory is missing."""
    if path.is_dir():
        raise UsageError(f"{path}: is a directory; give a file name with -o")
    if path.exists() or path.is_symlink():
        if not force:
            raise UsageError(f"{path}: already exists; pass --force to replace it, or choose another -o")
        if path.is_symlink() or not path.is_file():
            raise UsageError(f"{path}: is not a regular file; refusing to replace it")
    parent = path.parent
    if not parent.is_dir():
        raise UsageError(f"{path}: directory {parent} does not exist; create it first")


def write_file(path: Path, write: Callable[[BinaryIO], object], force: bool = False) -> int:
    """Write ``path`` through ``write(stream)``; return its size in bytes. UsageError (one line) when the name
    is taken and ``force`` is off, or the directory cannot be written; the temporary file never stays."""
    check_target(path, force)
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    except OSError as exc:
        raise UsageError(f"{path}: cannot write there ({exc.strerror or exc}); choose another -o") from None
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as stream:
            write(stream)
        size = tmp.stat().st_size
        os.chmod(tmp, 0o644)
        if force:
            os.replace(tmp, path)
        else:
            _publish(tmp, path)
    except FileExistsError:
        raise UsageError(f"{path}: already exists; pass --force to replace it, or choose another -o") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot write it ({exc.strerror or exc})") from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    return size


def _publish(written: Path, final: Path) -> None:
    try:
        os.link(written, final, follow_symlinks=False)
    except FileExistsError:
        raise
    except OSError:  # no hard links on this file system: claim the name exclusively, then move onto the claim
        os.close(os.open(final, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644))
        os.replace(written, final)
