"""Output files that are never lost or overwritten, even with two recordings started at once or a directory
others can write to: the output directory is claimed atomically, and each finished file is written under a
private name first and then published under its final name only if that name is free.

A check-then-write ("does DIR exist? then write into it") lets two ``opscope record`` runs both pick the
same directory and overwrite each other's traces; ``os.mkdir`` and ``O_CREAT | O_EXCL`` decide in one
system call who gets a name.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from opscope.errors import UsageError
from opscope.paths import all_taken, numbered_names

#: The file whose exclusive creation claims a recording directory (it is rewritten as the run goes on).
CLAIM_NAME = "run.json"
#: Private work directories inside an output directory (mkdtemp: a fresh name, mode 0700) start with this.
STAGING_PREFIX = ".opscope-staging-"


def claim_output_dir(path: Path, first_content: dict[str, Any] | None = None,
                     claim_name: str = CLAIM_NAME) -> tuple[Path, bool]:
    """Claim ``path`` for a new recording, or ``path-1``, ``path-2``... when it is taken; return the claimed
    directory and whether it had to be renamed.

    A candidate is claimed by creating it (``os.mkdir``) and then its ``claim_name`` file (``run.json``) with
    ``O_EXCL`` (holding ``first_content``): of two runs racing for one name exactly one wins, the other moves on.
    An existing directory is used only when it is empty and owned by the current user. Errors (a read-only place, a
    file where a directory is needed) are a one-line :class:`UsageError` naming the directory.
    """
    if path.name in ("", ".", ".."):  # ".", "/", "x/..": no name to number, and never empty in practice
        if _claim(path, first_content, claim_name):
            return path, False
        raise UsageError(f"{path}: is an existing directory that is not empty (or not yours); give a new "
                         "directory with --output, e.g. -o opscope-record")
    _make_dir(path.parent, path)
    for n, name in enumerate(numbered_names(path.name)):
        candidate = path.with_name(name)
        if _claim(candidate, first_content, claim_name):
            return candidate, n > 0
    raise UsageError(f"{path}: {all_taken(path.name)}")


def make_output_dir(directory: Path) -> None:
    """Create ``directory`` (and its parents) if missing, for files that are each published without
    overwriting anything (the demo's trace); a place that cannot hold it is a one-line :class:`UsageError`."""
    _make_dir(directory, directory)


def _make_dir(directory: Path, wanted: Path) -> None:
    """Create ``directory`` and its parents if missing; errors name ``wanted``, the output path given."""
    for above in (directory, *directory.parents):
        if above.exists() or above.is_symlink():
            if not above.is_dir():
                raise UsageError(f"{wanted}: cannot create the output directory ({above} is not a directory); "
                                 "give another directory with --output")
            break
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _unwritable(wanted, exc) from None


def _claim(candidate: Path, first_content: dict[str, Any] | None, claim_name: str = CLAIM_NAME) -> bool:
    """True when this process now owns ``candidate``; False when it is taken (someone else's)."""
    try:
        os.mkdir(candidate)
    except FileExistsError:
        if not _empty_and_mine(candidate):
            return False
    except OSError as exc:
        raise _unwritable(candidate, exc) from None
    try:
        fd = os.open(candidate / claim_name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    except FileExistsError:
        return False  # another run claimed the same empty directory first
    except OSError as exc:
        raise _unwritable(candidate, exc) from None
    with os.fdopen(fd, "w") as fh:
        fh.write(json.dumps(first_content or {"status": "starting"}, indent=2, default=str))
    return True


def _empty_and_mine(directory: Path) -> bool:
    try:
        st = os.stat(directory)
        if not os.path.isdir(directory) or st.st_uid != os.geteuid():
            return False
        with os.scandir(directory) as entries:
            return next(entries, None) is None
    except OSError:
        return False


def _unwritable(directory: Path, exc: OSError) -> UsageError:
    return UsageError(f"{directory}: cannot create the output directory there ({exc.strerror or exc}); give a "
                      "directory you can write to with --output")


@contextlib.contextmanager
def staging_dir(directory: Path) -> Iterator[Path]:
    """A private directory inside ``directory`` (fresh name, mode 0700: nobody else can plant a file or a
    link in it) for files being written; removed with whatever is left in it."""
    staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=directory))
    try:
        yield staging
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def remove_staging_dirs(directory: Path) -> None:
    """Remove the staging directories a killed run left behind in ``directory`` (half-written files)."""
    with contextlib.suppress(OSError), os.scandir(directory) as entries:
        for entry in entries:
            if entry.name.startswith(STAGING_PREFIX) and entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)


def publish(written: Path, final: Path) -> None:
    """Give the finished file ``written`` the name ``final`` only if that name is free (FileExistsError if
    not): a hard link never replaces an existing file or follows a link planted there."""
    try:
        os.link(written, final, follow_symlinks=False)
    except FileExistsError:
        raise
    except OSError:  # a file system without hard links: claim the name, then move the file onto our claim
        os.close(os.open(final, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644))
        os.replace(written, final)
        return
    os.unlink(written)
