"""Issue 14, part 6: a corrupt cache entry is detected, dropped and rebuilt (never re-parsed forever)."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
from support.tracefiles import small_gpu_trace, write_trace

from opscope.ingest import open_trace
from opscope.model import cache as cache_mod


def _entry(path, root):
    return root / cache_mod.cache_key(path)


def _names(trace):
    return sorted(trace.events.column("name").to_pylist())


def test_truncated_events_parquet_is_rebuilt(tmp_path, cache):
    path = write_trace(tmp_path / "t.json", small_gpu_trace())
    first = open_trace(path, cache_dir=cache)
    expected = _names(first)
    entry = _entry(path, cache)
    events = entry / "events.parquet"
    events.write_bytes(events.read_bytes()[:50])  # truncated: the footer is gone
    again = open_trace(path, cache_dir=cache)
    assert "from_cache" not in again.metadata  # a miss: parsed from the JSON
    assert _names(again) == expected
    pq.read_table(entry / "events.parquet")  # replaced by a readable file
    third = open_trace(path, cache_dir=cache)
    assert third.metadata.get("from_cache") == str(entry)
    assert _names(third) == expected


def test_truncated_side_table_is_a_miss_not_a_pyarrow_error(tmp_path, cache):
    path = write_trace(tmp_path / "t.json", small_gpu_trace())
    open_trace(path, cache_dir=cache)
    entry = _entry(path, cache)
    side = next(p for p in entry.glob("*.parquet") if p.name != "events.parquet")
    side.write_bytes(b"PAR1 not really")
    again = open_trace(path, cache_dir=cache)
    assert "from_cache" not in again.metadata
    pq.read_table(side)  # rebuilt


def test_meta_json_that_is_not_an_object_is_a_miss(tmp_path, cache):
    path = write_trace(tmp_path / "t.json", small_gpu_trace())
    open_trace(path, cache_dir=cache)
    entry = _entry(path, cache)
    (entry / "meta.json").write_text(json.dumps([1, 2, 3]))
    again = open_trace(path, cache_dir=cache)
    assert "from_cache" not in again.metadata
    assert isinstance(json.loads((entry / "meta.json").read_text()), dict)
