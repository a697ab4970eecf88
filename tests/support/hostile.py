"""Hostile inputs (issue 14): small generators of files that once made opscope hang or blow up memory.

Each returns the path it wrote; sizes are parameters so a fuzz test can scale them up.
"""

from __future__ import annotations

import os
from pathlib import Path


def fifo(path: Path) -> Path:
    """A named pipe where a trace file is expected: open() on it blocks until a writer appears."""
    os.mkfifo(path)
    return path
