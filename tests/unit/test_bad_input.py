"""Bad input read by ``open_trace``: every damaged, hostile or odd file gives either a correct partial read with
counted warnings or one ``TraceError`` line, never a traceback.

Every fixture is written as text (``support.bad_input``), one key group per line like Kineto writes it, so that
the expected counts follow from the fixture itself.
"""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path

from support.bad_input import (
    FIFTY,
    TRUNCATED,
    US,
    _complete_before,
    _cut_points,
    args_of,
    assert_trace_error,
    document,
    event,
    names,
    op,
    warnings_of,
    write,
)

from opscope.errors import TraceError
from opscope.ingest import open_trace

BAD_TIME = "events with missing, negative, non-numeric or out-of-range (beyond 73 years) ts/dur (dropped)"
NONFINITE = "events with NaN/Infinity values (read as null)"
UTF8 = "events with invalid UTF-8 (replaced with U+FFFD)"
CONTROL = "events with raw control characters in strings (escaped)"
QUOTES = "events with unescaped quotes in their name (re-escaped)"
ARGS_UTF8 = "events with invalid UTF-8 in their args (replaced with U+FFFD)"


# -- 1. empty file ---------------------------------------------------------------------------------

def test_whitespace_only_and_empty_gzip(tmp_path):
    assert_trace_error(write(tmp_path / "blank.json", " \n\t\r\n"), "no data")
    assert_trace_error(write(tmp_path / "empty.json.gz", b"", gz=True), "no data")
    assert_trace_error(write(tmp_path / "blank.json.gz", "\n\n   \n", gz=True), "no data")


# -- 2. truncated JSON -----------------------------------------------------------------------------

def test_truncated_gzip_recovers_events_before_the_cut(tmp_path):
    text = FIFTY
    packed = gzip.compress(FIFTY.encode(), mtime=0)
    cut = packed[: len(packed) * 6 // 10]
    path = write(tmp_path / "cut.json.gz", cut)
    # What a decompressor gets out of the cut bytes, and the events complete in that.
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    prefix = d.decompress(cut) + d.flush()
    expected = _complete_before(text, len(prefix), 50)
    assert 0 < expected < 50

    trace = open_trace(path, use_cache=False)
    assert names(trace) == [f"aten::op{i}" for i in range(expected)]
    assert any(w.startswith(TRUNCATED) and f"recovered {expected} complete events" in w
               for w in warnings_of(trace))
    assert trace.metadata["truncated"] is True


def test_truncated_before_first_event(tmp_path):
    path = write(tmp_path / "head-only.json", '{\n  "schemaVersion": 1,\n  "traceEvents": [\n  {\n    "ph": "X"')
    assert_trace_error(path, "truncated before its first complete event")
    gz = write(tmp_path / "head-only.json.gz", gzip.compress(document([op(0)]).encode())[:30])
    assert_trace_error(gz, "truncated")


# -- 3. corrupt gzip -------------------------------------------------------------------------------

def _deflate_broken_after(prefix: bytes) -> bytes:
    """A gzip member holding ``prefix``, then an invalid deflate block (reserved type), then junk."""
    c = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    return c.compress(prefix) + c.flush(zlib.Z_FULL_FLUSH) + b"\x07" + b"junk after the damage" * 20


def test_gzip_corrupt_after_good_data_keeps_what_came_before(tmp_path):
    text = document([op(i) for i in range(50)])
    cut = _cut_points(text, 29)["inside_ts"]
    path = write(tmp_path / "damaged.json.gz", _deflate_broken_after(text[:cut].encode()))
    trace = open_trace(path, use_cache=False)
    assert names(trace) == [f"aten::op{i}" for i in range(29)]
    warning = next(w for w in warnings_of(trace) if w.startswith(TRUNCATED))
    assert "corrupt gzip data" in warning and "recovered 29 complete events" in warning


def test_gzip_with_bad_checksum_keeps_all_data(tmp_path):
    text = document([op(i) for i in range(50)])
    packed = bytearray(gzip.compress(text.encode()))
    packed[-8:-4] = bytes(b ^ 0xFF for b in packed[-8:-4])  # CRC32 of the trailer
    trace = open_trace(write(tmp_path / "bad-crc.json.gz", bytes(packed)), use_cache=False)
    assert names(trace) == [f"aten::op{i}" for i in range(50)]
    warning = next(w for w in warnings_of(trace) if w.startswith(TRUNCATED))
    assert "corrupt gzip data" in warning and "recovered 50 complete events" in warning


def test_gzip_with_trailing_garbage(tmp_path):
    text = document([op(i) for i in range(5)])
    path = write(tmp_path / "tail.json.gz", gzip.compress(text.encode()) + b"\x1f\x8bnot a second member")
    trace = open_trace(path, use_cache=False)
    assert names(trace) == [f"aten::op{i}" for i in range(5)]
    assert any("corrupt gzip data" in w for w in warnings_of(trace))


# -- 5. missing / bad times ------------------------------------------------------------------------

def test_events_with_bad_times_are_dropped_and_counted(tmp_path):
    bad = [
        event('"bad::missing_ts"', None, "10"),
        event('"bad::text_ts"', '"abc"', "10"),
        event('"bad::null_ts"', "null", "10"),
        event('"bad::missing_dur"', "200", None),
        event('"bad::negative_dur"', "200", "-5"),
        event('"bad::text_dur"', "200", '"ten"'),
        event('"bad::huge_ts"', "1e300", "10"),  # a float, but no int64 ns
        event('"bad::huge_int_ts"', "123456789012345678901234567890", "10"),
        event('"bad::list_ts"', "[1]", "10"),
    ]
    out_of_float = event('"bad::inf_ts"', "1e400", "10")  # not even a double: read as null
    good = [op(i) for i in range(10)]
    mixed = good[:3] + bad[:3] + good[3:7] + bad[3:] + [out_of_float] + good[7:]
    path = write(tmp_path / "times.json", document(mixed))
    trace = open_trace(path, use_cache=False)
    assert names(trace) == [f"aten::op{i}" for i in range(10)]
    assert trace.events["ts_ns"].to_pylist() == [(100 + 20 * i) * US for i in range(10)]
    assert trace.events["dur_ns"].to_pylist() == [10 * US] * 10
    assert warnings_of(trace) == {BAD_TIME: len(bad) + 1, NONFINITE: 1}


def test_bad_times_in_other_phases_are_counted(tmp_path):
    events = [
        op(0),
        event('"ac2g"', '"abc"', None, ph='"s"', cat='"ac2g"', args=None, extra='"id": 1, "bp": "e"'),
        event('"ac2g"', "105", None, ph='"f"', cat='"ac2g"', args=None, extra='"id": 1, "bp": "e"'),
        event('"[memory]"', None, None, ph='"i"', cat='"cpu_instant_event"', args='{"Bytes": 8}'),
        event('"queue"', '"x"', None, ph='"C"', cat=None, args='{"depth": 3}'),
        event('"span"', "1e300", None, ph='"B"', cat='"user_annotation"', args="{}"),
        event('"span"', "500", None, ph='"E"', cat='"user_annotation"', args="{}"),
        event('"mark"', "null", None, ph='"i"', cat='"cpu_instant_event"', args="{}"),
    ]
    trace = open_trace(write(tmp_path / "phases.json", document(events)), use_cache=False)
    assert names(trace) == ["aten::op0"]
    assert trace.flows.select(["id", "phase", "ts_ns"]).to_pylist() == [
        {"id": "1", "phase": "f", "ts_ns": 105 * US}]
    assert trace.memory.num_rows == 0 and trace.counters.num_rows == 0
    assert warnings_of(trace) == {BAD_TIME: 5}  # flow, memory, counter, B/E pair, instant


def test_numeric_text_times_are_read(tmp_path):
    trace = open_trace(write(tmp_path / "text-times.json", document([event(ts='"250.5"', dur='"3"')])),
                       use_cache=False)
    assert trace.events["ts_ns"].to_pylist() == [250_500]
    assert trace.events["dur_ns"].to_pylist() == [3 * US]


# -- 6. NaN / Infinity -----------------------------------------------------------------------------

def nonfinite_tokens(folder: Path) -> Path:
    nan, inf = json.dumps(float("nan")), json.dumps(float("inf"))  # what json.dumps writes: NaN, Infinity
    assert (nan, inf) == ("NaN", "Infinity")
    affected = [
        event('"nan::ts"', nan, "10"),  # time unusable: dropped
        event('"inf::dur"', "300", inf),  # dropped
        event('"neginf::dur"', "300", "-" + inf),  # dropped
        event('"nan::args"', "400", "10", args=f'{{"External id": 77, "scale": {nan}}}'),  # kept
        event('"inf::args"', "450", "10", args=f'{{"External id": 78, "range": [1, -{inf}, {inf}]}}'),  # kept
    ]
    good = [op(i) for i in range(10)]
    return write(folder / "nonfinite.json", document(good[:5] + affected + good[5:]))


def test_nan_and_infinity_tokens(tmp_path):
    path = nonfinite_tokens(tmp_path)
    trace = open_trace(path, use_cache=False)
    assert warnings_of(trace) == {NONFINITE: 5, BAD_TIME: 3}
    assert trace.events.num_rows == 12
    by_name = {n: i for i, n in enumerate(names(trace))}
    assert {f"aten::op{i}" for i in range(10)} <= set(by_name)
    assert "nan::ts" not in by_name and "inf::dur" not in by_name and "neginf::dur" not in by_name
    row = by_name["nan::args"]
    assert trace.events["external_id"][row].as_py() == 77
    assert trace.events["ts_ns"][row].as_py() == 400 * US
    assert args_of(trace, row) == {"External id": 77, "scale": None}
    assert args_of(trace, by_name["inf::args"]) == {"External id": 78, "range": [1, None, None]}


def test_nan_string_is_not_touched(tmp_path):
    # "NaN" inside a string is text, not a token to repair.
    path = write(tmp_path / "nan-name.json", document([event('"NaN Infinity"', args='{"note": "NaN"}'), op(1)]))
    trace = open_trace(path, use_cache=False)
    assert names(trace) == ["NaN Infinity", "aten::op1"]
    assert warnings_of(trace) == {}
    assert args_of(trace, 0) == {"note": "NaN"}


# -- 7. hostile nesting ----------------------------------------------------------------------------

def test_absurdly_deep_document_is_rejected(tmp_path):
    depth = 100_000
    assert_trace_error(write(tmp_path / "deep-doc.json", "[" * depth + "]" * depth), "no readable trace events",
                       "nested more than 512 levels")
    assert_trace_error(write(tmp_path / "deep-open.json", "[" * depth), "truncated")
    assert_trace_error(write(tmp_path / "deep-obj.json", '{"a": ' * depth + "1" + "}" * depth), "not a trace")
    # Deep nesting in a header key before the events: the events array is still found.
    head = write(tmp_path / "deep-head.json",
                 '{"x": ' + "[" * depth + "]" * depth + ', "traceEvents": [' + op(0) + "]}")
    try:
        trace = open_trace(head, use_cache=False)
    except TraceError as exc:
        assert "\n" not in str(exc)
    else:
        assert names(trace) == ["aten::op0"]


def test_moderately_deep_args_are_kept(tmp_path):
    # Real args nest a few levels; 50 is deep but legitimate.
    nested = "[" * 50 + "2" + "]" * 50
    path = write(tmp_path / "nested.json", document([event(args=f'{{"External id": 3, "v": {nested}}}')]))
    trace = open_trace(path, use_cache=False)
    assert trace.events["external_id"].to_pylist() == [3]
    assert warnings_of(trace) == {}


# -- 9. control characters, invalid UTF-8, unescaped quotes ---------------------------------------

def name_defects(folder: Path) -> Path:
    defects = [
        event('"aten::ctl\x01x"', "300", "10"),
        event('"aten::nl\nx"', "320", "10"),
        event('"aten::bad\udcffx"', "340", "10"),  # written as the raw byte 0xff
        event('"aten::foo "bar""', "360", "10"),
        event('"aten::tab\tand "quote""', "380", "10"),
    ]
    good = [op(i) for i in range(10)]
    return write(folder / "defects.json", document(good[:5] + defects + good[5:]))


def test_writer_defects_in_names_are_repaired(tmp_path):
    path = name_defects(tmp_path)
    assert b"\xff" in path.read_bytes() and b"\x01" in path.read_bytes()
    trace = open_trace(path, use_cache=False)
    got = names(trace)
    assert len(got) == 15
    assert {f"aten::op{i}" for i in range(10)} <= set(got)
    assert "aten::ctl\x01x" in got
    assert "aten::nl\nx" in got
    assert "aten::bad\ufffdx" in got
    assert 'aten::foo "bar"' in got
    assert 'aten::tab\tand "quote"' in got
    row = got.index('aten::foo "bar"')
    assert trace.events["ts_ns"][row].as_py() == 360 * US
    assert trace.events["external_id"][row].as_py() == 1
    warns = warnings_of(trace)
    assert warns[UTF8] == 1
    assert warns[QUOTES] == 2
    assert warns[CONTROL] == 3
    assert not any("dropped" in w for w in warns)


def test_invalid_utf8_in_args_is_repaired(tmp_path):
    path = write(tmp_path / "args-utf8.json",
                 document([event(args='{"External id": 4, "note": "caf\udce9"}'), op(1)]))
    trace = open_trace(path, use_cache=False)
    assert names(trace) == ["aten::add", "aten::op1"]
    assert args_of(trace, 0) == {"External id": 4, "note": "caf\ufffd"}
    assert warnings_of(trace) == {ARGS_UTF8: 1}


def test_invalid_utf8_in_read_args_keys(tmp_path):
    events = [
        event('"process_name"', None, None, ph='"M"', cat=None, pid="7", args='{"name": "py\udcffthon"}'),
        event('"queue"', "100", None, ph='"C"', cat=None, args='{"d\udcffepth": 3}'),
        event(args='{"External id": 4, "name": "x\udcff"}'),
    ]
    trace = open_trace(write(tmp_path / "keys-utf8.json", document(events)), use_cache=False)
    assert trace.metadata["process_names"] == {"7": "py\ufffdthon"}
    assert trace.counters.to_pylist() == [{"name": "queue", "series": "d\ufffdepth", "ts_ns": 100 * US,
                                          "pid": "1", "value": 3.0}]
    assert trace.events["external_id"].to_pylist() == [4]
    assert args_of(trace, 0) == {"External id": 4, "name": "x\ufffd"}


# -- 11. metadata only -----------------------------------------------------------------------------

def test_empty_event_array_is_rejected(tmp_path):
    assert_trace_error(write(tmp_path / "no-events.json", '{"schemaVersion": 1, "traceEvents": []}'),
                       "holds no trace events")
    assert_trace_error(write(tmp_path / "bare-empty.json", "[ ]"), "holds no trace events")


# -- 12. document forms ----------------------------------------------------------------------------

def _check_three_ops(trace):
    assert names(trace) == ["aten::op0", "aten::op1", "aten::op2"]
    assert trace.events["ts_ns"].to_pylist() == [100 * US, 120 * US, 140 * US]
    assert trace.events["external_id"].to_pylist() == [0, 1, 2]
    assert warnings_of(trace) == {}


def test_bare_array_and_object_forms(tmp_path):
    evs = [op(i) for i in range(3)]
    bare = write(tmp_path / "bare.json", document(evs, bare=True))
    obj = write(tmp_path / "object.json", document(evs))
    _check_three_ops(open_trace(bare, use_cache=False))
    trace = open_trace(obj, use_cache=False)
    _check_three_ops(trace)
    assert trace.metadata["header"]["traceName"] == "bad-input"
    assert trace.metadata["schema_version"] == 1
    compact = write(tmp_path / "compact.json", json.dumps([json.loads(e) for e in evs], separators=(",", ":")))
    _check_three_ops(open_trace(compact, use_cache=False))


def test_whitespace_heavy_file(tmp_path):
    evs = [json.loads(op(i)) for i in range(3)]
    parts = []
    for e in evs:
        items = [f"\t {json.dumps(k)} \r\n :\n\n {json.dumps(v)}  " for k, v in e.items()]
        parts.append("\n  {  \r\n" + " ,\r\n\t ".join(items) + "\n\n  }   \n")
    text = ("\ufeff  \r\n\t{ \n\n \"schemaVersion\"  :\t1 ,\r\n\n \"traceEvents\"  \n:\n  [  \n\n"
            + "   ,\r\n\n".join(parts) + "\n\n  ]  \n\t,\n \"traceName\" :  \"ws\"  \n\n}\r\n\n  ")
    trace = open_trace(write(tmp_path / "ws.json", text), use_cache=False)
    _check_three_ops(trace)
    assert trace.metadata["header"]["traceName"] == "ws"
    bare = "\n\n  [\n\n" + "  ,  \n\n".join(parts) + "\n]\n\n\n"
    _check_three_ops(open_trace(write(tmp_path / "ws-bare.json.gz", bare, gz=True), use_cache=False))


# -- 13. cache safety ------------------------------------------------------------------------------

def test_cache_rereads_a_file_completed_after_a_truncated_read(tmp_path, cache):
    # A file read while still being written is cached as what it was; the complete file is read afresh.
    path = tmp_path / "growing.json"
    text = document([op(i) for i in range(20)])
    write(path, text[: text.index('"aten::op10"')])
    part = open_trace(path, cache_dir=cache)
    assert part.events.num_rows == 10 and part.metadata["truncated"] is True
    write(path, text)
    full = open_trace(path, cache_dir=cache)
    assert full.events.num_rows == 20
    assert not any(w.startswith(TRUNCATED) for w in warnings_of(full))


# -- 14. exact nanoseconds -------------------------------------------------------------------------

EPOCH_TS = "1712195495519689.047"
EPOCH_NS = 1712195495519689047


def test_epoch_float_ts_keeps_exact_nanoseconds(tmp_path):
    path = write(tmp_path / "epoch.json", document([
        event('"aten::a"', EPOCH_TS, "12.345"),
        event('"aten::b"', "1712195495519702.001", "1.999"),
    ]))
    trace = open_trace(path, use_cache=False)
    assert trace.events["ts_ns"].to_pylist() == [EPOCH_NS, 1712195495519702001]
    assert trace.events["dur_ns"].to_pylist() == [12345, 1999]


def test_epoch_float_ts_exact_for_every_phase(tmp_path):
    # ns-resolution Kineto traces write every event's ts this way: flows, instants, memory, counters, B/E.
    base = 1712195495519689
    events = [
        event('"aten::mm"', f"{base}.047", "40.5"),
        event('"ac2g"', f"{base}.100", None, ph='"s"', cat='"ac2g"', args=None, extra='"id": 9, "bp": "e"'),
        event('"ac2g"', f"{base + 1}.200", None, ph='"f"', cat='"ac2g"', args=None, extra='"id": 9, "bp": "e"'),
        event('"marker"', f"{base + 2}.300", None, ph='"i"', cat='"cpu_instant_event"', args="{}"),
        event('"[memory]"', f"{base + 3}.400", None, ph='"i"', cat='"cpu_instant_event"',
              args='{"Device Type": 0, "Device Id": -1, "Addr": 1, "Bytes": 64, '
                   '"Total Allocated": 64, "Total Reserved": 128}'),
        event('"queue"', f"{base + 4}.500", None, ph='"C"', cat=None, args='{"depth": 3}'),
        event('"span"', f"{base + 5}.600", None, ph='"B"', cat='"user_annotation"', args="{}"),
        event('"span"', f"{base + 6}.700", None, ph='"E"', cat='"user_annotation"', args="{}"),
    ]
    trace = open_trace(write(tmp_path / "epoch-phases.json", document(events)), use_cache=False)
    ns = base * 1000
    rows = {e["name"]: e for e in trace.events.to_pylist()}
    assert rows["aten::mm"]["ts_ns"] == ns + 47 and rows["aten::mm"]["dur_ns"] == 40_500
    assert rows["marker"]["ts_ns"] == ns + 2000 + 300 and rows["marker"]["dur_ns"] == 0
    assert rows["span"]["ts_ns"] == ns + 5000 + 600 and rows["span"]["dur_ns"] == 1100
    assert trace.flows["ts_ns"].to_pylist() == [ns + 100, ns + 1000 + 200]
    assert trace.memory["ts_ns"].to_pylist() == [ns + 3000 + 400]
    assert trace.memory["bytes"].to_pylist() == [64]
    assert trace.counters["ts_ns"].to_pylist() == [ns + 4000 + 500]
    assert warnings_of(trace) == {}


def test_epoch_float_ts_exact_on_the_salvage_path(tmp_path):
    # A damaged event sends its neighbours through the slow path; their times must stay exact there too.
    events = [event('"aten::a"', EPOCH_TS, "12.345"),
              event('"aten::ctl\x01"', "1712195495519700.5", "1.25"),
              event('"aten::b"', "1712195495519710.999", "0.001")]
    trace = open_trace(write(tmp_path / "epoch-salvage.json", document(events)), use_cache=False)
    rows = {e["name"]: e for e in trace.events.to_pylist()}
    assert rows["aten::a"]["ts_ns"] == EPOCH_NS and rows["aten::a"]["dur_ns"] == 12345
    assert rows["aten::ctl\x01"]["ts_ns"] == 1712195495519700500 and rows["aten::ctl\x01"]["dur_ns"] == 1250
    assert rows["aten::b"]["ts_ns"] == 1712195495519710999 and rows["aten::b"]["dur_ns"] == 1


# -- odd value types and escapes -------------------------------------------------------------------

def test_odd_value_types_are_counted_not_fatal(tmp_path):
    events = [
        op(0),
        event('"odd::ph_list"', ph="[1]"),  # an unhashable phase
        event('"odd::ph_dict"', ph='{"a": 1}'),
        event('"odd::ph_null"', ph="null"),
        event('"odd::pid_dict"', pid='{"a": 1}', tid="[2]"),
        event('"process_name"', None, None, ph='"M"', cat=None, pid="[3]", args='{"name": "odd"}'),
        event('"odd::span"', "200", None, ph='"B"', cat='"user_annotation"', pid="[4]", args="{}"),
        event('"odd::span"', "230", None, ph='"E"', cat='"user_annotation"', pid="[4]", args="{}"),
        event('{"a": 1}', "300", "5"),  # a name that is not a string
        event(args='"not an object"'),
        op(1),
    ]
    trace = open_trace(write(tmp_path / "odd.json", document(events)), use_cache=False)
    rows = {e["name"]: e for e in trace.events.to_pylist()}
    assert set(rows) == {"aten::op0", "aten::op1", "odd::pid_dict", "odd::span", "{'a': 1}", "aten::add"}
    assert rows["odd::pid_dict"]["pid"] == "{'a': 1}" and rows["odd::pid_dict"]["tid"] == "[2]"
    assert rows["odd::span"]["ts_ns"] == 200 * US and rows["odd::span"]["dur_ns"] == 30 * US
    assert rows["aten::add"]["external_id"] is None
    assert trace.metadata["process_names"] == {"[3]": "odd"}
    assert warnings_of(trace) == {"events of phase '[1]' not modelled (skipped)": 1,
                                  "events of phase \"{'a': 1}\" not modelled (skipped)": 1,
                                  "events of phase 'None' not modelled (skipped)": 1}


def test_lone_surrogate_escapes_are_replaced(tmp_path):
    events = [
        op(0),
        event('"bad\\ud800x"', "300", "10"),  # valid JSON text, but no Unicode string
        event('"smile\\ud83d\\ude00"', "320", "10", args='{"External id": 9, "n": "\\udc00", "e": "\\\\ud800"}'),
        op(1),
    ]
    trace = open_trace(write(tmp_path / "surrogates.json", document(events)), use_cache=False)
    got = names(trace)
    assert got == ["aten::op0", "aten::op1", "bad\ufffdx", "smile\U0001f600"]  # rows are in time order
    assert args_of(trace, 3) == {"External id": 9, "n": "\ufffd", "e": "\\ud800"}
    assert warnings_of(trace) == {UTF8: 2}


def test_non_object_items_in_the_array_are_counted(tmp_path):
    events = [op(0), '"a string"', "[1, 2]", "{}", op(1)]
    trace = open_trace(write(tmp_path / "items.json", document(events)), use_cache=False)
    assert names(trace) == ["aten::op0", "aten::op1"]
    assert warnings_of(trace) == {"array items that are not event objects (dropped)": 2,
                                  "events of phase 'None' not modelled (skipped)": 1}
