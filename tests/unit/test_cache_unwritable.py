"""A cache directory that cannot take an entry (a file in its place, a path under /dev/null, read-only, a disk that
fills while the entry is written) costs speed, never the result: the trace is read without the cache, nothing half
written is published, and the store says once per directory why nothing was cached (``entry.not_written``)."""

from __future__ import annotations

import errno
import json
import tempfile
from pathlib import Path

import pytest
from support.cache import entry_of, flip_in_data_pages
from support.tracefiles import small_gpu_trace, write_trace

from opscope.ingest import finish_cache_writes, open_trace
from opscope.store import entry as entry_mod
from opscope.store import files as files_mod


@pytest.fixture(autouse=True)
def _nothing_said_before():
    entry_mod.not_written()  # (what an earlier test in this process left)


def _events(trace) -> list[dict]:
    return trace.events.select(["name", "ts_ns", "dur_ns"]).to_pylist()


@pytest.mark.parametrize("where", ["a file", "under /dev/null"])
@pytest.mark.parametrize("write_behind", [False, True])
def test_an_impossible_cache_directory_reads_the_trace_and_says_why(tmp_path, where, write_behind):
    path = write_trace(tmp_path / "t.json", small_gpu_trace())
    expected = _events(open_trace(path, use_cache=False))
    if where == "a file":
        root = tmp_path / "cache"
        root.write_text("not a directory")
    else:
        root = Path("/dev/null/opscope-cache")
    trace = open_trace(path, cache_dir=root, write_behind=write_behind)
    finish_cache_writes()
    assert _events(trace) == expected and "from_cache" not in trace.metadata
    assert entry_mod.not_written() == [entry_mod.Unwritten(str(root), "not a directory" if where == "a file"
                                                           else "Not a directory")]
    assert entry_mod.not_written() == []  # said once
    assert _events(open_trace(path, cache_dir=root)) == expected  # and again without the cache


def test_a_read_only_cache_directory_reads_the_trace_and_says_why(tmp_path, cache, monkeypatch):
    # as a read-only mount answers (a permission a test run as root cannot be refused)
    def refused(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    path = write_trace(tmp_path / "t.json", small_gpu_trace())
    expected = _events(open_trace(path, use_cache=False))
    monkeypatch.setattr(tempfile, "mkdtemp", refused)
    assert _events(open_trace(path, cache_dir=cache)) == expected
    assert entry_mod.not_written() == [entry_mod.Unwritten(str(cache), "Read-only file system")]
    assert list(cache.iterdir()) == []


def test_a_damaged_entry_that_cannot_be_removed_is_rebuilt_in_memory_and_said(tmp_path, cache, monkeypatch):
    path = write_trace(tmp_path / "t.json", small_gpu_trace())
    expected = _events(open_trace(path, use_cache=False))
    open_trace(path, cache_dir=cache)
    entry = entry_of(path, cache)
    flip_in_data_pages(entry / "events.arrow")

    def refused(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(tempfile, "mkdtemp", refused)
    again = open_trace(path, cache_dir=cache)
    assert _events(again) == expected and "does not match its checksum" in again.metadata["cache_rebuilt"]
    assert entry_mod.not_written() == [entry_mod.Unwritten(
        str(cache), f"{entry.name} cannot be removed: Read-only file system")]


@pytest.mark.parametrize("failing", ["events", "args"])
@pytest.mark.parametrize("write_behind", [False, True])
def test_a_disk_that_fills_while_the_entry_is_written_publishes_nothing_and_says_why(tmp_path, cache, monkeypatch,
                                                                                    failing, write_behind):
    # the args are written while the trace is completed (a thread of the draft's), the other tables after it
    path = write_trace(tmp_path / "t.json", small_gpu_trace())
    expected = _events(open_trace(path, use_cache=False))
    real = files_mod.write_table

    def write(table, where):
        if where.name == f"{failing}.arrow":
            with open(where, "wb") as fh:
                fh.write(b"ARROW1" + bytes(100))  # part of it, then the disk is full
            raise OSError(errno.ENOSPC, "Error writing bytes to file. Detail: [errno 28] No space left on device")
        return real(table, where)

    monkeypatch.setattr(files_mod, "write_table", write)
    trace = open_trace(path, cache_dir=cache, write_behind=write_behind)
    finish_cache_writes()
    assert _events(trace) == expected
    assert list(cache.iterdir()) == []  # neither the entry nor its draft
    assert entry_mod.not_written() == [entry_mod.Unwritten(str(cache), "No space left on device")]
    monkeypatch.setattr(files_mod, "write_table", real)
    open_trace(path, cache_dir=cache)  # room again: the entry is written, and nothing is said
    assert entry_mod.not_written() == []
    cached = open_trace(path, cache_dir=cache)
    assert cached.metadata.get("from_cache") and _events(cached) == expected


def test_an_entry_published_meanwhile_by_another_command_is_taken_not_reported(tmp_path, cache):
    path = write_trace(tmp_path / "t.json", small_gpu_trace())
    trace = open_trace(path, use_cache=False)
    first = entry_mod.write(path, trace, cache)
    assert first is not None
    assert entry_mod.write(path, trace, cache) == first  # already there: nothing to write, nothing to say
    assert entry_mod.not_written() == []
    assert json.loads((first / "meta.json").read_text())[entry_mod.BUILT_FROM]["path"] == str(path.resolve())
