"""The real traces under ../shared/traces (beside the repository), for the integration tests."""

from __future__ import annotations

import gzip
import json
from decimal import Decimal
from pathlib import Path

import pytest

SHARED_TRACES = Path(__file__).resolve().parents[3] / "shared" / "traces"


def shared_trace(relative: str) -> Path:
    """Path of a real trace under ../shared/traces, skipping the test when it is not there."""
    path = SHARED_TRACES / relative
    if not path.exists():
        where = "not in ../shared/traces" if SHARED_TRACES.is_dir() else "../shared/traces is absent on this machine"
        pytest.skip(f"real trace {relative} not available ({where})")
    return path


#: Chrome-trace categories of device work, and the family each one is.
DEVICE_CATEGORIES = {"kernel": "kernel", "gpu_memcpy": "memcpy", "memcpy": "memcpy",
                     "gpu_memset": "memset", "memset": "memset"}


def raw_events(path: Path) -> list:
    """The trace's events straight from the JSON, numbers as exact decimals (for expected values)."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as fh:
        doc = json.loads(fh.read(), parse_float=Decimal)
    return doc["traceEvents"] if isinstance(doc, dict) else doc
