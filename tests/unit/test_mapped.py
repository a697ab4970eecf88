"""Tables read in place (``model.mapped``): columns are views of the mapped file, nothing is copied, and the pages a
command touched leave its resident set while the columns stay readable."""

from __future__ import annotations

import gc
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from support.timing import limit

from opscope.model import mapped
from opscope.model.mapped import MappedTable

ROWS = 4 << 20  # 32 MiB per int64 column: far above what the process's other pages move by during a test


def _write(path: Path, compression: str | None = None) -> pa.Table:
    a = pa.array(range(ROWS), pa.int64())
    table = pa.table({"a": a, "b": pc.bit_wise_and(a, 7),
                      "name": pa.DictionaryArray.from_arrays(pc.bit_wise_and(a, 1).cast(pa.int32()), ["x", "y"])})
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(
            sink, table.schema, options=pa.ipc.IpcWriteOptions(compression=compression)) as writer:
        writer.write_table(table)
    return table


def _resident_kib(address: int) -> int:
    """The resident size (KiB) of the mapping holding ``address`` (Linux: /proc/self/smaps)."""
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and ":" not in head:
            low, high = (int(x, 16) for x in head.split("-"))
            inside = low <= address < high
        elif inside and line.startswith("Rss:"):
            return int(line.split()[1])
    raise AssertionError("no mapping holds the address")


def test_columns_are_views_of_the_file_and_read_nothing_into_memory(tmp_path):
    expected = _write(tmp_path / "t.arrow")
    table = MappedTable(tmp_path / "t.arrow")
    before = pa.total_allocated_bytes()
    got = table.table
    assert pa.total_allocated_bytes() == before  # no copy, no decompression
    assert got.equals(expected)
    assert got.column("b").chunk(0).buffers()[1].address != expected.column("b").chunk(0).buffers()[1].address


def test_a_compressed_file_reads_all_the_same(tmp_path):
    expected = _write(tmp_path / "t.arrow", "lz4")
    assert MappedTable(tmp_path / "t.arrow").table.equals(expected)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the resident size from /proc/self/smaps")
def test_release_takes_the_pages_out_and_the_columns_stay_readable(tmp_path, monkeypatch):
    monkeypatch.setattr(mapped._releaser, "watch", lambda table: None)  # only the explicit release, in this test
    monkeypatch.setattr(mapped, "_pages", None)
    _write(tmp_path / "t.arrow")
    table = MappedTable(tmp_path / "t.arrow")
    column = table.table.column("a")
    address = column.chunk(0).buffers()[1].address
    total = pc.sum(column).as_py()  # touches every page of the column
    assert _resident_kib(address) >= 30 << 10
    table.release()
    assert _resident_kib(address) < 4 << 10
    assert pc.sum(column).as_py() == total == ROWS * (ROWS - 1) // 2  # mapped back in, the same values


def _released_unasked(address: int) -> None:
    deadline = time.monotonic() + limit(10)
    while _resident_kib(address) >= 4 << 10:
        assert time.monotonic() < deadline, "the pages were never released"
        time.sleep(0.01)


@pytest.mark.skipif(mapped._pages is None, reason="the C release thread is not built")
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the resident size from /proc/self/smaps")
def test_the_c_thread_lets_go_of_pages_unasked_until_the_table_goes(tmp_path, monkeypatch):
    monkeypatch.setattr(mapped._releaser, "watch", lambda table: None)  # the C thread alone
    _write(tmp_path / "t.arrow")
    table = MappedTable(tmp_path / "t.arrow")
    column = table.table.column("a")
    assert table.released_in_c and mapped._pages.watched()[1] == 1
    address = column.chunk(0).buffers()[1].address
    for _ in range(3):  # released again after every use
        assert pc.sum(column).as_py() == ROWS * (ROWS - 1) // 2
        _released_unasked(address)
    del table  # the map lives on in the column's buffers: no longer released, never unmapped under the thread
    gc.collect()
    assert pc.sum(column).as_py() == ROWS * (ROWS - 1) // 2
    time.sleep(0.2)  # a hundred periods
    assert _resident_kib(address) >= 30 << 10


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the resident size from /proc/self/smaps")
def test_the_python_releaser_lets_go_of_pages_unasked_and_ends_with_the_last_table(tmp_path, monkeypatch):
    monkeypatch.setattr(mapped, "_releaser", mapped._Releaser())  # its own, apart from other tests' tables
    monkeypatch.setattr(mapped, "_pages", None)  # where the C thread is not built
    _write(tmp_path / "t.arrow")
    table = MappedTable(tmp_path / "t.arrow")
    column = table.table.column("a")
    address = column.chunk(0).buffers()[1].address
    pc.sum(column)
    _released_unasked(address)
    thread = mapped._releaser._thread
    assert thread is not None and thread.is_alive()
    del table, column
    gc.collect()
    thread.join(timeout=limit(10))
    assert not thread.is_alive() and mapped._releaser._thread is None


def test_a_trace_from_the_cache_reads_its_event_columns_in_place(tmp_path):
    from support.tracefiles import small_gpu_trace, write_trace

    from opscope.ingest import open_trace

    path = write_trace(tmp_path / "t.json", small_gpu_trace())
    parsed = open_trace(path, cache_dir=tmp_path / "cache")  # parses and writes the entry
    cached = open_trace(path, cache_dir=tmp_path / "cache")
    assert cached.metadata.get("from_cache")
    before = pa.total_allocated_bytes()
    columns = cached.select(["kind", "name", "ts_ns", "dur_ns", "stream", "parent"])
    assert pa.total_allocated_bytes() == before  # views of the mapped file: nothing decompressed or copied
    assert columns.equals(parsed.select(["kind", "name", "ts_ns", "dur_ns", "stream", "parent"]))
    from opscope.model.cache import IN_PLACE

    sides = {name: getattr(cached, name) for name in IN_PLACE if name != "events"}
    assert pa.total_allocated_bytes() == before  # the numeric side tables too
    assert all(table.equals(getattr(parsed, name)) for name, table in sides.items())
    assert sides["steps"].num_rows == 2 and len(cached._mapped) == len(sides)  # held while the trace lives
    assert cached.flows.equals(parsed.flows) and len(cached._mapped) == len(sides)  # (LZ4: read into memory)
