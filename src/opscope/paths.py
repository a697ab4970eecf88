"""Output names that never overwrite: an earlier recording, dump or trace is never lost."""

from __future__ import annotations

from collections.abc import Iterator

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
