"""The fast paths of a cold open: ISA-L inflate on a thread ahead of the reader, and the cache entry
written behind the command. Each must give exactly what the plain path gives, damaged files included."""

from __future__ import annotations

import gzip
import json
import threading
import zlib
from pathlib import Path

import pytest
from support.tracefiles import small_gpu_trace, write_trace

from opscope.errors import TraceError
from opscope.ingest import finish_cache_writes, open_trace, source
from opscope.ingest.source import ByteSource


def _text(n: int = 4000) -> bytes:
    # varied enough that gzip does not shrink it to nothing, long enough for several 64 KiB blocks
    return json.dumps([{"i": i, "name": f"op{i % 97}", "ts": i * 1.5} for i in range(n)]).encode()


def _all(path: Path, **kw) -> tuple[bytes, ByteSource]:
    src = ByteSource(path, block_size=64 << 10, **kw)
    return b"".join(src.blocks()), src


@pytest.mark.parametrize("prefetch", [False, True])
def test_every_path_gives_the_same_bytes_for_a_two_member_gzip(tmp_path, prefetch):
    a, b = _text(3000), _text(5000)
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(a) + gzip.compress(b))
    data, src = _all(path, prefetch=prefetch)
    assert data == a + b
    assert not src.truncated
    # the salvaging zlib path, called directly, agrees
    assert b"".join(ByteSource(path, block_size=64 << 10)._gzip_blocks()) == a + b


@pytest.mark.parametrize("prefetch", [False, True])
def test_a_truncated_file_gives_what_zlib_salvages(tmp_path, prefetch):
    text = _text(20000)
    packed = gzip.compress(text)
    path = tmp_path / "cut.json.gz"
    path.write_bytes(packed[: len(packed) * 2 // 3])
    data, src = _all(path, prefetch=prefetch)
    expected = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(packed[: len(packed) * 2 // 3])
    assert data == expected and len(data) > 0
    assert src.truncated


@pytest.mark.parametrize("prefetch", [False, True])
def test_corruption_after_good_data_keeps_the_good_data(tmp_path, prefetch):
    text = _text(20000)
    packed = bytearray(gzip.compress(text))
    packed[len(packed) // 2: len(packed) // 2 + 64] = b"\xff" * 64  # damage in the middle of the deflate stream
    path = tmp_path / "bad.json.gz"
    path.write_bytes(bytes(packed))
    data, src = _all(path, prefetch=prefetch)
    plain = b"".join(ByteSource(path, block_size=64 << 10)._gzip_blocks())
    assert data == plain
    assert text.startswith(data[:1000]) and src.truncated and "corrupt gzip data" in src.corrupt_reason


def test_damage_before_any_data_is_an_error_through_the_thread(tmp_path):
    path = tmp_path / "junk.json.gz"
    path.write_bytes(b"\x1f\x8b" + b"\x08\x00" + b"\xff" * 200)
    with pytest.raises(TraceError, match="corrupt gzip data"):
        _all(path, prefetch=True)


def test_a_reader_that_stops_early_stops_the_inflating_thread(tmp_path):
    path = tmp_path / "big.json.gz"
    path.write_bytes(gzip.compress(_text(60000)))
    before = threading.active_count()
    blocks = ByteSource(path, block_size=16 << 10, prefetch=True).blocks()
    assert next(blocks)
    blocks.close()  # type: ignore[attr-defined]
    assert threading.active_count() == before


def test_the_inflate_cap_holds_on_the_fast_path(tmp_path, monkeypatch):
    text = b"[" + b",".join([b'{"ph":"X","name":"a"}'] * 200000) + b"]"
    path = tmp_path / "bomb.json.gz"
    path.write_bytes(gzip.compress(text, 9))
    monkeypatch.setenv(source.INFLATE_RATIO_ENV, "10")
    data, src = _all(path, prefetch=True)
    assert len(data) == 10 * path.stat().st_size
    assert src.truncated and "gzip bombs" in src.corrupt_reason


def test_a_cache_entry_written_behind_is_the_entry_a_plain_open_writes(tmp_path):
    trace_file = write_trace(tmp_path / "t.json", small_gpu_trace())
    behind, plain = tmp_path / "behind", tmp_path / "plain"
    first = open_trace(trace_file, cache_dir=behind, write_behind=True)
    first.metadata["added_after_open"] = True  # the entry holds what the reader found, not later additions
    finish_cache_writes()
    open_trace(trace_file, cache_dir=plain)
    again = open_trace(trace_file, cache_dir=behind)
    assert "from_cache" in again.metadata and "added_after_open" not in again.metadata
    reference = open_trace(trace_file, cache_dir=plain)
    for name in ("events", "flows", "steps", "args"):
        assert getattr(again, name).equals(getattr(reference, name)), name
