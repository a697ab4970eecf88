"""Output paths that never overwrite: an earlier recording, dump or trace is never lost."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path


def first_free(path: Path, taken: Callable[[Path], bool], suffix: str = "") -> tuple[Path, bool]:
    """``path`` if not ``taken``, else ``stem-1``, ``stem-2``... (``suffix`` stays at the end); and whether
    it had to be renamed."""
    stem = path.name[: len(path.name) - len(suffix)] if suffix and path.name.endswith(suffix) else path.name
    candidate, n = path, 0
    while taken(candidate):
        n += 1
        candidate = path.with_name(f"{stem}-{n}{suffix}")
    return candidate, n > 0
