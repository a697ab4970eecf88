"""Tables read in place (``model.mapped``): columns are views of the mapped file, checked by a checksum over the
mapped bytes themselves, and a file changed from outside while it is mapped (written in place, truncated) is an
error of the table's, never a signal or a silently different column."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from support.timing import limit

from opscope.model import mapped
from opscope.model.mapped import MappedTable

ROWS = 1 << 20  # 8 MiB per int64 column: above MAP_FROM_BYTES
TOTAL = ROWS * (ROWS - 1) // 2
guard = pytest.mark.skipif(not mapped.guarded(), reason="the C guard is not built (or OPSCOPE_NATIVE=0)")


def _write(path: Path, rows: int = ROWS, compression: str | None = None) -> pa.Table:
    a = pa.array(range(rows), pa.int64())
    table = pa.table({"a": a, "b": pc.bit_wise_and(a, 7),
                      "name": pa.DictionaryArray.from_arrays(pc.bit_wise_and(a, 1).cast(pa.int32()), ["x", "y"])})
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(
            sink, table.schema, options=pa.ipc.IpcWriteOptions(compression=compression)) as writer:
        writer.write_table(table)
    return table


def _sums(path: Path) -> list[int]:
    import zlib

    data = path.read_bytes()
    return [len(data), zlib.crc32(data)]


@guard
def test_columns_are_views_of_the_file_and_read_nothing_into_memory(tmp_path):
    expected = _write(tmp_path / "t.arrow")
    table = MappedTable(tmp_path / "t.arrow", _sums(tmp_path / "t.arrow"))
    before = pa.total_allocated_bytes()
    got = table.table
    assert pa.total_allocated_bytes() == before  # no copy, no decompression
    assert table.in_place and got.equals(expected)


@pytest.mark.parametrize("where", ["small", "no guard"])
def test_small_files_and_a_build_without_the_guard_read_the_file_into_memory(tmp_path, monkeypatch, where):
    rows = 1000 if where == "small" else ROWS
    expected = _write(tmp_path / "t.arrow", rows)
    if where == "no guard":
        monkeypatch.setenv("OPSCOPE_NATIVE", "0")
    table = MappedTable(tmp_path / "t.arrow", _sums(tmp_path / "t.arrow"))
    assert table.table.equals(expected) and not table.in_place
    os.truncate(tmp_path / "t.arrow", 0)  # the process's own copy: nothing changes under it
    table.verify()
    assert pc.sum(table.table.column("a")).as_py() == (TOTAL if rows == ROWS else rows * (rows - 1) // 2)


def test_a_compressed_file_reads_all_the_same(tmp_path):
    expected = _write(tmp_path / "t.arrow", compression="lz4")
    assert MappedTable(tmp_path / "t.arrow").table.equals(expected)


@pytest.mark.parametrize("damage", ["a flipped byte", "a shorter file"])
def test_the_checksum_covers_the_bytes_read(tmp_path, damage):
    path = tmp_path / "t.arrow"
    _write(path)
    sums = _sums(path)
    data = bytearray(path.read_bytes())
    if damage == "a flipped byte":
        data[len(data) // 2] ^= 0xFF
    else:
        del data[-4096:]
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"t\.arrow (does not match its checksum|is .* bytes, written as)"):
        MappedTable(path, sums).table  # noqa: B018


def _identity(path: Path) -> list[int]:
    st = path.stat()
    return [st.st_size, st.st_ino, st.st_mtime_ns, st.st_ctime_ns]


@guard
def test_a_file_still_as_it_was_summed_is_not_read_for_its_checksum(tmp_path, monkeypatch):
    path = tmp_path / "t.arrow"
    expected = _write(path)
    sums, summed_as = _sums(path), _identity(path)
    read = []
    monkeypatch.setattr(mapped, "_read_sums", lambda fd: read.append(fd) or sums)
    assert MappedTable(path, sums, summed_as=summed_as).table.equals(expected) and read == []
    assert MappedTable(path, sums).table.equals(expected) and len(read) == 1  # nothing said how it was summed


@guard
def test_a_file_written_in_place_since_it_was_summed_is_read_for_its_checksum(tmp_path):
    # the same size, its mtime set back: the ctime still moved, so the checksum is read and finds the change
    path = tmp_path / "t.arrow"
    _write(path)
    sums, summed_as = _sums(path), _identity(path)
    st = path.stat()
    time.sleep(0.05)  # past the file system's clock tick (ctime is kept in ticks of up to 10 ms)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    with open(path, "r+b") as fh:
        fh.write(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    now = _identity(path)
    assert now[:3] == summed_as[:3] and now[3] != summed_as[3]  # only the ctime tells
    with pytest.raises(ValueError, match=r"t\.arrow does not match its checksum"):
        MappedTable(path, sums, summed_as=summed_as).table  # noqa: B018


@guard
def test_removing_the_file_while_it_is_mapped_is_harmless(tmp_path):
    path = tmp_path / "t.arrow"
    _write(path)
    table = MappedTable(path, _sums(path))
    column = table.table.column("a")
    path.unlink()  # (the cache directory removed meanwhile: the map keeps the file)
    table.verify()
    assert pc.sum(column).as_py() == TOTAL


@guard
def test_a_file_written_in_place_while_mapped_is_an_error_not_a_different_column(tmp_path):
    path = tmp_path / "t.arrow"
    _write(path)
    errors = []
    table = MappedTable(path, _sums(path), error=lambda file, exc: errors.append(file) or ValueError(f"E {exc}"))
    column = table.table.column("a")
    assert pc.sum(column).as_py() == TOTAL
    with open(path, "r+b") as fh:  # same size, other bytes: the column's values change under the map
        fh.seek(os.path.getsize(path) // 2)
        fh.write(b"\xff" * 4096)
    with pytest.raises(ValueError, match=r"E t\.arrow changed while it was read"):
        table.verify()
    assert errors == [path]
    with pytest.raises(ValueError, match=r"t\.arrow (changed|was truncated) while it was read"):
        mapped.verify_all()  # what the command does before it ends


@guard
def test_a_file_truncated_while_mapped_reads_zeros_and_is_an_error_not_sigbus(tmp_path):
    path = tmp_path / "t.arrow"
    _write(path)
    table = MappedTable(path, _sums(path))
    column = table.table.column("a")
    os.truncate(path, 1 << 20)  # the first MiB stays: a's first 1 MiB minus the header, the rest is gone
    got = pc.sum(column).as_py()  # SIGBUS here without the guard: the process ended, exit 135
    assert got < TOTAL
    with pytest.raises(ValueError, match=r"t\.arrow was truncated while it was read"):
        table.verify()


@guard
@pytest.mark.parametrize("how", ["truncate", "overwrite"])
def test_a_change_found_only_once_the_table_is_gone_is_still_an_error(tmp_path, how):
    # a query's result is copied out of the map and its trace goes before the command ends: what changed under the
    # map after the last verify() is still said by verify_all, not lost with the table
    import contextlib
    import gc

    path = tmp_path / "t.arrow"
    _write(path)
    gc.collect()
    with contextlib.suppress(ValueError):
        mapped.verify_all()  # (what another test's tables left)
    errors = []
    table = MappedTable(path, _sums(path), error=lambda file, exc: errors.append(file) or ValueError(f"E {exc}"))
    column = table.table.column("a")
    table.verify()
    if how == "truncate":
        os.truncate(path, 1 << 20)
    else:
        with open(path, "r+b") as fh:
            fh.seek(os.path.getsize(path) // 2)
            fh.write(b"\xff" * 4096)
    pc.sum(column).as_py()  # computed from other bytes than those checked (zeros where truncated)
    del table, column
    gc.collect()
    word = "was truncated" if how == "truncate" else "changed"
    with pytest.raises(ValueError, match=rf"E t\.arrow {word} while it was read"):
        mapped.verify_all()
    assert errors == [path]
    mapped.verify_all()  # said once


@guard
def test_a_sigbus_outside_the_guarded_maps_still_ends_the_process(tmp_path):
    # the guard takes only its own mappings' faults: another file's truncated map ends the process as before
    code = f"""
import mmap, os, pyarrow as pa
from opscope.model.mapped import MappedTable
path = {str(tmp_path / "t.arrow")!r}
MappedTable(path).table  # the guard is installed
other = {str(tmp_path / "u.bin")!r}
with open(other, "wb") as fh:
    fh.write(b"x" * 65536)
with open(other, "rb") as fh:
    view = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
os.truncate(other, 0)
print(view[60000])
"""
    _write(tmp_path / "t.arrow")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=limit(60),
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")})
    assert done.returncode == -signal.SIGBUS, done.stderr


def test_a_trace_from_the_cache_reads_its_event_columns_in_place(tmp_path, monkeypatch):
    from support.tracefiles import small_gpu_trace, write_trace

    from opscope.ingest import open_trace
    from opscope.store.files import IN_PLACE

    monkeypatch.setattr(mapped, "MAP_FROM_BYTES", 0)  # the small trace's tables too
    path = write_trace(tmp_path / "t.json", small_gpu_trace())
    parsed = open_trace(path, cache_dir=tmp_path / "cache")  # parses and writes the entry
    cached = open_trace(path, cache_dir=tmp_path / "cache")
    assert cached.metadata.get("from_cache")
    before = pa.total_allocated_bytes()
    columns = cached.select(["kind", "name", "ts_ns", "dur_ns", "stream", "parent"])
    assert pa.total_allocated_bytes() == before  # views of the mapped file: nothing decompressed or copied
    assert columns.equals(parsed.select(["kind", "name", "ts_ns", "dur_ns", "stream", "parent"]))
    sides = {name: getattr(cached, name) for name in IN_PLACE if name != "events"}
    assert pa.total_allocated_bytes() == before  # the numeric side tables too
    assert all(table.equals(getattr(parsed, name)) for name, table in sides.items())
    assert sides["steps"].num_rows == 2 and len(cached._mapped) == len(sides)  # held while the trace lives
    assert mapped.guarded() == all(m.in_place for m in cached._mapped)
    cached.verify()
    assert cached.flows.equals(parsed.flows) and len(cached._mapped) == len(sides)  # (LZ4: read into memory)


@guard
def test_an_entry_as_written_is_not_read_for_its_checksums_and_a_replaced_file_is(tmp_path, monkeypatch):
    # the writer keeps each in-place table's identity: the next open maps the events without reading them whole;
    # the same bytes put back as another file (a new inode) are read for their checksum, and pass
    import shutil

    from support.tracefiles import small_gpu_trace, write_trace

    from opscope.ingest import open_trace

    monkeypatch.setattr(mapped, "MAP_FROM_BYTES", 0)  # the small trace's tables too
    read: list[int] = []
    real = mapped._read_sums
    monkeypatch.setattr(mapped, "_read_sums", lambda fd: read.append(fd) or real(fd))
    path = write_trace(tmp_path / "t.json", small_gpu_trace())
    parsed = open_trace(path, cache_dir=tmp_path / "cache")
    cached = open_trace(path, cache_dir=tmp_path / "cache")
    assert cached.select(["ts_ns"]).equals(parsed.select(["ts_ns"])) and cached.memory.equals(parsed.memory)
    assert read == []
    events = Path(cached.metadata["from_cache"]) / "events.arrow"
    shutil.copyfile(events, tmp_path / "copy.arrow")
    os.replace(tmp_path / "copy.arrow", events)
    again = open_trace(path, cache_dir=tmp_path / "cache")
    assert again.metadata.get("from_cache") and len(read) == 1
    assert again.select(["ts_ns"]).equals(parsed.select(["ts_ns"]))
