"""Make a Trace from typed batches of rows: the one place where the model's tables are assembled.

Every reader emits batches in the model's schema (:mod:`opscope.model.schema`) — events, flows, counters,
memory records — plus metadata and warnings; :class:`TraceBuilder` checks the times, numbers the events,
keeps each event's JSON args beside it, and at :meth:`TraceBuilder.finish` returns the Trace that
:func:`opscope.model.derive.complete` then nests and splits into steps. A batch is a mapping from column
name to values, either Arrow arrays (fast readers build those themselves) or plain Python lists (small
readers and tests); absent optional columns are null.
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc

from opscope.model.ranges import arange
from opscope.model.schema import ARGS, COUNTERS, DERIVED_COLUMNS, EVENTS, FLOWS, MEMORY, STEPS
from opscope.model.trace import Trace

Values: TypeAlias = pa.Array | pa.ChunkedArray | Sequence[Any]
Batch: TypeAlias = Mapping[str, Values]

_INT64_MAX = (1 << 63) - 1
#: The columns a reader gives for events (``event_id`` is numbered here; the rest is derived later).
READER_EVENT_COLUMNS = tuple(n for n in EVENTS.names if n not in DERIVED_COLUMNS and n != "event_id")
_REQUIRED_EVENT_COLUMNS = ("kind", "name", "ts_ns", "dur_ns")
#: Columns holding process/thread ids: integers become text and a missing id the empty string.
_ID_COLUMNS = ("pid", "tid")
#: Dropped rows of every table are counted under this one warning (its text is part of the output).
BAD_TIME_WARNING = "events with missing, negative, non-numeric or out-of-range (beyond 73 years) ts/dur (dropped)"


class TraceBuilder:
    """Collects batches of the model's tables and makes the (not yet completed) Trace.

    ``metadata`` starts as ``{"source", "format", "warnings"}``; a reader adds what it knows (tool, rank,
    device properties, process and thread names). Rows whose times are unusable (null, or a negative
    duration) are dropped and counted in ``dropped_times``, to which a reader adds the records it could
    not even turn into rows; :meth:`finish` reports that count first, then the reader's :meth:`warn` calls
    in order.
    """

    def __init__(self, source: str, fmt: str) -> None:
        self.metadata: dict[str, Any] = {"source": source, "format": fmt, "warnings": []}
        self.dropped_times = 0
        self._warnings: list[tuple[str, int]] = []
        self._events: list[pa.RecordBatch] = []
        self._args: list[pa.RecordBatch] = []
        self._tables: dict[str, list[pa.RecordBatch]] = {"flows": [], "counters": [], "memory": []}
        self._steps: list[pa.RecordBatch] = []
        self._n_events = 0

    def warn(self, problem: str, count: int = 1) -> None:
        """What the reader could not map, for ``metadata.warnings`` (after the dropped-times count)."""
        self._warnings.append((problem, count))

    def add_events(self, columns: Batch, args: Values | None = None) -> pa.Array:
        """Append event rows: ``kind``, ``name``, ``ts_ns``, ``dur_ns`` and any other reader column.

        ``args`` (optional) is each row's full args as JSON text, aligned with the rows. Returns the
        ``event_id`` given to each row (null where the row was dropped), so that a reader can keep what it
        knows about a row beyond the model's columns (a TF node name) and find the row again later.
        """
        missing = [n for n in _REQUIRED_EVENT_COLUMNS if n not in columns]
        unknown = [n for n in columns if n not in READER_EVENT_COLUMNS]
        if missing or unknown:
            raise ValueError(f"event batch: missing columns {missing}, unknown columns {unknown}; "
                             f"the columns are {list(READER_EVENT_COLUMNS)}")
        batch = _record_batch(columns, EVENTS, READER_EVENT_COLUMNS)
        if args is not None and len(args) != batch.num_rows:
            raise ValueError(f"event batch: {len(args)} args for {batch.num_rows} rows")
        valid = pc.and_(pc.and_(_time_ok(batch["ts_ns"]), _time_ok(batch["dur_ns"])),
                        pc.greater_equal(pc.fill_null(batch["dur_ns"], -1), 0))
        n_bad = batch.num_rows - (pc.sum(pc.cast(valid, pa.int64())).as_py() or 0)
        if n_bad:
            self.dropped_times += n_bad
            batch = batch.filter(valid)
        first = self._n_events
        ids = arange(first, first + batch.num_rows)
        given = ids
        if n_bad:  # the ids of the kept rows, null where a row was dropped
            kept = pc.subtract(pc.cumulative_sum(pc.cast(valid, pa.int64())), 1 - first)
            given = pc.if_else(valid, kept, pa.scalar(None, pa.int64()))
        self._n_events += batch.num_rows
        self._events.append(batch.append_column("event_id", ids))
        if args is not None:
            text = _column(args, pa.string(), "args")
            if n_bad:
                text = text.filter(valid)
            self._args.append(pa.RecordBatch.from_arrays([ids, text], schema=ARGS))
        return given

    def rename_events(self, names: dict[str, str], kind: str) -> None:
        """Give the events of ``kind`` added so far whose name is a key of ``names`` its value instead: names a
        reader learns only at its file's end (MIGraphX perf's Summary), its rows already handed on."""
        if not names:
            return
        old, new = pa.array(list(names), pa.string()), pa.array(list(names.values()), pa.string())
        for k, batch in enumerate(self._events):
            name = batch["name"].cast(pa.string())
            at = pc.index_in(name, value_set=old)
            hit = pc.and_(pc.is_valid(at), pc.fill_null(pc.equal(batch["kind"].cast(pa.string()), kind), False))
            if not pc.any(hit).as_py():
                continue
            renamed = pc.if_else(hit, pc.take(new, at), name).dictionary_encode()
            self._events[k] = batch.set_column(batch.schema.get_field_index("name"), batch.schema.field("name"),
                                               renamed.cast(batch.schema.field("name").type))

    def add_flows(self, columns: Batch) -> None:
        """Append flow endpoints (``id``, ``cat``, ``phase`` s/t/f, ``ts_ns``, ``pid``, ``tid``)."""
        self._add_timed("flows", columns, FLOWS)

    def add_counters(self, columns: Batch) -> None:
        """Append counter samples (``name``, ``series``, ``ts_ns``, ``pid``, ``value``)."""
        self._add_timed("counters", columns, COUNTERS)

    def add_memory(self, columns: Batch) -> None:
        """Append allocator records (``ts_ns``, ``pid``, ``tid``, device, ``addr``, ``bytes``, totals)."""
        self._add_timed("memory", columns, MEMORY)

    def add_steps(self, columns: Batch) -> None:
        """Append steps the format itself marks (``step``, ``name``, ``pid``, ``tid``, ``ts_ns``, ``dur_ns``): ONNX
        Runtime's ``model_run``, XProf's step markers, NVTX step ranges. When a reader gives any, they are the
        trace's steps; otherwise :func:`opscope.model.derive.complete` looks for ``ProfilerStep#N`` annotations."""
        unknown = [n for n in columns if n not in STEPS.names]
        missing = [n for n in ("step", "ts_ns", "dur_ns") if n not in columns]
        if unknown or missing:
            raise ValueError(f"steps batch: unknown columns {unknown}, missing {missing}; the columns are "
                             f"{STEPS.names}")
        batch = _record_batch(columns, STEPS, STEPS.names)
        valid = pc.and_(pc.and_(_time_ok(batch["ts_ns"]), _time_ok(batch["dur_ns"])),
                        pc.and_(pc.is_valid(batch["step"]), pc.greater_equal(pc.fill_null(batch["dur_ns"], -1), 0)))
        n_bad = batch.num_rows - (pc.sum(pc.cast(valid, pa.int64())).as_py() or 0)
        if n_bad:
            self.dropped_times += n_bad
            batch = batch.filter(valid)
        self._steps.append(batch)

    def _add_timed(self, table: str, columns: Batch, schema: pa.Schema) -> None:
        unknown = [n for n in columns if n not in schema.names]
        if unknown or "ts_ns" not in columns:
            raise ValueError(f"{table} batch: unknown columns {unknown} (needs ts_ns); the columns are "
                             f"{schema.names}")
        batch = _record_batch(columns, schema, schema.names)
        valid = _time_ok(batch["ts_ns"])
        if not pc.all(valid).as_py():
            self.dropped_times += batch.num_rows - (pc.sum(pc.cast(valid, pa.int64())).as_py() or 0)
            batch = batch.filter(valid)
        if table == "memory":
            batch = self._sane_bytes(batch)
        self._tables[table].append(batch)

    def _sane_bytes(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """Allocator records whose byte counts lie within +-2^53 (8 PiB): beyond it float64 sums and averages lose
        their exactness and int64 sums overflow, and no allocator holds that much; the others are dropped."""
        ok = None
        for name in ("bytes", "total_allocated", "total_reserved"):
            col = batch[name]
            inside = pc.fill_null(pc.and_(pc.greater_equal(col, -2**53), pc.less_equal(col, 2**53)), True)
            ok = inside if ok is None else pc.and_(ok, inside)
        n_bad = batch.num_rows - (pc.sum(pc.cast(ok, pa.int64())).as_py() or 0)
        if n_bad:
            self.warn("memory records with a byte count beyond 2^53 (dropped)", n_bad)
            batch = batch.filter(ok)
        return batch

    def finish(self) -> Trace:
        """The Trace of everything added; ``steps`` and the derived event columns come from ``complete``."""
        schema = pa.schema([EVENTS.field(n) for n in (*READER_EVENT_COLUMNS, "event_id")])
        events = pa.Table.from_batches(self._events, schema=schema)
        self._events = []  # the table holds the buffers now; no second reference to keep alive
        args = pa.Table.from_batches(self._args, schema=ARGS)
        self._args = []
        tables = {name: pa.Table.from_batches(self._tables[name], schema=schema)
                  for name, schema in (("flows", FLOWS), ("counters", COUNTERS), ("memory", MEMORY))}
        self._tables = {name: [] for name in tables}
        steps = pa.Table.from_batches(self._steps, schema=STEPS)
        steps = steps.sort_by([("ts_ns", "ascending"), ("step", "ascending")])
        self._steps = []
        trace = Trace(events=events, steps=steps, args=args, metadata=self.metadata, **tables)
        if self.dropped_times:
            trace.warn(BAD_TIME_WARNING, self.dropped_times)
        for problem, count in self._warnings:
            trace.warn(problem, count)
        return trace


#: Times (ns) beyond this are dropped and counted: 2^61 ns is 73 years (epoch times now are ~1.8e18 < 2.3e18),
#: and keeping every time and duration within it means an end (ts + dur) or a span (last - first) of the trace
#: never overflows int64 in the analyses.
MAX_TIME_NS = 2**61


def _time_ok(values: pa.Array) -> pa.Array:
    """True where a time is present and within +-MAX_TIME_NS (false, never null, where absent)."""
    filled = pc.fill_null(values, MAX_TIME_NS + 1)  # no abs(): abs(-2^63) overflows
    inside = pc.and_(pc.greater_equal(filled, -MAX_TIME_NS), pc.less_equal(filled, MAX_TIME_NS))
    return pc.and_(pc.is_valid(values), inside)


def _record_batch(columns: Batch, schema: pa.Schema, names: Sequence[str]) -> pa.RecordBatch:
    """The batch's columns in schema order and type; absent ones null (ids: the empty string)."""
    n = _length(columns)
    arrays = []
    for name in names:
        field = schema.field(name)
        values = columns.get(name)
        if values is None:
            absent_id = name in _ID_COLUMNS and pa.types.is_dictionary(field.type)
            arrays.append(id_array([None] * n) if absent_id else pa.nulls(n, field.type))
        else:
            arrays.append(_column(values, field.type, name))
        if len(arrays[-1]) != n:
            raise ValueError(f"column {name!r} has {len(arrays[-1])} values, the batch {n} rows")
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema([schema.field(n) for n in names]))


def _length(columns: Batch) -> int:
    for values in columns.values():
        if values is not None:
            return len(values)
    return 0


def _column(values: Values, type_: pa.DataType, name: str) -> pa.Array:
    """One column in the schema's type: Arrow arrays are cast, Python lists converted leniently."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if isinstance(values, pa.Array):
        return values if values.type == type_ else values.cast(type_)
    values = list(values)
    if pa.types.is_dictionary(type_):
        return id_array(values) if name in _ID_COLUMNS else str_array(values)
    if pa.types.is_integer(type_):
        return int_array(values).cast(type_)
    if pa.types.is_string(type_):
        return str_array(values, dictionary=False)
    return pa.array(values, type_)


# -- lenient conversions of Python values (what a decoder hands over) to typed arrays -------------------

def id_array(values: list) -> pa.Array:
    """pid/tid values (ints or strings) -> dictionary-encoded strings, the empty string where absent."""
    try:
        arr = pa.array(values, pa.int64()).cast(pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
        arr = pa.array([None if v is None else safe_str(v) for v in values], pa.string())
    return pc.fill_null(arr, "").dictionary_encode()


def int_array(values: list) -> pa.Array:
    """Values that should be integers -> int64 (null where absent, fractional, out of range or not numbers).

    Type inference first: ``pa.array(floats, pa.int64())`` would silently truncate 6.72 to 6.
    """
    try:
        arr = pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
        arr = None
    if arr is not None and (pa.types.is_integer(arr.type) or pa.types.is_null(arr.type)):
        return arr.cast(pa.int64())
    return pa.array([as_int(v) for v in values], pa.int64())


def str_array(values: list, dictionary: bool = True) -> pa.Array:
    """Values that should be text -> strings (dictionary-encoded by default); others as their text."""
    try:
        arr = pa.array(values, pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, UnicodeError):
        arr = pa.array([None if v is None else safe_str(v) for v in values], pa.string())
    return arr.dictionary_encode() if dictionary else arr


def as_int(v: Any) -> int | None:
    """An int64 from an int, an integral float or digit text; None otherwise (bools included)."""
    if v.__class__ is int:
        return v if -_INT64_MAX <= v <= _INT64_MAX else None
    if v.__class__ is float and v == v and abs(v) < 9e18 and v == int(v):
        return int(v)
    if v.__class__ is str and v.strip().lstrip("-").isdigit():
        return as_int(int(v))
    return None


def safe_str(v: Any) -> str:
    """Text of any value, with invalid UTF-8 and lone surrogates replaced (Arrow refuses them)."""
    if isinstance(v, str):
        return v.encode("utf-8", "replace").decode("utf-8")
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return str(v)


@contextlib.contextmanager
def fast_type_inference() -> Iterator[None]:
    """Within the block, ``pa.array`` without a type does not retry ``import dateutil`` on every call.

    pyarrow's type inference looks for ``dateutil.relativedelta``; where python-dateutil is not installed,
    Python does not remember the failed import and each call pays ~40 us for it — thousands of calls while
    a reader converts a large trace. Marking the module absent for the time of the read makes the failure
    immediate; nothing changes where dateutil is installed, and the mark is removed afterwards.
    """
    if "dateutil" in sys.modules or importlib.util.find_spec("dateutil") is not None:
        yield
        return
    sys.modules["dateutil"] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        if sys.modules.get("dateutil", 0) is None:
            del sys.modules["dateutil"]
