"""Read Chrome trace-event JSON: PyTorch/Kineto traces, TF timelines, XProf trace viewer JSON.

Both document forms are accepted (``{"traceEvents": [...]}`` and a bare array), plain or gzip. Events
are decoded in chunks into compact structs (msgspec), then turned into the model's rows
(:class:`~opscope.ingest.chrome.columns.EventColumns`) for the model's builder; the document is never
held as Python dicts. Imported only when a file is parsed (see :mod:`opscope.ingest.chrome`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec

from opscope.errors import TraceError
from opscope.ingest.chrome.columns import EventColumns, set_exact_times
from opscope.ingest.chrome.json_stream import MAX_EPILOGUE, EventArrayStream, NotAnEventArray
from opscope.ingest.chrome.native import TAKE_ROWS, Accepted, NativeBatch, scanner
from opscope.ingest.chrome.salvage import MAX_DEPTH
from opscope.ingest.numbers import uncounted
from opscope.ingest.source import ByteSource
from opscope.model import Trace
from opscope.model.builder import TraceBuilder, fast_type_inference
from opscope.threads import ahead

FORMAT = "chrome_json"
#: Bytes of the event array decoded at a time (a test reads small traces in many chunks with a smaller value).
CHUNK_BYTES = 1 << 20


class RawEvent(msgspec.Struct, gc=False):
    """One trace event as written; fields are untyped so that odd writers never fail a whole chunk."""

    ph: Any = None
    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    id: Any = None
    s: Any = None
    args: msgspec.Raw = msgspec.Raw(b"")


class ExactTimes(msgspec.Struct, gc=False):
    """The time fields as their original text, for exact nanoseconds where floats cannot hold them."""

    ts: msgspec.Raw = msgspec.Raw(b"")
    dur: msgspec.Raw = msgspec.Raw(b"")


_decode_batch = msgspec.json.Decoder(list[RawEvent]).decode
_decode_one = msgspec.json.Decoder(RawEvent).decode
_decode_exact = msgspec.json.Decoder(list[ExactTimes]).decode
_decode_exact_one = msgspec.json.Decoder(ExactTimes).decode


def read(path: Path, progress=None, keep_args: bool = True, *, builder: TraceBuilder | None = None,
         categories: dict[str, str] | None = None) -> Trace:
    """Read ``path`` into a Trace. ``progress(done_bytes, total_bytes)`` is called as blocks arrive.

    With ``keep_args=False`` the full JSON args are not kept (the ``args`` table is then empty). A reader of a
    format that is Chrome JSON underneath (ONNX Runtime's profile) passes its own ``builder`` (which then sees
    every batch of rows) and the kinds of its own ``categories``.
    """
    source = ByteSource(path, prefetch=True, text=True)
    blocks = source.blocks()
    if progress is not None:
        blocks = _reporting(blocks, source, progress)
    native = scanner()
    stream = EventArrayStream(blocks, _decode_batch, _decode_one_exact, chunk_size=CHUNK_BYTES,
                              decode_items=_items_decoder(native))
    columns = EventColumns(builder if builder is not None else TraceBuilder(str(path), FORMAT), keep_args=keep_args,
                           categories=categories)
    with fast_type_inference(), uncounted():  # the C path converts without ingest.numbers: its warnings say it
        trace = _read_events(path, source, stream, columns, native)
    _add_stream_warnings(trace, stream.report, source)
    if trace.events.num_rows == 0 and trace.counters.num_rows == 0 and trace.memory.num_rows == 0:
        if stream.report.truncated or source.truncated:
            raise TraceError(path, "is truncated before its first complete event",
                             "nothing could be recovered")
        from opscope.ingest.chrome.not_a_trace import head_of, what_it_is

        known = what_it_is(head_of(path), columns.builder.dropped_times)
        if known is not None:
            raise TraceError(path, *known)
        if columns.process_names or columns.thread_names or columns.process_labels:
            raise TraceError(path, 'holds no trace events, only metadata ("ph": "M") events',
                             "was the profiler stopped before any step ran?")
        deep = stream.report.salvage.dropped_too_deep
        if deep:
            raise TraceError(path, f"holds no readable trace events: {deep} nested more than {MAX_DEPTH} levels deep "
                                   "(beyond the JSON nesting opscope reads, as hostile input)")
        raise TraceError(path, "holds no trace events", "was the profiler stopped before any step ran?")
    return trace


def _read_events(path: Path, source: ByteSource, stream: EventArrayStream, columns: EventColumns,
                 native: Any = None) -> Trace:
    try:
        for item in (_batches(stream) if native is None else _pipelined(stream, native)):
            apply_item(columns, item)
    except NotAnEventArray as exc:
        if source.truncated and not stream.report.found_events:
            raise TraceError(path, "gzip stream ends early before any trace events",
                             "the file is truncated") from None
        raise TraceError(path, f"not a trace: {exc}",
                         "opscope reads PyTorch/Kineto and Chrome trace JSON (.json, .json.gz)") from None
    except msgspec.DecodeError as exc:
        raise TraceError(path, f"malformed JSON header ({exc})") from None
    return columns.finish(stream.report.header)


def apply_item(columns: EventColumns, item: tuple) -> None:
    """One work item of :func:`_batches` or :func:`native_items` into ``columns``."""
    if item[0] == "rows":
        columns.add_native(NativeBatch(item[1]))
    elif item[0] == "rest":  # metadata and counters the C reader left: no rows, so no order to keep
        rest, exact = item[1], item[2]
        columns.add_batch(_decode_batch(rest), _decode_exact(rest) if exact else None)
    else:
        events, chunk = item[1], item[2]
        columns.add_batch(events, _exact_times(events, chunk))


def _batches(stream: EventArrayStream) -> Iterator[tuple]:
    """The Python path's work items: ("events", decoded structs, the chunk they came from)."""
    for events, chunk in stream.batches():
        yield "events", events, chunk


def native_items(stream: EventArrayStream, native: Any) -> Iterator[tuple]:
    """The work items with a C reader, in the file's order: ("rows", columns it held), ("rest", metadata and
    counter events it left, exact), ("events", ...) for a chunk it declined (the rows held are taken first)."""
    for events, chunk in stream.batches():
        if events.__class__ is Accepted:
            if events.rest is not None:
                yield "rest", events.rest, events.exact
            if native.pending() >= TAKE_ROWS:
                yield "rows", native.take()
            continue
        if native.pending():
            yield "rows", native.take()
        yield "events", events, chunk
    if native.pending():
        yield "rows", native.take()


def _pipelined(stream: EventArrayStream, native: Any) -> Iterator[tuple]:
    """:func:`native_items` produced on a thread: while this one turns rows into Arrow tables, the producer cuts
    the next chunks and the C reader scans them without the GIL (and the inflate thread runs beside both). Its
    errors are raised here, in order; leaving early stops it."""
    return ahead(native_items(stream, native), 4, "opscope-scan")


def _items_decoder(native: Any) -> Any:
    """The C reader's try at a chunk's items, in the stream's buffer: :class:`Accepted` when it keeps their rows,
    None (the chunk is then decoded by msgspec into :class:`RawEvent` structs); None where there is no C reader."""
    if native is None:
        return None
    feed_items = native.feed_items

    def decode(buffer: bytes, start: int, end: int) -> Accepted | None:
        kept = feed_items(buffer, start, end)
        return None if kept is None else Accepted(*kept)

    return decode


def _reporting(blocks, source: ByteSource, progress):
    for block in blocks:
        progress(source.bytes_in, source.size)
        yield block
    progress(source.size, source.size)


# Floats hold exact nanoseconds only below 2**42 us (about 51 days): epoch timestamps with
# fractional microseconds (ns-resolution Kineto traces) are re-read from their text.
_FLOAT_EXACT_LIMIT = float(2 ** 42)


def _decode_one_exact(obj: bytes) -> RawEvent:
    """One event (the salvage path): like a batch, epoch-scale float times are re-read from their text."""
    e = _decode_one(obj)
    t = e.ts
    if t.__class__ is float and (t >= _FLOAT_EXACT_LIMIT or t <= -_FLOAT_EXACT_LIMIT):
        x = _decode_exact_one(obj)
        set_exact_times(e, bytes(x.ts), bytes(x.dur))
    return e


def _exact_times(events: list, chunk: bytes) -> list | None:
    if not chunk:
        return None
    for e in events:
        t = e.ts
        if t.__class__ is float and (t >= _FLOAT_EXACT_LIMIT or t <= -_FLOAT_EXACT_LIMIT):
            break
    else:
        return None
    return _decode_exact(chunk)


def _add_stream_warnings(trace: Trace, report, source: ByteSource) -> None:
    s = report.salvage
    if source.truncated or report.truncated:
        reason = source.corrupt_reason or "the file ends before the trace does"
        trace.metadata["truncated"] = True
        trace.warn(f"file is truncated ({reason}); recovered {trace.events.num_rows} complete events")
    if report.header_invalid:
        trace.warn("the document's keys before the event array are not valid JSON (ignored)")
    if report.epilogue_cut:
        trace.warn(f"more than {MAX_EPILOGUE >> 20} MiB follow the event array; the rest of the file was not read")
    if report.junk_after_array:
        trace.warn("bytes after the event array that are not part of the document (ignored)",
                   report.junk_after_array)
    if s.incomplete_tail_bytes:
        trace.warn("incomplete last event dropped (truncated file)", 1)
    for count, problem in (
        (s.repaired_utf8, "events with invalid UTF-8 (replaced with U+FFFD)"),
        (s.repaired_control, "events with raw control characters in strings (escaped)"),
        (s.repaired_quotes, "events with unescaped quotes in their name (re-escaped)"),
        (s.repaired_nonfinite, "events with NaN/Infinity values (read as null)"),
        (s.dropped_malformed, "malformed events that could not be repaired (dropped)"),
        (s.dropped_too_deep, f"events nested more than {MAX_DEPTH} levels deep (beyond the JSON nesting opscope "
                             "reads: dropped as hostile)"),
        (s.dropped_not_object, "array items that are not event objects (dropped)"),
    ):
        if count:
            trace.warn(problem, count)
