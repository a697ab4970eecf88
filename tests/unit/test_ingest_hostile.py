"""The read path's guards against hostile input, in memory: the top-level key scan,
the end of a large item, the linear name-quote repair, the name cap, the inflate cap, junk after the array."""

from __future__ import annotations

import gzip
import re

import msgspec
import pyarrow as pa
import pytest
from support import hostile
from support.bad_input import warnings_of
from support.tracefiles import write_trace, x

from opscope.errors import TraceError
from opscope.ingest import open_trace
from opscope.ingest.chrome import json_scan, salvage
from opscope.ingest.chrome.columns import MAX_NAME_BYTES, cap_names
from opscope.ingest.chrome.reader import read
from opscope.ingest.source import DEFAULT_INFLATE_RATIO, INFLATE_FLOOR, ByteSource, inflate_cap

KEY = b"traceEvents"


def test_key_scan_skips_the_key_inside_header_values_and_strings():
    doc = b'{"a": {"traceEvents": [1]}, "s": "\\"traceEvents\\": [", "b": [{"traceEvents": []}], "traceEvents": [{}]}'
    at = json_scan.KeyScan(KEY).find(doc)
    assert at == doc.rindex(b"[{}]") + 1


def test_key_scan_resumes_across_blocks_cut_anywhere():
    doc = b'{"x": "a \\" { [ string", "traceEvents"  :  [1]}'
    expected = doc.index(b"[1]") + 1
    for cut in range(1, len(doc)):
        scan = json_scan.KeyScan(KEY)
        buf = bytearray(doc[:cut])
        first = scan.find(buf)
        buf += doc[cut:]
        assert (first if first is not None else scan.find(buf)) == expected, cut


def test_key_scan_reports_an_object_that_closes_without_the_key():
    scan = json_scan.KeyScan(KEY)
    assert scan.find(b'{"a": {"traceEvents": [1]}} trailing') is None
    assert scan.closed
    assert scan.scanned == len(b'{"a": {"traceEvents": [1]}}')


@pytest.mark.parametrize(("buf", "end"), [
    (b'{"a": "}]", "b": [1, {"c": 2}]}, {', len(b'{"a": "}]", "b": [1, {"c": 2}]}')),
    (b'"a \\" b", ', 8),
    (b"12, ", 2),
    (b'{"a": "unterminated', None),
    (b'{"a": [1, 2]', None),
])
def test_value_end(buf, end):
    assert json_scan.value_end(buf, 0) == end


def test_name_requote_matches_the_old_regex_and_is_linear_on_many_keys():
    old = re.compile(rb'("name"\s*:\s*")(.*?)("\s*,\s*"(?:ph|cat|pid|tid|ts|dur|args|id|s|bp)"\s*:)', re.DOTALL)

    def by_regex(obj):
        return old.sub(lambda m: m.group(1) + re.sub(rb'(?<!\\)"', b'\\\\"', m.group(2)) + m.group(3), obj)

    for obj in (b'{"name": "a "b" c", "ph": "X", "name":"x"y","pid":1}',
                b'{"name":"","ph":"X"}', b'{"name": "a"b", "zz": 1}', b'{"ph":"X"}',
                b'{"name": "q"", "name": "r"s", "tid": 2, "args": {"name": "t"u", "id": 3}}'):
        assert salvage._requote_names(obj) == by_regex(obj), obj
    many = b'{"ph":"X",' + b'"name":"a"b", ' * 20_000 + b'"zz":1}'
    assert salvage._requote_names(many) == many  # no known key follows any name: nothing to re-escape


def test_cap_names_cuts_long_names_on_a_character_boundary_and_counts_rows():
    long = "é" * MAX_NAME_BYTES  # 2 bytes each: twice the cap
    names = pa.array(["a", long, "b", long], pa.string()).dictionary_encode()
    capped, rows = cap_names(names)
    assert rows == 2
    values = capped.to_pylist()
    assert values[0] == "a" and values[2] == "b"
    assert values[1] == values[3] == "é" * (MAX_NAME_BYTES // 2)
    short = pa.array(["a", "b"], pa.string()).dictionary_encode()
    assert cap_names(short) == (short, 0)


def test_inflate_cap_default_explicit_and_invalid(tmp_path, monkeypatch):
    path = tmp_path / "t.json.gz"
    monkeypatch.delenv("OPSCOPE_MAX_INFLATE_RATIO", raising=False)
    assert inflate_cap(path, 1000) == (INFLATE_FLOOR, DEFAULT_INFLATE_RATIO)
    assert inflate_cap(path, 10 << 20) == (DEFAULT_INFLATE_RATIO * (10 << 20), DEFAULT_INFLATE_RATIO)
    monkeypatch.setenv("OPSCOPE_MAX_INFLATE_RATIO", "2.5")
    assert inflate_cap(path, 1000) == (2500, 2.5)
    monkeypatch.setenv("OPSCOPE_MAX_INFLATE_RATIO", "0")
    assert inflate_cap(path, 1000) == (None, 0)
    for bad in ("ten", "-1", "nan", "inf"):
        monkeypatch.setenv("OPSCOPE_MAX_INFLATE_RATIO", bad)
        with pytest.raises(TraceError, match="OPSCOPE_MAX_INFLATE_RATIO"):
            inflate_cap(path, 1000)


def test_byte_source_stops_at_the_inflate_cap(tmp_path, monkeypatch):
    data = b"x" * (3 << 20)
    path = tmp_path / "t.gz"
    path.write_bytes(gzip.compress(data))
    monkeypatch.setenv("OPSCOPE_MAX_INFLATE_RATIO", "100")
    source = ByteSource(path, block_size=64 << 10)
    cap = 100 * path.stat().st_size
    assert cap < len(data)
    out = b"".join(source.blocks())
    assert out == data[:cap]
    assert source.truncated
    assert "OPSCOPE_MAX_INFLATE_RATIO=0" in source.corrupt_reason
    monkeypatch.setenv("OPSCOPE_MAX_INFLATE_RATIO", "0")
    whole = ByteSource(path)
    assert b"".join(whole.blocks()) == data and not whole.truncated


def test_header_candidates_read_three_events(tmp_path):
    trace = read(hostile.header_candidates(tmp_path / "t.json", candidates=60_000))
    assert trace.events.num_rows == 3
    assert trace.metadata["header"]["note"] == '"traceEvents": ['
    assert warnings_of(trace) == {}


def test_a_header_that_is_not_json_is_ignored_and_the_events_read(tmp_path):
    path = tmp_path / "t.json"
    path.write_text('{"a": [1, 2 3], "traceEvents": [' + hostile._events(2) + "]}")
    trace = read(path)
    assert trace.events.num_rows == 2
    assert warnings_of(trace) == {"the document's keys before the event array are not valid JSON (ignored)": 1}


def test_keys_after_the_array_are_read_and_junk_after_them_counted(tmp_path):
    path = tmp_path / "t.json"
    path.write_text('{"traceEvents": [' + hostile._events(2) + '], "traceName": "x"} junk')
    trace = read(path)
    assert trace.events.num_rows == 2
    assert trace.metadata["header"]["traceName"] == "x"
    assert warnings_of(trace) == {"bytes after the event array that are not part of the document (ignored)": 4}


def test_a_document_cut_inside_its_trailing_keys_is_still_truncated(tmp_path):
    path = tmp_path / "t.json"
    path.write_text('{"traceEvents": [' + hostile._events(2) + '], "traceName": "x')
    trace = read(path)
    assert trace.events.num_rows == 2
    assert trace.metadata.get("truncated") is True


def test_one_event_larger_than_many_chunks_is_read_whole(tmp_path):
    # brackets, "}," and escaped quotes inside a string must not be taken for structure while it is read
    text = ('{"a": [1], "b": "\\"}, {' * 200_000)[:3_000_000]
    big = msgspec.json.encode({"ph": "X", "cat": "cpu_op", "name": "big", "pid": 1, "tid": 1, "ts": 0, "dur": 1,
                               "args": {"note": text}})
    assert big.count(b'},{') == 0 and big.count(b'}, {') > 100_000  # candidate cuts inside the string
    path = tmp_path / "t.json"
    path.write_bytes(b'{"traceEvents": [' + big + b"," + hostile._events(2).encode() + b"]}")
    trace = read(path)
    assert trace.events.num_rows == 3
    assert warnings_of(trace) == {}
    assert sorted(trace.events["name"].to_pylist()) == ["aten::add", "aten::add", "big"]


def test_deep_args_on_the_fast_path_are_dropped_not_a_recursion_error(tmp_path):
    trace = read(hostile.deep_args(tmp_path / "t.json", depth=100_000))
    assert trace.events.num_rows == 3
    assert warnings_of(trace) == {
        "events nested more than 512 levels deep (beyond the JSON nesting opscope reads: dropped as hostile)": 1}


def test_device_work_whose_pid_or_tid_is_beyond_int64_has_no_device_or_stream(tmp_path):
    # Without device/stream args, device work takes its device from the pid and its stream from the tid; a pid of
    # 2^63 or a tid "stream <21 digits>" cannot be an int64 (found by the fuzz test: an OverflowError).
    events = [x("aten::copy_", 0, 10),
              x("Memcpy HtoD", 1, 2, cat="gpu_memcpy", pid=2**63, tid=7),
              x("Memcpy DtoH", 4, 2, cat="gpu_memcpy", pid=0, tid="stream " + "9" * 21),
              x("Memcpy DtoD", 7, 2, cat="gpu_memcpy", pid=1, tid="stream 3")]
    trace = open_trace(write_trace(tmp_path / "t.json", events), use_cache=False)
    rows = {r["name"]: (r["device"], r["stream"]) for r in trace.events.to_pylist()}
    assert rows["Memcpy HtoD"] == (None, 7)
    assert rows["Memcpy DtoH"] == (0, None)
    assert rows["Memcpy DtoD"] == (1, 3)


@pytest.mark.parametrize(("doc", "problem"), [
    (b'{"traceEvents":[{"ph":"X","name":"a","ts":1,"dur":2,"pid":1,"tid":1}], "x": "\xff\xfe"}',
     "bytes after the event array"),
    (b'{"a":"\xff", "traceEvents":[{"ph":"X","name":"a","ts":1,"dur":2,"pid":1,"tid":1}]}',
     "keys before the event array are not valid JSON"),
])
def test_invalid_utf8_beside_the_event_array_is_ignored_and_said(tmp_path, doc, problem):
    """Invalid UTF-8 in the keys before or after the array (found by fuzzing the rocprof JSON reader) was a
    UnicodeDecodeError traceback: the events are kept and the unreadable keys are counted as such."""
    path = tmp_path / "t.json"
    path.write_bytes(doc)
    trace = open_trace(path, use_cache=False)
    assert trace.events["name"].to_pylist() == ["a"]
    assert any(problem in w["problem"] for w in trace.warnings), trace.warnings
