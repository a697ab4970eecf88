"""Where opscope writes: output names that never overwrite (an earlier recording, dump or trace is never lost), and
the cache directory."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

#: How many numbered alternatives (NAME-1, NAME-2...) a writer tries before giving up.
MAX_ALTERNATIVES = 10_000


def numbered_names(name: str, suffix: str = "") -> Iterator[str]:
    """``name``, then ``stem-1``, ``stem-2``... (``suffix`` stays at the end): the names to try, in order, for an
    output that must not replace an earlier one. The caller takes the first free one atomically (``os.mkdir``,
    ``O_EXCL``, a no-clobber link), never by checking first."""
    stem = name[: len(name) - len(suffix)] if suffix and name.endswith(suffix) else name
    yield name
    for n in range(1, MAX_ALTERNATIVES):
        yield f"{stem}-{n}{suffix}"


def all_taken(name: str) -> str:
    """What to say when every one of :func:`numbered_names` is taken."""
    return f"{name}-1 to {name}-{MAX_ALTERNATIVES - 1} are all taken; give a new directory with --output"


def cache_root() -> Path:
    """opscope's cache directory: ``$OPSCOPE_CACHE_DIR``, else ``$XDG_CACHE_HOME/opscope`` or ``~/.cache/opscope``
    (the trace cache, :mod:`opscope.store`, and the HTML report's script bundle)."""
    env = os.environ.get("OPSCOPE_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "opscope"
