"""Where HTA itself runs (its own interpreter: ``$OPSCOPE_HTA_PYTHON`` or /tmp/htavenv/bin/python), for the
tests that compare opscope with HTA live."""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path

HTA_PYTHON = Path(os.environ.get("OPSCOPE_HTA_PYTHON", "/tmp/htavenv/bin/python"))


@functools.lru_cache(maxsize=1)
def _hta_missing() -> str | None:
    """Why HTA cannot run here, or None."""
    if not HTA_PYTHON.exists():
        return f"no HTA interpreter at {HTA_PYTHON} (set OPSCOPE_HTA_PYTHON)"
    check = subprocess.run([str(HTA_PYTHON), "-c", "import hta"], capture_output=True, text=True)
    if check.returncode != 0:
        return f"{HTA_PYTHON} cannot import hta: {(check.stderr.strip().splitlines() or ['?'])[-1]}"
    return None
