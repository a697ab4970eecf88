"""Fixtures for every test: an isolated cache. Helpers live in the ``support`` package, not here."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    cache = tmp_path_factory.mktemp("opscope-cache")
    monkeypatch.setenv("OPSCOPE_CACHE_DIR", str(cache))
    yield cache


@pytest.fixture
def cache_dir() -> Path:
    return Path(os.environ["OPSCOPE_CACHE_DIR"])
