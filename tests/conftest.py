"""Shared fixtures: where the real traces live, and an isolated cache for every test."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SHARED_TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"


def shared_trace(relative: str) -> Path:
    """Path of a real trace under ../shared/traces, skipping the test when it is not there."""
    path = SHARED_TRACES / relative
    if not path.exists():
        pytest.skip(f"real trace {relative} not available (../shared/traces is absent on this machine)")
    return path


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    cache = tmp_path_factory.mktemp("opscope-cache")
    monkeypatch.setenv("OPSCOPE_CACHE_DIR", str(cache))
    yield cache


@pytest.fixture
def cache_dir() -> Path:
    return Path(os.environ["OPSCOPE_CACHE_DIR"])
