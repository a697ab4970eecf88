"""Fixtures: an isolated cache for every test, and the trace files that a unit test and its integration
counterpart both start from. Helpers live in the ``support`` package, not here."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.diff import base_events, new_events
from support.tracefiles import small_gpu_trace, write_trace


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    cache = tmp_path_factory.mktemp("opscope-cache")
    monkeypatch.setenv("OPSCOPE_CACHE_DIR", str(cache))
    yield cache


@pytest.fixture
def cache_dir() -> Path:
    return Path(os.environ["OPSCOPE_CACHE_DIR"])


@pytest.fixture
def cache(tmp_path) -> Path:
    """An empty cache folder of the test's own, passed explicitly (tests of bad input)."""
    d = tmp_path / "cache"
    d.mkdir()
    return d


@pytest.fixture
def trace_file(tmp_path) -> Path:
    """``small_gpu_trace`` written gzipped, as Kineto names its files (tests of the command line and cache)."""
    return write_trace(tmp_path / "small.pt.trace.json", small_gpu_trace(), gz=True)


@pytest.fixture
def pair(tmp_path) -> tuple[Path, Path]:
    """The base and new traces of the diff tests (``support.diff``)."""
    return write_trace(tmp_path / "base.json", base_events()), write_trace(tmp_path / "new.json", new_events())


@pytest.fixture
def pair6(tmp_path) -> tuple[Path, Path]:
    """The same pair with six steps a side (the same per-step means): enough steps for intervals."""
    return (write_trace(tmp_path / "base6.json", base_events(repeat=3)),
            write_trace(tmp_path / "new6.json", new_events(steps=6)))
