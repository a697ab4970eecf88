"""Turn decoded Chrome trace-event structs into batches of the model's rows, batch by batch.

Maps phases and categories to the model (slices, instants, flows, counters, ``[memory]`` records, metadata
events, B/E pairs) and hands typed columns to the :class:`~opscope.model.builder.TraceBuilder`, which
makes the tables. Each batch becomes Arrow arrays right away so that the Python objects of a batch are
freed before the next one is decoded: memory stays near the size of the columns, not of the JSON.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from typing import Any

import msgspec
import pyarrow as pa
import pyarrow.compute as pc

from opscope.categories import CATEGORY_KINDS
from opscope.ingest.chrome import tensorflow
from opscope.ingest.chrome.native import NativeBatch
from opscope.ingest.numbers import int64, text_int64
from opscope.model import Trace
from opscope.model.builder import TraceBuilder, as_int, id_array, int_array, safe_str, str_array
from opscope.model.ranges import arange
from opscope.model.schema import COUNTERS


class ArgsView(msgspec.Struct, gc=False):
    """The ``args`` keys the model lifts into columns; the full args stay as JSON text."""

    correlation: Any = None
    external_id: Any = msgspec.field(default=None, name="External id")
    external_id_legacy: Any = msgspec.field(default=None, name="external id")
    stream: Any = None
    device: Any = None
    input_dims: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Input Dims")
    input_type: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Input type")
    input_strides: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Input Strides")
    concrete_inputs: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Concrete Inputs")
    name: Any = None
    labels: Any = None
    device_type: Any = msgspec.field(default=None, name="Device Type")
    device_id: Any = msgspec.field(default=None, name="Device Id")
    addr: Any = msgspec.field(default=None, name="Addr")
    bytes: Any = msgspec.field(default=None, name="Bytes")
    total_allocated: Any = msgspec.field(default=None, name="Total Allocated")
    total_reserved: Any = msgspec.field(default=None, name="Total Reserved")


_decode_args_batch = msgspec.json.Decoder(list[ArgsView | None]).decode
_decode_args_one = msgspec.json.Decoder(ArgsView | None).decode
_EMPTY_ARGS = ArgsView()

_GPU_KIND_ARRAY = pa.array(["kernel", "memcpy", "memset", "sync", "gpu_annotation"], pa.string())
_FLOAT_EXACT_LIMIT_US = float(2 ** 42)
#: Put in an event's ``s`` slot once its ts/dur hold exact ns; no JSON value can be this object.
EXACT_NS = object()
_FLOW_PHASES = {"s", "t", "f"}
_INSTANT_PHASES = {"i", "I", "n"}
_STREAM_RE = re.compile(r"(?:stream\s*|^)(\d+)$", re.IGNORECASE)
_INT64_MAX = (1 << 63) - 1
_TF_OP_CATEGORY = "Op"  # TF timelines' one category
#: Names longer than this are cut (hostile input): the longest in real traces (templated C++ kernel
#: names) are ~5 KB; a 50 MB name would be copied into every table and report that shows it.
MAX_NAME_BYTES = 64 << 10


def text_to_ns(text: str | bytes) -> int | None:
    """Microseconds written as text (``"1712195495519689.047"``, ``"1e-06"``) -> exact integer ns, or None."""
    return text_int64(text, 1000)


def to_ns(v: Any) -> int | None:
    """A ts/dur value in microseconds (int, float or numeric text) -> integer ns, or None (not a number, not
    finite, beyond int64: :mod:`opscope.ingest.numbers` counts it)."""
    return int64(v, 1000)


def _to_ns_checked(v: Any) -> int | None:
    ns = to_ns(v)
    return ns if ns is not None and -_INT64_MAX <= ns <= _INT64_MAX else None


def set_exact_times(e: Any, ts_text: bytes, dur_text: bytes) -> None:
    """Replace a float ``ts``/``dur`` by the exact ns of their original text and mark ``e`` as converted."""
    e.ts = text_to_ns(ts_text)
    e.dur = text_to_ns(dur_text) if dur_text else None
    e.s = EXACT_NS


def _ns(e: Any, v: Any) -> int | None:
    """One of ``e``'s time values -> int64 ns (null when unusable), whether or not it is already ns."""
    if e.s is EXACT_NS:
        return v if v.__class__ is int and -_INT64_MAX <= v <= _INT64_MAX else None
    return _to_ns_checked(v)


def _utf8_replaced(raw: Any) -> bytes | None:
    """``raw`` with invalid UTF-8 replaced by U+FFFD, or None when it was valid UTF-8 already.

    msgspec reports invalid UTF-8 as UnicodeDecodeError up to 0.22 and as a plain DecodeError from 0.23, so the
    bytes themselves decide whether a retry can help.
    """
    data = bytes(raw)
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("utf-8", "replace").encode("utf-8")
    return None


def _decode_lenient(decode: Callable[[Any], Any], raw: Any) -> Any:
    """``decode(raw)``, retried once with invalid UTF-8 replaced; None when it cannot be read."""
    try:
        return decode(raw)
    except (ValueError, RecursionError):  # msgspec's errors (invalid UTF-8 among them) are ValueErrors
        pass
    repaired = _utf8_replaced(raw)
    if repaired is None:
        return None
    try:
        return decode(repaired)
    except (ValueError, RecursionError):
        return None


def _decode_args_item(raw: Any) -> ArgsView | None:
    """One event's args; invalid UTF-8 is replaced, anything else unreadable gives None."""
    return _decode_lenient(_decode_args_one, raw) if raw else None


def _decode_json_lenient(raw: Any) -> Any:
    """A JSON value (counter args); invalid UTF-8 replaced; None when unreadable."""
    return _decode_lenient(msgspec.json.decode, raw)


def cap_names(names: pa.DictionaryArray) -> tuple[pa.DictionaryArray, int]:
    """Cut names longer than MAX_NAME_BYTES (UTF-8) and count the rows cut.

    Checked on the dictionary (the distinct names), so the usual case costs one pass over a few values.
    """
    dictionary = names.dictionary
    if len(dictionary) == 0:
        return names, 0
    lengths = pc.binary_length(dictionary)
    if pc.max(lengths).as_py() <= MAX_NAME_BYTES:
        return names, 0
    long = pc.greater(lengths, MAX_NAME_BYTES)
    # the longest prefix of whole characters that fits (a cut inside a UTF-8 sequence drops its bytes)
    cut = pa.array([v.encode()[:MAX_NAME_BYTES].decode("utf-8", "ignore") if is_long else v
                    for v, is_long in zip(dictionary.to_pylist(), long.to_pylist())], pa.string())
    rows = pc.sum(pc.take(long, names.indices)).as_py() or 0
    return pa.DictionaryArray.from_arrays(names.indices, cut), rows


def _raw_array(raws: list) -> pa.Array:
    """Raw JSON fragments -> string array (null where absent), invalid UTF-8 replaced."""
    return _raw_array_counted(raws)[0]


def _raw_array_counted(raws: list) -> tuple[pa.Array, int]:
    """Raw JSON fragments -> (string array with null where absent, how many held invalid UTF-8).

    Built from one joined buffer and an offsets array: no Python object per value.
    """
    lengths = pa.array([len(r) for r in raws], pa.int64())
    data = b"".join(raws)
    offsets = pc.cumulative_sum(pa.concat_arrays([pa.array([0], pa.int64()), lengths]))
    binary = pa.LargeBinaryArray.from_buffers(pa.large_binary(), len(raws),
                                              [None, offsets.buffers()[1], pa.py_buffer(data)])
    invalid = 0
    try:
        text = binary.cast(pa.large_string())
    except (pa.ArrowInvalid, UnicodeError):
        values = []
        for r in raws:
            b = bytes(r)
            try:
                values.append(b.decode("utf-8") if b else None)
            except UnicodeDecodeError:
                values.append(b.decode("utf-8", "replace"))
                invalid += 1
        text = pa.array(values, pa.large_string())
    text = pc.if_else(pc.equal(lengths, 0), pa.scalar(None, pa.large_string()), text).cast(pa.string())
    return text, invalid


class EventColumns:
    """Turns batches of decoded events into the model's rows, handed to ``builder`` as typed columns."""

    def __init__(self, builder: TraceBuilder, keep_args: bool = True, categories: dict[str, str] | None = None) -> None:
        self.builder = builder
        self.keep_args = keep_args
        #: category (lower-cased) -> kind: Chrome's, and a format's own on top (ONNX Runtime's ``Node``...)
        self._categories = {**CATEGORY_KINDS, **{k.lower(): v for k, v in (categories or {}).items()}}
        self._counters: dict[str, list] = {k: [] for k in COUNTERS.names}
        self._open_begins: dict[tuple, list] = {}
        self._kind_cache: dict[Any, str] = {}
        self._id_cache: dict[Any, str] = {}
        self.process_names: dict[str, str] = {}
        self.thread_names: dict[str, str] = {}
        self.process_labels: dict[str, str] = {}
        self.unknown_categories: Counter = Counter()
        self.unknown_phases: Counter = Counter()
        self.invalid_utf8_args: int = 0
        self.names_cut: int = 0
        self.bad_correlations: int = 0
        # TF timelines name each event's graph node in args.name: kept (by event id) to link device rows to ops.
        self._nodes: list[tuple[pa.Array, pa.Array]] = []

    # -- helpers ------------------------------------------------------------
    def _kind(self, cat: Any) -> str:
        k = self._kind_cache.get(cat)
        if k is None:
            key = cat.lower() if isinstance(cat, str) else ""
            k = self._categories.get(key)
            if k is None:
                k = "other"
            self._kind_cache[cat] = k
        return k

    def _id(self, v: Any) -> str:
        if v.__class__ is list or v.__class__ is dict:
            return safe_str(v)  # an odd writer's pid/tid: usable as text, not as a cache key
        s = self._id_cache.get(v)
        if s is None:
            s = self._id_cache[v] = safe_str(v) if v is not None else ""
        return s

    def _args(self, raws: list) -> list:
        joined = b"[" + b",".join([r if r else b"null" for r in raws]) + b"]"
        try:
            return _decode_args_batch(joined)
        except (ValueError, RecursionError):  # msgspec errors and invalid UTF-8 are ValueErrors
            return [_decode_args_item(r) for r in raws]

    # -- batches ----------------------------------------------------------
    def add_batch(self, events: list, exact: list | None = None) -> None:
        """Append one decoded batch. ``exact`` holds the original time text when floats are too coarse."""
        if exact is not None:
            for e, x in zip(events, exact):
                if e.ts.__class__ is float:
                    set_exact_times(e, bytes(x.ts), bytes(x.dur))
        slices: list = []
        instants: list = []
        flows: list = []
        rest: list = []
        for e in events:
            ph = e.ph
            if ph == "X":
                slices.append(e)
            elif ph.__class__ is not str:
                rest.append(e)  # null, a number or a list: counted below as a phase not modelled
            elif ph in _FLOW_PHASES:
                flows.append(e)
            elif ph in _INSTANT_PHASES:
                instants.append(e)
            else:
                rest.append(e)
        markers: list = []
        if instants:
            memory = [e for e in instants if e.name == "[memory]"]
            if memory:
                self._memory_events(memory)
            if len(memory) != len(instants):
                markers = [e for e in instants if e.name != "[memory]"]
        if flows:
            self._flow_events(flows)
        extra: list = []
        for e in rest:
            ph = e.ph
            if ph == "M":
                self._metadata_event(e)
            elif ph == "C":
                self._counter_event(e)
            elif ph == "B" or ph == "E":
                done = self._begin_end(e)
                if done is not None:
                    extra.append(done)
            else:
                self.unknown_phases[safe_str(ph)] += 1
        if extra:
            slices.extend(extra)
        if slices or markers:
            self._emit(slices, markers)

    def _kinds_of(self, cat_arr: pa.DictionaryArray, is_marker: pa.Array | None = None) -> pa.Array:
        """Map each distinct category to a kind once; rows where ``is_marker`` are instant markers (kind marker,
        whatever their category; their categories are not counted as unknown)."""
        values = cat_arr.dictionary.to_pylist()
        kinds = [self._kind(v) for v in values]
        # A slice without a category is host work (plain Chrome / XProf traces).
        null_kind = "cpu_op"
        codes = cat_arr.indices
        if "other" in kinds:
            slices = codes if is_marker is None else pc.filter(codes, pc.invert(is_marker))
            counts = pc.value_counts(slices).to_pylist()
            for item in counts:
                code = item["values"]
                if code is not None and kinds[code] == "other":
                    self.unknown_categories[safe_str(values[code])] += item["counts"]
        # two categories may be one kind: derive.complete makes the dictionary list each value once
        all_kinds = pa.array(kinds + [null_kind, "marker"], pa.string())
        idx = pc.fill_null(codes, len(kinds))
        if is_marker is not None:
            idx = pc.if_else(is_marker, len(kinds) + 1, pc.cast(idx, pa.int64()))
        return pa.DictionaryArray.from_arrays(pc.cast(idx, pa.int32()), all_kinds)

    def _times(self, values: list, exact_mode: bool) -> pa.Array:
        """Microsecond values (any JSON type) -> int64 ns array; nulls where unusable."""
        try:
            arr = pa.array(values)  # inferred: int64 when all ints, double when ints and floats mix
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
            arr = None
        if arr is not None and pa.types.is_integer(arr.type):
            try:
                return pc.multiply_checked(arr.cast(pa.int64()), 1000)
            except (pa.ArrowInvalid, OverflowError):
                pass
        elif arr is not None and pa.types.is_floating(arr.type) and not exact_mode:
            ok = pc.less(pc.abs(arr), _FLOAT_EXACT_LIMIT_US)
            if pc.all(ok).as_py() is not False:
                ns = pc.round(pc.multiply(arr, 1000.0))
                return pc.cast(pc.if_else(pc.is_finite(ns), ns, None), pa.int64())
        return pa.array([_to_ns_checked(v) for v in values], pa.int64())

    def _ts_array(self, events: list) -> pa.Array:
        """The ``ts`` of events of any phase -> int64 ns, exact where the reader converted them."""
        if any(e.s is EXACT_NS for e in events):
            return pa.array([_ns(e, e.ts) for e in events], pa.int64())
        return self._times([e.ts for e in events], False)

    def _emit(self, slices: list, markers: list) -> None:
        if markers:
            for m in markers:
                m.dur = 0
            slices = slices + markers
        exact_mode = any(e.s is EXACT_NS for e in slices)
        n = len(slices)
        cats = [e.cat for e in slices]
        cat_arr = str_array(cats)
        kind_arr = self._kinds_of(cat_arr, pc.greater_equal(arange(0, n), n - len(markers)) if markers else None)
        if exact_mode:
            ts = pa.array([_ns(e, e.ts) for e in slices], pa.int64())
            dur = pa.array([_ns(e, e.dur) for e in slices], pa.int64())
        else:
            ts = self._times([e.ts for e in slices], False)
            dur = self._times([e.dur for e in slices], False)
        raws = [e.args for e in slices]
        args = [a if a is not None else _EMPTY_ARGS for a in self._args(raws)]
        is_gpu = pc.is_in(kind_arr.dictionary, _GPU_KIND_ARRAY).take(kind_arr.indices)
        stream = int_array([a.stream for a in args])
        device = int_array([a.device for a in args])
        pids = [e.pid for e in slices]
        tids = [e.tid for e in slices]
        if pc.any(is_gpu).as_py():
            missing = pc.and_(is_gpu, pc.is_null(stream))
            if pc.any(missing).as_py():
                # a pid/tid beyond int64 (hostile) is no device or stream: as_int drops it, pa.array would overflow
                stream = pa.array([(as_int(t) if t.__class__ is int else _stream_from_text(t)) if m else s
                                   for m, s, t in zip(missing.to_pylist(), stream.to_pylist(), tids)],
                                  pa.int64())
            missing = pc.and_(is_gpu, pc.is_null(device))
            if pc.any(missing).as_py():
                device = pa.array([(as_int(p) if p.__class__ is int else None) if m else d
                                   for m, d, p in zip(missing.to_pylist(), device.to_pylist(), pids)],
                                  pa.int64())
        none = pa.nulls(n, pa.int64())
        stream = pc.if_else(is_gpu, stream, none)
        device = pc.if_else(is_gpu, device, none)
        ext = int_array([a.external_id if a.external_id is not None else a.external_id_legacy
                          for a in args])
        shapes = pc.replace_substring_regex(_raw_array([a.input_dims for a in args]), r"\s+", "")
        names, cut = cap_names(str_array([e.name for e in slices]))
        self.names_cut += cut
        given_correlations = [a.correlation for a in args]
        correlation = int_array(given_correlations)
        # an id that is not an integer within int64 is left null; counted here, said in finish()
        self.bad_correlations += correlation.null_count - given_correlations.count(None)
        columns = {
            "kind": kind_arr,
            "name": names,
            "cat": cat_arr,
            "ts_ns": ts,
            "dur_ns": dur,
            "pid": id_array(pids),
            "tid": id_array(tids),
            "device": device,
            "stream": stream,
            "correlation": correlation,
            "external_id": ext,
            "shapes": shapes,
            "dtypes": _raw_array([a.input_type for a in args]),
            "strides": _raw_array([a.input_strides for a in args]),
            "concrete_inputs": _raw_array([a.concrete_inputs for a in args]),
        }
        # Converted even when not kept: invalid UTF-8 in args is counted (and warned about) either way.
        args_text, invalid_utf8 = _raw_array_counted(raws)
        self.invalid_utf8_args += invalid_utf8
        ids = self.builder.add_events(columns, args_text if self.keep_args else None)
        if _TF_OP_CATEGORY in cat_arr.dictionary.to_pylist():
            node = pa.array([a.name if a.name.__class__ is str else None for a in args], pa.string())
            has = pc.and_(pc.is_valid(ids), pc.is_valid(node))
            self._nodes.append((pc.filter(ids, has), pc.filter(node, has)))

    def add_native(self, batch: NativeBatch) -> None:
        """Append the rows the C reader held (``native.py``): the same rows :meth:`add_batch` makes of them."""
        if batch.memory:
            n = batch.memory
            self.builder.add_memory({
                "ts_ns": batch.ints("memory_ts_ns", n),
                "pid": pc.fill_null(batch.texts("memory_pid", n), "").dictionary_encode(),
                "tid": pc.fill_null(batch.texts("memory_tid", n), "").dictionary_encode(),
                **{c: batch.ints(c, n) for c in ("device_type", "device_id", "addr", "bytes", "total_allocated",
                                                 "total_reserved")},
            })
        if batch.flows:
            n = batch.flows
            self.builder.add_flows({
                "id": pc.fill_null(batch.texts("flow_id", n), ""),
                "cat": batch.texts("flow_cat", n).dictionary_encode(),
                "phase": batch.texts("flow_phase", n).dictionary_encode(),
                "ts_ns": batch.ints("flow_ts_ns", n),
                "pid": pc.fill_null(batch.texts("flow_pid", n), "").dictionary_encode(),
                "tid": pc.fill_null(batch.texts("flow_tid", n), "").dictionary_encode(),
            })
        if batch.rows:
            self._emit_native(batch)

    def _emit_native(self, batch: NativeBatch) -> None:
        n = batch.rows
        cat_arr = batch.texts("cat", n).dictionary_encode()
        # instant markers follow each chunk's complete events, as in add_batch
        is_marker = pc.not_equal(batch.ints("marker", n), 0) if batch.markers else None
        kind_arr = self._kinds_of(cat_arr, is_marker)
        is_gpu = pc.is_in(kind_arr.dictionary, _GPU_KIND_ARRAY).take(kind_arr.indices)
        stream = batch.ints("stream", n)
        device = batch.ints("device", n)
        tids = batch.texts("tid", n)
        if pc.any(is_gpu).as_py():
            missing = pc.and_(is_gpu, pc.is_null(stream))
            if pc.any(missing).as_py():
                # as the Python path: an int tid is the stream, a text tid may name it ("stream 7")
                from_text = [_stream_from_text(t) if m and t is not None else None
                             for m, t in zip(missing.to_pylist(), tids.to_pylist())]
                tid_stream = pc.coalesce(batch.ints("tid_int", n), pa.array(from_text, pa.int64()))
                stream = pc.if_else(missing, tid_stream, stream)
            missing = pc.and_(is_gpu, pc.is_null(device))
            if pc.any(missing).as_py():
                device = pc.if_else(missing, batch.ints("pid_int", n), device)
        none = pa.nulls(n, pa.int64())
        names, cut = cap_names(batch.texts("name", n).dictionary_encode())
        self.names_cut += cut
        columns = {
            "kind": kind_arr,
            "name": names,
            "cat": cat_arr,
            "ts_ns": batch.ints("ts_ns", n),
            "dur_ns": batch.ints("dur_ns", n),
            "pid": pc.fill_null(batch.texts("pid", n), "").dictionary_encode(),
            "tid": pc.fill_null(tids, "").dictionary_encode(),
            "device": pc.if_else(is_gpu, device, none),
            "stream": pc.if_else(is_gpu, stream, none),
            "correlation": batch.ints("correlation", n),
            "external_id": batch.ints("external_id", n),
            "shapes": batch.texts("shapes", n),  # without blanks, as _emit's regex leaves them
            "dtypes": batch.texts("dtypes", n),
            "strides": batch.texts("strides", n),
            "concrete_inputs": batch.texts("concrete_inputs", n),
        }
        self.builder.add_events(columns, batch.texts("args", n) if self.keep_args else None)

    def _flow_events(self, flows: list) -> None:
        self.builder.add_flows({
            "id": id_array([e.id for e in flows]).cast(pa.string()),
            "cat": str_array([e.cat if isinstance(e.cat, str) else None for e in flows]),
            "phase": str_array([e.ph for e in flows]),
            "ts_ns": self._ts_array(flows),
            "pid": id_array([e.pid for e in flows]),
            "tid": id_array([e.tid for e in flows]),
        })

    def _memory_events(self, events: list) -> None:
        args = [a if a is not None else _EMPTY_ARGS for a in self._args([e.args for e in events])]
        self.builder.add_memory({
            "ts_ns": self._ts_array(events),
            "pid": id_array([e.pid for e in events]),
            "tid": id_array([e.tid for e in events]),
            "device_type": int_array([a.device_type for a in args]),
            "device_id": int_array([a.device_id for a in args]),
            "addr": int_array([a.addr for a in args]),
            "bytes": int_array([a.bytes for a in args]),
            "total_allocated": int_array([a.total_allocated for a in args]),
            "total_reserved": int_array([a.total_reserved for a in args]),
        })

    def _begin_end(self, e):
        """Pair 'B'/'E' events per thread; returns the completed slice as an 'X' event, or None."""
        key = (self._id(e.pid), self._id(e.tid))
        stack = self._open_begins.setdefault(key, [])
        if e.ph == "B":
            stack.append(e)
            return None
        if not stack:
            self.unknown_phases["E without B"] += 1
            return None
        b = stack.pop()
        start, end = _ns(b, b.ts), _ns(e, e.ts)
        if start is None or end is None:
            self.builder.dropped_times += 1
            return None
        return b.__class__(ph="X", cat=b.cat, name=b.name, pid=b.pid, tid=b.tid, ts=start, dur=end - start,
                           args=b.args, s=EXACT_NS)

    def _metadata_event(self, e) -> None:
        a = self._args([e.args])[0] or _EMPTY_ARGS
        if e.name == "process_name" and a.name is not None:
            self.process_names[self._id(e.pid)] = safe_str(a.name)
        elif e.name == "thread_name" and a.name is not None:
            self.thread_names[f"{self._id(e.pid)}/{self._id(e.tid)}"] = safe_str(a.name)
        elif e.name == "process_labels" and a.labels is not None:
            self.process_labels[self._id(e.pid)] = safe_str(a.labels)

    def _counter_event(self, e) -> None:
        ts = _ns(e, e.ts)
        values = _decode_json_lenient(e.args) if e.args else {}
        if ts is None or not isinstance(values, dict):
            self.builder.dropped_times += 1
            return
        c = self._counters
        for series, value in values.items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            c["name"].append(safe_str(e.name))
            c["series"].append(series)
            c["ts_ns"].append(ts)
            c["pid"].append(self._id(e.pid))
            c["value"].append(float(value))

    # -- result -------------------------------------------------------------
    def finish(self, header: dict) -> Trace:
        """The Trace of every batch added, with the header's metadata and what could not be mapped."""
        b = self.builder
        if any(self._counters.values()):
            b.add_counters(self._counters)
        self._counters = {k: [] for k in COUNTERS.names}
        b.metadata.update(header_metadata(header))
        b.metadata["process_names"] = self.process_names
        b.metadata["thread_names"] = self.thread_names
        if self.process_labels:
            b.metadata["process_labels"] = self.process_labels
        if self.names_cut:
            b.warn(f"event names longer than {MAX_NAME_BYTES >> 10} KiB (cut)", self.names_cut)
        if self.bad_correlations:
            b.warn("events whose correlation id is not an integer within 64 bits (id left out: their launch and "
                   "device work are not linked)", self.bad_correlations)
        if self.invalid_utf8_args:
            b.warn("events with invalid UTF-8 in their args (replaced with U+FFFD)", self.invalid_utf8_args)
        for cat, count in self.unknown_categories.most_common():
            b.warn(f"unknown category {cat!r} (kept as kind 'other')", count)
        for ph, count in self.unknown_phases.most_common():
            b.warn(f"events of phase {ph!r} not modelled (skipped)", count)
        unclosed = sum(len(s) for s in self._open_begins.values())
        if unclosed:
            b.warn("'B' events without a matching 'E' (dropped)", unclosed)
        trace = b.finish()
        categories = {k.lower() for k in self._kind_cache if isinstance(k, str)}
        if tensorflow.is_tensorflow(self.process_names, self.thread_names, categories):
            nodes = pa.table({"event_id": pa.concat_arrays([i for i, _ in self._nodes] or [pa.array([], pa.int64())]),
                              "node": pa.concat_arrays([n for _, n in self._nodes] or [pa.array([], pa.string())])})
            trace = tensorflow.map_trace(trace, self.process_names, nodes)
        self._nodes = []
        return trace


def _stream_from_text(tid: Any) -> int | None:
    if isinstance(tid, str):
        m = _STREAM_RE.search(tid.strip())
        if m:
            return as_int(int(m.group(1)))
    return None


def header_metadata(header: dict) -> dict:
    """What the document's top-level keys say: rank, world size, devices, schema version, writing tool."""
    meta: dict[str, Any] = {}
    dist = header.get("distributedInfo")
    if isinstance(dist, dict):
        meta["rank"] = as_int(dist.get("rank")) if dist.get("rank") is not None else None
        meta["world_size"] = as_int(dist.get("world_size")) if dist.get("world_size") is not None else None
        meta["distributed_backend"] = dist.get("backend")
    props = header.get("deviceProperties")
    if isinstance(props, list):
        meta["device_properties"] = [p for p in props if isinstance(p, dict)]
    meta["schema_version"] = header.get("schemaVersion")
    meta["tool"] = _tool(header)
    meta["header"] = {k: v for k, v in header.items()
                      if k not in ("deviceProperties", "distributedInfo", "traceEvents")}
    return meta


def _tool(header: dict) -> str:
    other = header.get("otherData")
    if isinstance(other, dict) and isinstance(other.get("exported_by"), str) and isinstance(other.get("tool"), str) \
            and 0 < len(other["tool"]) <= 64:
        return other["tool"]  # a trace opscope exported: the tool its reader named (onnxruntime, tensorflow...)
    if "schemaVersion" in header or "deviceProperties" in header or "distributedInfo" in header:
        return "pytorch"
    return "chrome"
