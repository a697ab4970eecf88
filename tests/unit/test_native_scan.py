"""The C reader of event chunks (``_scan.c``) and the C nesting walk (``_derive.c``) against the Python paths they
stand in for: on traces built to hit every branch (and every reason to decline a chunk), every table, the
metadata and the warnings must be the same, value for value."""

from __future__ import annotations

import json
import random
import shutil
import sysconfig
from array import array
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest

from opscope.ingest import open_trace
from opscope.ingest.chrome import native, reader
from opscope.model import derive

needs_scan = pytest.mark.skipif(native._scan is None, reason="the C reader (_scan.c) is not built here")
needs_nest = pytest.mark.skipif(derive._derive is None, reason="the C nesting walk (_derive.c) is not built here")


def test_the_extensions_are_built_where_a_compiler_is():
    # setup.py builds them as optional: a silent failure would leave every trace on the slow path
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    headers = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if not shutil.which(compiler) or not headers.exists():
        pytest.skip(f"no C compiler ({compiler}) or no Python headers ({headers}): opscope runs on its Python paths")
    from opscope.analyses import arrays

    assert native._scan is not None and derive._derive is not None and arrays._loops is not None


def _read_both(path: Path, monkeypatch, chunk: int = 1 << 20):
    monkeypatch.setattr(reader, "CHUNK_BYTES", chunk)
    out = []
    for flag in ("0", "1"):
        monkeypatch.setenv("OPSCOPE_NATIVE", flag)
        out.append(open_trace(path, use_cache=False))
    return out


def _same(a, b) -> None:
    for name in ("events", "flows", "counters", "memory", "args", "steps"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.schema == y.schema, name
        assert x.num_rows == y.num_rows, name
        for column in x.column_names:
            u, v = x[column], y[column]
            if pa.types.is_dictionary(u.type):  # dictionaries may list values in another order
                u, v = u.cast(u.type.value_type), v.cast(v.type.value_type)
            assert u.equals(v), f"{name}.{column}: {u.to_pylist()[:8]} != {v.to_pylist()[:8]}"
    assert a.metadata == b.metadata
    assert a.warnings == b.warnings


def _time(rng: random.Random, big: bool):
    base = 1_712_195_495_000_000 if big else 10_000
    choice = rng.random()
    if choice < 0.35:
        return base + rng.randrange(1_000_000)
    if choice < 0.8:
        return round(base + rng.random() * 1e6, rng.choice([1, 3, 4, 6]))
    return float(base + rng.randrange(1_000_000))


NAMES = ["aten::mm", "void at::native::{lambda()#1}, at::Tensor", 'quote "inside"', "tab\there", "slash/\\back",
         "kernel<128>", "", "ProfilerStep#1", "ProfilerStep#2"]
#: What the C reader declines (its chunk takes the Python path): rare, so that most chunks are taken
RARE = {"name": ["caf\u00e9", "\u2603 snow"], "cat": [5], "External id": [2 ** 62], "ts": ["12.5"]}


def _pick(rng: random.Random, field: str, common: list):
    return rng.choice(RARE[field]) if field in RARE and rng.random() < 0.003 else rng.choice(common)


def _event(rng: random.Random, big: bool) -> dict:
    kind = rng.random()
    pid = rng.choice([1, 2, 0, "Spans", 17, "python3", None, 123456789012])
    tid = rng.choice([1, 7, "stream 7", "Trace", 2, None, -3])
    ts = _pick(rng, "ts", [_time(rng, big)])
    if kind < 0.55:
        args = {}
        for key, values in (("External id", [1, 2, 99, None]), ("correlation", [5, 6, None, 2 ** 40]),
                            ("stream", [7, "0x0", " 12 ", "x", None, 0]), ("device", [0, 1, "3", None]),
                            ("Input Dims", [[[8, 3, 224, 224], [64, 3, 7, 7]], [], [[1]], None, "odd", "o d\td"]),
                            ("Input type", [["float", "float"], ["c10::Half"]]),
                            ("Input Strides", [[[150528, 50176, 224, 1]]]), ("Concrete Inputs", [["", "1"]]),
                            ("grid", [[1, 2, 3]]), ("nested", [{"a": [1, {"b": None}]}])):
            if rng.random() < 0.5:
                args[key] = _pick(rng, key, values)
        event = {"ph": "X", "cat": _pick(rng, "cat", ["cpu_op", "kernel", "cuda_runtime", "gpu_memcpy",
                                                      "user_annotation", "python_function", "weird_cat", None]),
                 "name": _pick(rng, "name", NAMES), "pid": pid, "tid": tid,
                 "ts": ts, "dur": rng.choice([rng.randrange(0, 500), round(rng.random() * 300, 3), 0, None, -1])}
        if rng.random() < 0.9:
            event["args"] = args
    elif kind < 0.7:
        event = {"ph": rng.choice("stf"), "id": rng.choice([1, 2, 77, "0x1f", None]),
                 "cat": rng.choice(["ac2g", "fwdbwd", None, 3]), "name": "flow", "pid": pid, "tid": tid, "ts": ts}
    elif kind < 0.88:
        event = {"ph": "i", "s": "t", "name": "[memory]", "pid": pid, "tid": tid, "ts": ts,
                 "args": {"Device Type": rng.choice([0, 1]), "Device Id": rng.choice([-1, 0, 1]),
                          "Addr": rng.randrange(1 << 40), "Bytes": rng.randrange(-4096, 4096),
                          "Total Allocated": rng.randrange(1 << 30), "Total Reserved": rng.randrange(1 << 31)}}
    elif kind < 0.95:
        event = {"ph": "M", "name": rng.choice(["process_name", "thread_name", "process_labels"]), "pid": pid,
                 "tid": tid, "args": {"name": "proc", "labels": "GPU 0"}}
    elif kind < 0.97:
        event = {"ph": "C", "name": "counter", "pid": pid, "ts": ts, "args": {"a": rng.random(), "b": 3}}
    elif kind < 0.997:  # markers: rows after their chunk's complete events, dur 0 whatever they say
        event = {"ph": rng.choice("iIn"), "s": "g", "name": rng.choice(["Iteration Start: PyTorch Profiler",
                                                                          "Record Window End", "mark", None]),
                 "pid": rng.choice(["Traces", "", pid]), "tid": rng.choice(["T", "", tid]), "ts": ts}
        for key, values in (("cat", ["cpu_instant_event", "weird_cat", None]), ("dur", [5, 1.5, "x"]),
                            ("args", [{}, {"correlation": 3, "stream": 7, "Input Dims": [[2, 2]]}])):
            if rng.random() < 0.4:
                event[key] = rng.choice(values)
    else:  # declined: B/E pairs
        event = {"ph": rng.choice("BE"), "name": "range", "pid": pid, "tid": tid, "ts": ts}
    return event


def _write(path: Path, events: list[dict], ascii_only: bool, pretty: bool) -> Path:
    doc = {"schemaVersion": 1, "traceEvents": events}
    path.write_text(json.dumps(doc, ensure_ascii=ascii_only, indent=1 if pretty else None), encoding="utf-8")
    return path


@needs_scan
@pytest.mark.parametrize("seed", range(12))
def test_random_traces_read_the_same_with_and_without_the_c_reader(tmp_path, monkeypatch, seed):
    rng = random.Random(seed)
    big = seed % 3 == 0  # epoch-scale float times: exact from their text
    events = [_event(rng, big) for _ in range(1500)]
    path = _write(tmp_path / "t.json", events, ascii_only=seed % 2 == 0, pretty=seed % 4 < 2)
    taken = _count_taken(monkeypatch)
    python, c = _read_both(path, monkeypatch, chunk=rng.choice([1024, 4096, 8192]))
    _same(python, c)
    assert taken["yes"] >= 5 and taken["no"] >= 1, taken  # both paths ran, chunk after chunk


def _count_taken(monkeypatch) -> dict:
    """How many chunks the C reader took and declined (cut candidates that fail included)."""
    counts = {"yes": 0, "no": 0}
    real = native._scan.Scanner

    class Counting:
        def __init__(self) -> None:
            self._scanner = real()
            self.pending, self.take = self._scanner.pending, self._scanner.take

        def feed_items(self, buffer: bytes, start: int, end: int):
            kept = self._scanner.feed_items(buffer, start, end)
            counts["yes" if kept is not None else "no"] += 1
            return kept

    monkeypatch.setattr(native._scan, "Scanner", Counting)
    return counts


@needs_scan
def test_common_chunks_are_taken_by_the_c_reader_and_odd_ones_declined(monkeypatch):
    scanner = native._scan.Scanner()
    ok = b'[{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":1.5,"dur":2,"args":{"stream":7}},' \
         b'{"ph":"M","name":"process_name","pid":0,"args":{"name":"x"}}]'
    rest, exact = scanner.feed(ok)
    assert json.loads(rest) == [{"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "x"}}]
    assert exact is False and scanner.pending() == 1
    for declined in (b'[{"ph":"X","name":"caf\xc3\xa9","ts":1,"dur":1}]',  # UTF-8: the Python path checks it
                     b'[{"ph":"X","name":"\\u00e9","ts":1,"dur":1}]',  # \u escapes
                     b'[{"ph":"X","ph":"X","ts":1,"dur":1}]',  # a repeated key (msgspec keeps the last)
                     b'[{"ph":"B","name":"b","ts":1}]',  # B/E pairs
                     b'[{"ph":"X","ts":"1","dur":1}]',  # a time as text
                     b'[{"ph":"X","ts":1,"dur":1,"args":{"correlation":1.5}}]',  # a fractional id
                     b'[{"ph":"X","ts":1,"dur":1}',  # not closed
                     b'[{"ph":"X","ts":1,"dur":1},]',  # a trailing comma
                     b'[{"ph":"X","ts":01,"dur":1}]',  # not JSON
                     b'[{"ph":"X","ts":1,"dur":1,"args":' + b'[' * 80 + b']' * 80 + b'}]'):  # deeper than handled
        # a chunk that pushes rows before it is declined leaves nothing behind
        assert scanner.feed(b'[{"ph":"X","ts":5,"dur":1},' + declined[1:]) is None, declined
        assert scanner.pending() == 1, declined
    # the items alone, where they lie in a larger buffer (the stream's, between two cuts)
    buffer = b'xx{"ph":"X","ts":5,"dur":1} , {"ph":"X","ts":6,"dur":1}yy'
    assert scanner.feed_items(buffer, 2, len(buffer) - 2) == (None, False) and scanner.pending() == 3
    assert scanner.feed_items(buffer, 2, len(buffer) - 1) is None and scanner.pending() == 3
    with pytest.raises(ValueError):
        scanner.feed_items(buffer, 5, 2)
    columns = native.NativeBatch(scanner.take())
    assert columns.rows == 3 and columns.ints("ts_ns", 3).to_pylist() == [1500, 5000, 6000]
    assert columns.ints("stream", 1).to_pylist() == [7] and columns.texts("tid", 1).to_pylist() == ["7"]
    assert scanner.pending() == 0


@needs_scan
@pytest.mark.parametrize("text", ["0.0005", "1.0005", "2.5e-3", "123456789.123456789", "1e22", "1E+2", "-0.0",
                                  "9007199254740993.5", "0.1", "4398046511103.9995", "1712195495519689.047",
                                  "-1712195495519689.0005", "1712195495519689.0015", "1.7976931348623157e308",
                                  "5e-324", "123.4567890123456789"])
def test_float_times_as_python_reads_them(text):
    # plain: round(float(text) * 1000) half to even (the Python path's pyarrow/round); with a float time of
    # 2**42 us or more in the chunk: Decimal(text) * 1000, to the nearest integer, half to even
    scanner = native._scan.Scanner()
    chunk = (f'[{{"ph":"X","ts":{text},"dur":{text}}}]').encode()
    kept = scanner.feed(chunk)
    value = float(text)
    exact = abs(value) >= 2.0 ** 42
    assert kept is not None and kept[1] is exact
    got = native.NativeBatch(scanner.take()).ints("ts_ns", 1).to_pylist()[0]
    want = int((Decimal(text) * 1000).to_integral_value()) if exact else round(value * 1000)
    want = want if -(2 ** 63 - 1) <= want <= 2 ** 63 - 1 else None
    assert got == want


@needs_nest
@pytest.mark.parametrize("seed", range(6))
def test_the_c_nesting_walk_is_the_python_one(seed):
    rng = random.Random(seed)
    n = 3000
    rows = list(range(n))
    threads = sorted(rng.randrange(4) for _ in range(n))
    ts, dur = [], []
    for i in range(n):
        ts.append((ts[-1] if i and threads[i] == threads[i - 1] else 0) + rng.randrange(0, 5))
        dur.append(rng.choice([0, 1, 3, 10, 50, 200]))
    order = sorted(range(n), key=lambda i: (threads[i], ts[i], -dur[i]))
    cols = [array("q", [v[i] for i in order]) for v in (rows, threads, ts, dur)]
    keep = bytes(rng.choice([0, 1, 2]) for _ in range(n)) if seed % 2 else None
    results = []
    for walk in (derive._nest_sorted, derive._derive.nest_sorted):
        parent, depth, self_ns = array("q", [-1]) * n, array("i", [0]) * n, array("q", dur)
        overlapping = walk(*(memoryview(c) for c in cols), parent, depth, self_ns, keep)
        results.append((overlapping, parent.tolist(), depth.tolist(), self_ns.tolist()))
    assert results[0] == results[1]
    assert results[0][0] > 0  # partly overlapping events were walked too


@needs_nest
@pytest.mark.parametrize(("seed", "n_steps"), [(0, 5), (1, 40), (2, 700), (3, 3)])
def test_the_c_step_lookup_follows_both_python_rules(monkeypatch, seed, n_steps):
    # up to _MASK_STEP_LIMIT steps: the last step (in order) running at the event's start; beyond: the step that
    # starts last before it, if still running. Overlapping and tied steps make the two differ.
    rng = random.Random(seed)
    starts = sorted(rng.randrange(0, 10_000) for _ in range(n_steps))
    steps = pa.table({"step": pa.array(range(n_steps), pa.int64()),
                      "name": [f"ProfilerStep#{i}" for i in range(n_steps)], "pid": ["1"] * n_steps,
                      "tid": ["1"] * n_steps, "ts_ns": pa.array(starts, pa.int64()),
                      "dur_ns": pa.array([rng.choice([0, 5, 50, 400]) for _ in range(n_steps)], pa.int64())})
    n = 5000
    events = pa.table({"ts_ns": pa.array(sorted(rng.randrange(-100, 10_500) for _ in range(n)), pa.int64()),
                       "kind": pa.array([rng.choice(["cpu_op", "runtime", "kernel"])
                                         for _ in range(n)]).dictionary_encode(),
                       "correlation": pa.array([rng.choice([None, 1, 2, 3, 4]) for _ in range(n)], pa.int64()),
                       "stream": pa.array([rng.choice([None, 7]) for _ in range(n)], pa.int64())})
    got = []
    for flag in ("0", "1"):
        monkeypatch.setenv("OPSCOPE_NATIVE", flag)
        got.append(derive.assign_steps(events, steps))
    assert got[0].equals(got[1])
    assert got[1].null_count < n  # events fell in steps


@needs_scan
def test_the_scanning_thread_stops_when_the_reader_fails(tmp_path, monkeypatch):
    # the C reader's chunks are cut and scanned on a thread; an error while the rows are turned into tables is
    # raised to the caller and the thread ends (it does not stay blocked on its queue)
    import threading

    from opscope.ingest.chrome import columns as columns_module

    events = [{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1}
              for i in range(20_000)]
    path = _write(tmp_path / "t.json", events, ascii_only=True, pretty=False)
    monkeypatch.setattr(reader, "CHUNK_BYTES", 4096)
    monkeypatch.setattr(native, "TAKE_ROWS", 16)
    monkeypatch.setattr(reader, "TAKE_ROWS", 16)

    def fail(self, batch):
        raise RuntimeError("boom")

    monkeypatch.setattr(columns_module.EventColumns, "add_native", fail)
    with pytest.raises(RuntimeError, match="boom"):
        reader.read(path)
    assert not [t for t in threading.enumerate() if t.name == "opscope-scan"]


@needs_nest
@pytest.mark.parametrize(("seed", "tensorflow"), [(0, False), (1, True), (2, False)])
def test_the_c_layer_walk_nests_as_derive_nest_does(monkeypatch, seed, tensorflow):
    # derive.nest per layer: the Python path sorts each layer's rows by thread and walks them; the C walk keeps one
    # stack per thread in table order. Threads interleave, events overlap partly, GPU rows (a stream) stay out.
    rng = random.Random(seed)
    n = 6000
    rows = []
    for _ in range(n):
        ts = rng.randrange(0, 20_000)
        rows.append((ts, rng.choice([0, 1, 2, 5, 30, 300, 2000])))
    rows.sort(key=lambda r: (r[0], -r[1]))
    events = pa.table({
        "ts_ns": pa.array([r[0] for r in rows], pa.int64()),
        "dur_ns": pa.array([r[1] for r in rows], pa.int64()),
        "kind": pa.array([rng.choice(["cpu_op", "runtime", "python", "kernel", "user_annotation"])
                          for _ in range(n)]).dictionary_encode(),
        "pid": pa.array([rng.choice(["1", "2", "7"]) for _ in range(n)]).dictionary_encode(),
        "tid": pa.array([rng.choice(["1", "9", "10", "11"]) for _ in range(n)]).dictionary_encode(),
        "stream": pa.array([rng.choice([None, None, None, 7]) for _ in range(n)], pa.int64()),
    })
    got = []
    for flag in ("0", "1"):
        monkeypatch.setenv("OPSCOPE_NATIVE", flag)
        got.append(derive.nest(events, runtime_is_op_time=tensorflow))
    (p0, d0, s0, o0), (p1, d1, s1, o1) = got
    assert p0.equals(p1) and d0.equals(d1) and s0.equals(s1) and o0 == o1
    assert o1 > 0 and p1.null_count < n  # nested and partly overlapping events were walked


def _splitting(monkeypatch, split_bytes: int) -> list:
    """Every Scanner the reader makes reads chunks of ``split_bytes`` or more as two halves at once; returns them."""
    made = []
    real = native._scan.Scanner

    def make():
        made.append(real(split_bytes=split_bytes))
        return made[-1]

    monkeypatch.setattr(native._scan, "Scanner", make)
    return made


@needs_scan
@pytest.mark.parametrize("seed", range(10))
def test_chunks_read_as_two_halves_give_the_same_tables(tmp_path, monkeypatch, seed):
    # the halves meet at an item boundary near the middle; where that candidate lies inside a string ("}, {" in
    # a name) or a half declines, the chunk is read whole: either way the rows, their order and the exact-time rule
    # (decided for the whole chunk) are those of the Python path
    rng = random.Random(1000 + seed)
    big = seed % 3 == 0
    events = [_event(rng, big) for _ in range(1500)]
    for e in events[::40]:
        e["name"] = rng.choice(['x}, {"ph": "X"', "}, {", "a},\n {b"])  # candidates inside strings
    path = _write(tmp_path / "t.json", events, ascii_only=seed % 2 == 0, pretty=seed % 4 < 2)
    made = _splitting(monkeypatch, 1)
    python, c = _read_both(path, monkeypatch, chunk=rng.choice([2048, 4096, 8192]))  # most chunks taken
    _same(python, c)
    assert sum(s.splits() for s in made) >= 3  # chunks were read in two halves


@needs_scan
def test_the_exact_time_rule_covers_both_halves(tmp_path, monkeypatch):
    # an epoch-scale float time in the first half makes the whole chunk read float times from their text: a time in
    # the second half whose float rounds differently ("533249.85550" us: 533249855 as a float, 533249856 exactly)
    events = [{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": 1712195495519689.5 + i,
               "dur": 1} for i in range(40)]
    events += [{"ph": "X", "cat": "cpu_op", "name": f"late{i}", "pid": 1, "tid": 2, "ts": "533249.85550",
                "dur": 2} for i in range(40)]
    text = json.dumps({"traceEvents": events}).replace('"533249.85550"', "533249.85550")
    path = tmp_path / "t.json"
    path.write_text(text)
    made = _splitting(monkeypatch, 1)
    python, c = _read_both(path, monkeypatch, chunk=1 << 20)  # one chunk
    _same(python, c)
    assert sum(s.splits() for s in made) >= 1  # (reading the args again for the comparison splits it again)
    late = c.events.filter(pa.compute.starts_with(c.events["name"].cast(pa.string()), "late"))
    assert set(late["ts_ns"].to_pylist()) == {533249856}  # exactly, not the float's 533249855


@needs_scan
def test_halves_whose_times_need_cpythons_conversion_read_as_the_whole_chunk():
    # 16-17 significant digits: past the fast path, converted by CPython under the GIL, which the helper thread of
    # the second half takes for itself
    rng = random.Random(5)
    items = ", ".join(f'{{"ph": "X", "cat": "cpu_op", "name": "op{i}", "pid": 1, "tid": 1, '
                      f'"ts": {rng.random() * 1e6!r}, "dur": {rng.random() * 100!r}}}' for i in range(3000)).encode()
    split, whole = native._scan.Scanner(split_bytes=1), native._scan.Scanner(split_bytes=0)
    assert split.feed_items(items, 0, len(items)) == whole.feed_items(items, 0, len(items)) == (None, False)
    assert (split.splits(), whole.splits()) == (1, 0)
    assert split.take() == whole.take()


@needs_scan
def test_markers_are_taken_and_follow_their_chunks_complete_events(monkeypatch):
    """Instant markers are rows of kind marker with dur 0 (whatever the event says), after the complete events of
    their chunk, as the Python path orders them; a marker of TF's Op category is still declined."""
    scanner = native._scan.Scanner()
    chunk = b'[{"ph":"i","s":"g","name":"Iteration Start","pid":"Traces","tid":"T","ts":2,"dur":9},' \
            b'{"ph":"X","cat":"cpu_op","name":"op","pid":1,"tid":1,"ts":1,"dur":4},' \
            b'{"ph":"n","name":"end","pid":"","tid":"","ts":3.5,"cat":"weird"}]'
    assert scanner.feed(chunk) == (None, False)
    assert scanner.feed(b'[{"ph":"X","cat":"cpu_op","name":"next","pid":1,"tid":1,"ts":5,"dur":1}]') == (None, False)
    batch = native.NativeBatch(scanner.take())
    assert (batch.rows, batch.markers) == (4, 2)
    assert batch.texts("name", 4).to_pylist() == ["op", "Iteration Start", "end", "next"]
    assert batch.ints("marker", 4).to_pylist() == [0, 1, 1, 0]
    assert batch.ints("dur_ns", 4).to_pylist() == [4000, 0, 0, 1000]
    assert batch.ints("ts_ns", 4).to_pylist() == [1000, 2000, 3500, 5000]
    assert batch.texts("pid", 4).to_pylist() == ["1", "Traces", "", "1"]
    assert scanner.feed(b'[{"ph":"i","cat":"Op","name":"m","pid":1,"tid":1,"ts":2}]') is None  # TF's ops: Python
