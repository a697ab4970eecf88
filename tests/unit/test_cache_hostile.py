"""A changed trace is never answered from a stale entry; a corrupt cache entry is detected,
dropped and rebuilt (never re-parsed forever, never read as a wrong number)."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pytest
from support.cache import entry_of, flip_in_data_pages
from support.tracefiles import small_gpu_trace, write_trace, x

from opscope.errors import TraceError
from opscope.ingest import open_trace
from opscope.store import entry as entry_mod
from opscope.store import files as files_mod
from opscope.store.keys import cache_key


def _entry(path, root):
    return root / cache_key(path)


def _names(trace):
    return sorted(trace.events.column("name").to_pylist())


def test_truncated_events_table_is_rebuilt(tmp_path, cache):
    path = write_trace(tmp_path / "t.json", small_gpu_trace())
    first = open_trace(path, cache_dir=cache)
    expected = _names(first)
    entry = _entry(path, cache)
    events = entry / "events.arrow"
    events.write_bytes(events.read_bytes()[:50])  # truncated: the footer is gone
    again = open_trace(path, cache_dir=cache)
    assert "from_cache" not in again.metadata  # a miss: parsed from the JSON
    assert _names(again) == expected
    pa.ipc.open_file(entry / "events.arrow").read_all()  # replaced by a readable file
    third = open_trace(path, cache_dir=cache)
    assert third.metadata.get("from_cache") == str(entry)
    assert _names(third) == expected


def test_truncated_side_table_is_a_miss_not_a_pyarrow_error(tmp_path, cache):
    path = write_trace(tmp_path / "t.json", small_gpu_trace())
    open_trace(path, cache_dir=cache)
    entry = _entry(path, cache)
    side = next(p for p in entry.glob("*.arrow") if p.name != "events.arrow")
    side.write_bytes(b"ARROW1 not really")
    again = open_trace(path, cache_dir=cache)
    assert "from_cache" not in again.metadata
    pa.ipc.open_file(side).read_all()  # rebuilt


def test_meta_json_that_is_not_an_object_is_a_miss(tmp_path, cache):
    path = write_trace(tmp_path / "t.json", small_gpu_trace())
    open_trace(path, cache_dir=cache)
    entry = _entry(path, cache)
    (entry / "meta.json").write_text(json.dumps([1, 2, 3]))
    again = open_trace(path, cache_dir=cache)
    assert "from_cache" not in again.metadata
    assert isinstance(json.loads((entry / "meta.json").read_text()), dict)


def _padded_trace(n: int = 30_000) -> list[dict]:
    """small_gpu_trace and ``n`` one-microsecond ops after it: a file of ~4 MB, so its middle lies
    outside the first and last MiB that the key hashes."""
    return small_gpu_trace() + [x("aten::pad", 4000 + 2 * i, 1) for i in range(n)]


def test_edit_in_the_middle_with_size_and_mtime_restored_is_not_stale(tmp_path, cache):
    path = write_trace(tmp_path / "t.json", _padded_trace())
    first = open_trace(path, cache_dir=cache)
    assert _names(first).count("aten::pad") == 30_000
    before = path.stat()
    data = path.read_bytes()
    middle = data.index(b'"aten::pad"', len(data) // 2)
    assert (1 << 20) < middle < len(data) - (1 << 20)  # outside both probes of the key
    path.write_bytes(data[:middle] + b'"aten::pid"' + data[middle + len(b'"aten::pad"'):])
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    again = open_trace(path, cache_dir=cache)
    assert "from_cache" not in again.metadata  # a new key: parsed from the edited JSON
    names = _names(again)
    assert names.count("aten::pid") == 1 and names.count("aten::pad") == 29_999


def test_flipped_bytes_in_events_pages_are_found_and_rebuilt(tmp_path, cache):
    path = write_trace(tmp_path / "t.json", small_gpu_trace())
    uncached = open_trace(path, use_cache=False).events.to_pylist()
    open_trace(path, cache_dir=cache)
    entry = entry_of(path, cache)
    flip_in_data_pages(entry / "events.arrow")
    again = open_trace(path, cache_dir=cache)
    assert "from_cache" not in again.metadata
    assert "events.arrow does not match its checksum" in again.metadata["cache_rebuilt"]
    assert again.events.to_pylist() == uncached
    third = open_trace(path, cache_dir=cache)  # the rebuilt entry is good, and the note was not stored
    assert third.metadata.get("from_cache") == str(entry) and "cache_rebuilt" not in third.metadata
    assert third.events.to_pylist() == uncached


def test_meta_json_changed_but_still_json_is_found(tmp_path, cache):
    path = write_trace(tmp_path / "t.json", small_gpu_trace())
    open_trace(path, cache_dir=cache)
    meta = entry_of(path, cache) / "meta.json"
    text = meta.read_text()
    assert '"schemaVersion": 1' in text
    meta.write_text(text.replace('"schemaVersion": 1', '"schemaVersion": 9'))  # same size, valid JSON
    again = open_trace(path, cache_dir=cache)
    assert "meta.json does not match its checksum" in again.metadata["cache_rebuilt"]


def test_corrupt_side_table_found_on_first_use_is_one_error_and_removes_the_entry(tmp_path, cache):
    path = write_trace(tmp_path / "t.json", small_gpu_trace())
    expected = open_trace(path, use_cache=False).steps.to_pylist()
    open_trace(path, cache_dir=cache)
    entry = entry_of(path, cache)
    flip_in_data_pages(entry / "steps.arrow")
    cached = open_trace(path, cache_dir=cache)  # footers are fine: the entry opens
    assert cached.metadata.get("from_cache") == str(entry)
    with pytest.raises(TraceError) as info:
        cached.steps  # noqa: B018 - the first read of the side table
    assert "steps.arrow does not match its checksum" in str(info.value)
    assert "\n" not in str(info.value)
    assert not entry.exists()
    rebuilt = open_trace(path, cache_dir=cache)
    assert "from_cache" not in rebuilt.metadata and rebuilt.steps.to_pylist() == expected
    assert open_trace(path, cache_dir=cache).steps.to_pylist() == expected


def test_corrupt_args_read_batch_by_batch_are_one_error_and_remove_the_entry(tmp_path, cache):
    path = write_trace(tmp_path / "t.json", small_gpu_trace())
    open_trace(path, cache_dir=cache)
    entry = entry_of(path, cache)
    flip_in_data_pages(entry / "args.arrow")
    cached = open_trace(path, cache_dir=cache)
    with pytest.raises(TraceError) as info:
        cached.args_of(pa.array([0, 1], pa.int64()))
    assert "args.arrow does not match its checksum" in str(info.value) and "\n" not in str(info.value)
    assert not entry.exists()


@pytest.mark.parametrize("failing", ["events", "flows"])
def test_a_failed_table_write_on_either_thread_keeps_no_entry(tmp_path, monkeypatch, failing):
    # the largest table is written on a second thread: its failure (a full disk) is the write's failure too, and
    # neither a half-written entry nor its temporary directory is left
    trace = open_trace(write_trace(tmp_path / "t.json", small_gpu_trace()), use_cache=False)
    root = tmp_path / "cache"
    real = files_mod.write_table

    def write(table, where):
        if where.name == f"{failing}.arrow":
            raise OSError(28, "No space left on device")
        return real(table, where)

    monkeypatch.setattr(files_mod, "write_table", write)
    assert entry_mod.write(tmp_path / "t.json", trace, root) is None
    assert list(root.iterdir()) == []
    monkeypatch.setattr(files_mod, "write_table", real)
    entry = entry_mod.write(tmp_path / "t.json", trace, root)
    assert entry is not None and (entry / f"{failing}.arrow").is_file()


def _trace_with_a_copy(tmp_path):
    events = small_gpu_trace() + [x("Memcpy HtoD (Pageable -> Device)", 2000, 30, cat="gpu_memcpy", pid=0, tid=7,
                                    device=0, stream=7, correlation=9, bytes=4096)]
    return write_trace(tmp_path / "t.json", events)


@pytest.mark.parametrize("write_behind", [False, True])
def test_a_first_open_lets_go_of_the_args_text_once_it_is_in_the_entry(tmp_path, cache, write_behind):
    # the args table (every event's JSON text) is written while the trace is completed, and the trace then reads it
    # back from the entry where a command needs it: the same table as read from the file
    path = _trace_with_a_copy(tmp_path)
    expected = open_trace(path, use_cache=False).args.to_pylist()  # read again from the file
    first = open_trace(path, cache_dir=cache, write_behind=write_behind)
    assert not isinstance(first.held_args(), pa.Table)
    copies = first.copy_args.to_pylist()  # taken out of the args before they went
    assert [json.loads(c["args"])["bytes"] for c in copies] == [4096]
    assert first.events["name"][copies[0]["event_id"]].as_py() == "Memcpy HtoD (Pageable -> Device)"
    assert first.args.to_pylist() == expected
    assert open_trace(path, cache_dir=cache).args.to_pylist() == expected
    assert [p.name for p in cache.iterdir()] == [_entry(path, cache).name]  # no draft left behind


@pytest.mark.parametrize("write_behind", [False, True])
def test_args_that_do_not_reach_the_entry_leave_no_entry_and_are_read_again(tmp_path, cache, monkeypatch,
                                                                            write_behind):
    from opscope.ingest import finish_cache_writes

    path = _trace_with_a_copy(tmp_path)
    expected = open_trace(path, use_cache=False).args.to_pylist()
    real = files_mod.write_table

    def write(table, where):
        if where.name == "args.arrow":
            raise OSError(28, "No space left on device")
        return real(table, where)

    monkeypatch.setattr(files_mod, "write_table", write)
    first = open_trace(path, cache_dir=cache, write_behind=write_behind)
    finish_cache_writes()
    assert list(cache.iterdir()) == []  # neither an entry without its args nor the draft
    assert first.args.to_pylist() == expected  # read again from the trace file


def _other_trace() -> list[dict]:
    return small_gpu_trace() + [x("aten::other", 4000 + 2 * i, 1) for i in range(5)]


@pytest.mark.parametrize("how", ["copied", "renamed"])
def test_an_entry_of_another_trace_put_in_place_is_rebuilt_not_served(tmp_path, cache, how):
    # every file of the entry matches its checksum: only what it says of its trace tells it apart
    import shutil

    mine = write_trace(tmp_path / "mine.json", _padded_trace(200))
    other = write_trace(tmp_path / "other.json", _other_trace())
    expected = _names(open_trace(mine, use_cache=False))
    open_trace(mine, cache_dir=cache)
    open_trace(other, cache_dir=cache)
    entry, foreign = entry_of(mine, cache), entry_of(other, cache)
    shutil.rmtree(entry)
    if how == "copied":
        shutil.copytree(foreign, entry)
    else:
        os.rename(foreign, entry)
    again = open_trace(mine, cache_dir=cache)
    assert "from_cache" not in again.metadata and _names(again) == expected
    assert again.metadata["cache_rebuilt"] == (f"cache entry did not belong to this trace (it was built from "
                                               f"{other.resolve()})")
    third = open_trace(mine, cache_dir=cache)  # the entry is this trace's now
    assert third.metadata.get("from_cache") == str(entry) and _names(third) == expected


def test_an_entry_of_an_earlier_version_of_the_same_file_is_not_served(tmp_path, cache):
    import shutil

    path = write_trace(tmp_path / "t.json", _other_trace())
    open_trace(path, cache_dir=cache)
    old = entry_of(path, cache)
    kept = shutil.copytree(old, tmp_path / "old-entry")
    write_trace(path, small_gpu_trace())  # rewritten: a new key
    expected = _names(open_trace(path, use_cache=False))
    new = entry_of(path, cache)
    assert new != old
    shutil.copytree(kept, new)  # the old entry under the new key
    again = open_trace(path, cache_dir=cache)
    assert _names(again) == expected
    assert again.metadata["cache_rebuilt"] == ("cache entry did not belong to this trace (it was built from another "
                                               "version of this file)")


def test_an_entry_that_does_not_say_which_trace_it_was_built_from_is_not_served(tmp_path, cache):
    path = write_trace(tmp_path / "t.json", small_gpu_trace())
    open_trace(path, cache_dir=cache)
    entry = entry_of(path, cache)
    meta = json.loads((entry / "meta.json").read_text())
    del meta[entry_mod.BUILT_FROM]
    (entry / "meta.json").write_text(json.dumps(meta))
    sums = json.loads((entry / "sums.json").read_text())
    sums["meta.json"] = files_mod.file_sum(entry / "meta.json")  # a consistent entry, from a writer that did not say
    (entry / "sums.json").write_text(json.dumps(sums))
    again = open_trace(path, cache_dir=cache)
    assert "from_cache" not in again.metadata
    assert "did not belong to this trace (it does not say which trace it was built from)" in \
        again.metadata["cache_rebuilt"]
    assert entry_mod.BUILT_FROM not in open_trace(path, cache_dir=cache).metadata  # not the trace's metadata


def test_a_trace_that_changes_while_it_is_read_is_not_cached(tmp_path, cache, monkeypatch):
    # a profiler still writing the file: what was read is not the file the key will name, so nothing is kept
    from opscope import ingest

    path = write_trace(tmp_path / "t.json", small_gpu_trace())
    real = ingest.pick_reader

    class Appending:
        def __init__(self, reader):
            self.reader = reader

        def read(self, *args, **kwargs):
            trace = self.reader.read(*args, **kwargs)
            with open(path, "ab") as fh:
                fh.write(b"\n")
            return trace

    monkeypatch.setattr(ingest, "pick_reader", lambda p: Appending(real(p)))
    entry_mod.not_written()
    trace = open_trace(path, cache_dir=cache)
    assert trace.num_events > 0
    assert list(cache.iterdir()) == []  # neither an entry nor its draft
    assert entry_mod.not_written() == [entry_mod.Unwritten(str(cache), f"{path} changed while it was read", True)]
