"""Tables read in place (``model.mapped``): columns are views of the mapped file, nothing is copied."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

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
