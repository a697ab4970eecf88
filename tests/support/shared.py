"""The real traces under ../shared/traces (beside the repository), for the integration tests."""

from __future__ import annotations

from pathlib import Path

import pytest

SHARED_TRACES = Path(__file__).resolve().parents[3] / "shared" / "traces"


def shared_trace(relative: str) -> Path:
    """Path of a real trace under ../shared/traces, skipping the test when it is not there."""
    path = SHARED_TRACES / relative
    if not path.exists():
        pytest.skip(f"real trace {relative} not available (../shared/traces is absent on this machine)")
    return path
