"""Chrome trace-event JSON (chrome://tracing, Perfetto's JSON import) that opscope's own reader reads back into the
same model: Kineto's categories for each kind, the args the reader lifts (correlation, External id, device, stream,
Input Dims/type/Strides, Concrete Inputs), times in microseconds with three decimals (exact nanoseconds: the reader
re-reads large values from their text), ``[memory]`` instants for memory records, ``C`` events for counters.

Written in chunks (msgspec encodes one batch of events at a time), so memory stays near one batch.
"""

from __future__ import annotations

import gzip
from typing import IO, TYPE_CHECKING, Any

import msgspec
import pyarrow as pa
import pyarrow.compute as pc

from opscope.categories import CATEGORY_KINDS
from opscope.version import __version__

if TYPE_CHECKING:
    from opscope.render.export.plan import Plan

#: The category written for each kind when the event's own category would not read back as that kind.
CATEGORY = {
    "cpu_op": "cpu_op", "python": "python_function", "user_annotation": "user_annotation",
    "gpu_annotation": "gpu_user_annotation", "kernel": "kernel", "comm": "kernel", "memcpy": "gpu_memcpy",
    "memset": "gpu_memset", "runtime": "cuda_runtime", "sync": "cuda_sync", "marker": "cpu_instant_event",
    "profiler": "Trace", "overhead": "overhead", "other": "other",
}
#: opscope's own slices (steps, findings) read back as the profiler's spans: never counted as work.
OPSCOPE_CATEGORY = "Trace"
GPU_COLUMN_KINDS = {"kernel", "comm", "memcpy", "memset", "sync", "gpu_annotation"}
BATCH = 20_000
_COLUMNS = ["kind", "name", "cat", "ts_ns", "dur_ns", "pid", "tid", "device", "stream", "correlation", "external_id",
            "shapes", "dtypes", "strides", "concrete_inputs"]
_RAW_ARGS = (("shapes", "Input Dims"), ("dtypes", "Input type"), ("strides", "Input Strides"),
             ("concrete_inputs", "Concrete Inputs"))
_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.decode


def us(ns: int) -> msgspec.Raw:
    """Integer ns as microseconds with three decimals, written as JSON number text (no float rounding)."""
    q, r = divmod(abs(ns), 1000)
    return msgspec.Raw(f"{'-' if ns < 0 else ''}{q}.{r:03d}".encode())


def category(kind: str, cat: str | None) -> str:
    """The event's own category when the reader maps it back to ``kind``, else Kineto's category of the kind."""
    if cat is not None:
        back = CATEGORY_KINDS.get(cat.lower(), "other")
        if back == kind or (kind == "comm" and back == "kernel"):
            return cat
    return CATEGORY.get(kind, "other")


def write(plan: Plan, stream: IO[bytes], gz: bool = False) -> None:
    """Write the plan's events as one trace-event JSON document to ``stream`` (gzip when ``gz``)."""
    if gz:
        with gzip.GzipFile(fileobj=stream, mode="wb", compresslevel=6, mtime=0) as z:
            _write(plan, z)
    else:
        _write(plan, stream)


def _write(plan, out: IO[bytes] | gzip.GzipFile) -> None:
    header = _header(plan.trace)
    out.write(_encode(header)[:-1] + (b"," if header else b"") + b'"traceEvents":[\n')
    first = True
    for batch in _batches(plan):
        if not batch:
            continue
        body = _encode(batch)[1:-1]
        out.write(body if first else b",\n" + body)
        first = False
    out.write(b"\n]}\n")


def _header(trace) -> dict[str, Any]:
    meta = trace.metadata
    header: dict[str, Any] = {}
    given = meta.get("header")
    if isinstance(given, dict):
        header.update({k: v for k, v in given.items() if k not in ("traceEvents", "displayTimeUnit")})
    if meta.get("device_properties"):
        header["deviceProperties"] = meta["device_properties"]
    dist = {k: meta[m] for k, m in (("rank", "rank"), ("world_size", "world_size"), ("backend", "distributed_backend"))
            if meta.get(m) is not None}
    if dist:
        header["distributedInfo"] = dist
    header["displayTimeUnit"] = "ns"
    other = header.get("otherData")
    other = other if isinstance(other, dict) else {}
    header["otherData"] = {**other, "exported_by": f"opscope {__version__}"}
    if isinstance(meta.get("tool"), str):  # the reader's tool (onnxruntime) is not in the Chrome header: said here
        header["otherData"]["tool"] = meta["tool"]
    return header


def _batches(plan):
    yield _metadata_events(plan)
    yield from _event_batches(plan)
    yield _flow_events(plan)
    yield _counter_events(plan)
    yield from _memory_events(plan)
    yield _mark_events(plan)


def _metadata_events(plan) -> list[dict]:
    lay = plan.layout
    out: list[dict] = []
    for p, n in lay.pid.items():
        out.append({"ph": "M", "name": "process_name", "pid": n, "tid": 0, "args": {"name": lay.process_name[p]}})
        out.append({"ph": "M", "name": "process_sort_index", "pid": n, "tid": 0,
                    "args": {"sort_index": lay.process_sort[p]}})
        if p in lay.process_label:
            out.append({"ph": "M", "name": "process_labels", "pid": n, "tid": 0,
                        "args": {"labels": lay.process_label[p]}})
    for (p, t), n in lay.tid.items():
        pid = lay.pid[p]
        out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": n, "args": {"name": lay.thread_name[(p, t)]}})
        out.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": n,
                    "args": {"sort_index": lay.thread_sort[(p, t)]}})
    if plan.marks or plan.memory.num_rows:
        o = lay.opscope_pid
        out.append({"ph": "M", "name": "process_name", "pid": o, "tid": 0, "args": {"name": "opscope"}})
        out.append({"ph": "M", "name": "process_sort_index", "pid": o, "tid": 0, "args": {"sort_index": -1}})
        out.append({"ph": "M", "name": "thread_name", "pid": o, "tid": 1, "args": {"name": "steps"}})
        out.append({"ph": "M", "name": "thread_name", "pid": o, "tid": 2, "args": {"name": "opscope findings"}})
    return out


def _event_batches(plan):
    trace, lay = plan.trace, plan.layout
    events = trace.select(_COLUMNS)
    args = trace.args
    rows = plan.rows
    where = pc.index_in(rows, value_set=args["event_id"].combine_chunks()) if args.num_rows else None
    args_text = args["args"].combine_chunks() if args.num_rows else None
    for start in range(0, len(rows), BATCH):
        chunk = rows.slice(start, BATCH)
        cols = {c: events[c].take(chunk).to_pylist() for c in _COLUMNS}
        texts = pc.take(args_text, where.slice(start, BATCH)).to_pylist() if where is not None else [None] * len(chunk)
        batch = []
        for i in range(len(chunk)):
            kind = cols["kind"][i]
            p, t = cols["pid"][i] or "", cols["tid"][i] or ""
            a = _args(texts[i], cols, i, kind in GPU_COLUMN_KINDS)
            e: dict[str, Any] = {"ph": "i" if kind == "marker" else "X", "cat": category(kind, cols["cat"][i]),
                                 "name": cols["name"][i] or "", "pid": lay.pid[p], "tid": lay.tid[(p, t)],
                                 "ts": us(cols["ts_ns"][i])}
            if kind == "marker":
                e["s"] = "t"
            else:
                e["dur"] = us(cols["dur_ns"][i])
            if a:
                e["args"] = a
            batch.append(e)
        yield batch


def _args(text: str | None, cols: dict, i: int, gpu: bool) -> dict[str, Any]:
    """The event's args as read, with the model's columns put back (a reader may have set or changed them)."""
    a: dict[str, Any] = {}
    if text:
        try:
            value = _decode(text)
        except (msgspec.DecodeError, UnicodeError):
            value = None
        if isinstance(value, dict):
            a = value
    if cols["correlation"][i] is not None:
        a["correlation"] = cols["correlation"][i]
    ext = cols["external_id"][i]
    if ext is not None and "external id" not in a:
        a["External id"] = ext
    if gpu:
        for key in ("device", "stream"):
            if cols[key][i] is not None:
                a[key] = cols[key][i]
    for column, key in _RAW_ARGS:
        value = cols[column][i]
        if value is not None and key not in a:
            try:
                a[key] = _decode(value)
            except (msgspec.DecodeError, UnicodeError):
                a[key] = value
    return a


def _flow_events(plan) -> list[dict]:
    links = plan.links
    if links.num_rows == 0:
        return []
    trace, lay = plan.trace, plan.layout
    ends = pa.concat_arrays([links["launch_row"].combine_chunks(), links["device_row"].combine_chunks()])
    ev = trace.select(["ts_ns", "pid", "tid"]).take(ends)
    ts, pid, tid = ev["ts_ns"].to_pylist(), ev["pid"].to_pylist(), ev["tid"].to_pylist()
    n = links.num_rows
    out: list[dict] = []
    for k in range(n):
        for j, ph in ((k, "s"), (n + k, "f")):
            p, t = pid[j] or "", tid[j] or ""
            e = {"ph": ph, "id": k + 1, "pid": lay.pid[p], "tid": lay.tid[(p, t)], "ts": us(ts[j]), "cat": "ac2g",
                 "name": "ac2g"}
            if ph == "f":
                e["bp"] = "e"
            out.append(e)
    return out


def _counter_events(plan) -> list[dict]:
    c = plan.counters
    if c.num_rows == 0:
        return []
    lay = plan.layout
    return [{"ph": "C", "name": name, "pid": lay.pid[pid or ""], "ts": us(ts), "args": {series: value}}
            for name, series, ts, pid, value in zip(*(c[k].to_pylist() for k in ("name", "series", "ts_ns", "pid",
                                                                                 "value")))]


_MEMORY_KEYS = (("device_type", "Device Type"), ("device_id", "Device Id"), ("addr", "Addr"), ("bytes", "Bytes"),
                ("total_allocated", "Total Allocated"), ("total_reserved", "Total Reserved"))


def _memory_events(plan):
    """Each memory record as Kineto writes it (a ``[memory]`` instant), and per device a counter of the allocated
    and reserved totals on the opscope track, for the timeline."""
    m = plan.memory
    if m.num_rows == 0:
        return
    lay = plan.layout
    for start in range(0, m.num_rows, BATCH):
        part = m.slice(start, BATCH)
        cols = {k: part[k].to_pylist() for k in ("ts_ns", "pid", "tid") + tuple(k for k, _ in _MEMORY_KEYS)}
        batch = []
        counters = []
        for i in range(part.num_rows):
            p, t = cols["pid"][i] or "", cols["tid"][i] or ""
            a = {key: cols[k][i] for k, key in _MEMORY_KEYS if cols[k][i] is not None}
            batch.append({"ph": "i", "s": "t", "name": "[memory]", "pid": lay.pid[p],
                          "tid": lay.tid.get((p, t), 0), "ts": us(cols["ts_ns"][i]), "args": a})
            series = {s: cols[k][i] for k, s in (("total_allocated", "allocated"), ("total_reserved", "reserved"))
                      if cols[k][i] is not None}
            if series:
                label = plan.device_names[(cols["device_type"][i], cols["device_id"][i])]
                counters.append({"ph": "C", "name": f"memory {label}",
                                 "pid": lay.opscope_pid, "ts": us(cols["ts_ns"][i]), "args": series})
        yield batch
        yield counters


def _mark_events(plan) -> list[dict]:
    o = plan.layout.opscope_pid
    return [{"ph": "X", "cat": OPSCOPE_CATEGORY, "name": m.name, "pid": o, "tid": 1 if m.track == "steps" else 2,
             "ts": us(m.ts_ns), "dur": us(m.dur_ns), "args": {"opscope": m.track, **m.args}} for m in plan.marks]
