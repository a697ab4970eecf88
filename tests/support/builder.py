"""Build a Trace in memory from model rows, through the model's builder: no trace file on disk.

    trace = make_trace([row("user_annotation", "ProfilerStep#1", 0, 100),
                        row("cpu_op", "aten::mm", 10, 50),
                        row("kernel", "gemm", 20, 30, pid=0, tid=7, stream=7, device=0)])

Rows are dicts in the model's schema (:mod:`opscope.model.schema`): ``kind``, ``name``, ``ts_ns``,
``dur_ns``, and any of ``cat``, ``pid``, ``tid``, ``device``, ``stream``, ``correlation``,
``external_id``, ``shapes``... (absent columns are null; ``pid``/``tid`` default to 1). The trace is
completed as a file's would be (time order, nesting, self time, steps).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from opscope.model.builder import TraceBuilder
from opscope.model.derive import complete
from opscope.model.schema import GPU_KINDS
from opscope.model.trace import Trace

US = 1000
_EVENT_DEFAULTS = {"pid": 1, "tid": 1}


def row(kind: str, name: str, ts_us: float, dur_us: float, **columns: Any) -> dict[str, Any]:
    """One event row with times given in microseconds (as the tests' hand-drawn timelines are)."""
    return {"kind": kind, "name": name, "ts_ns": round(ts_us * US), "dur_ns": round(dur_us * US), **columns}


def make_trace(
    events: Iterable[Mapping[str, Any]] = (),
    *,
    flows: Iterable[Mapping[str, Any]] = (),
    counters: Iterable[Mapping[str, Any]] = (),
    memory: Iterable[Mapping[str, Any]] = (),
    args: Iterable[str | None] | None = None,
    metadata: Mapping[str, Any] | None = None,
    source: str = "<memory>",
) -> Trace:
    """A completed Trace of these rows; ``args`` (JSON text per event, optional) lines up with ``events``."""
    builder = TraceBuilder(source, "memory")
    builder.metadata.update({"process_names": {}, "thread_names": {}, **(metadata or {})})
    events = [{**_EVENT_DEFAULTS, **e} for e in events]
    for e in events:
        if e["kind"] in GPU_KINDS and e.get("stream") is None:
            raise ValueError(f"device row {e['name']!r} needs a stream (and a device), as the model's GPU rows have")
    if events:
        builder.add_events(_columns(events), None if args is None else list(args))
    for add, rows in ((builder.add_flows, flows), (builder.add_counters, counters), (builder.add_memory, memory)):
        rows = list(rows)
        if rows:
            add(_columns(rows))
    return complete(builder.finish())


def _columns(rows: list[Mapping[str, Any]]) -> dict[str, list]:
    """Rows -> one list per column named by any row (None where a row leaves it out)."""
    names = list(dict.fromkeys(name for r in rows for name in r))
    return {name: [r.get(name) for r in rows] for name in names}
