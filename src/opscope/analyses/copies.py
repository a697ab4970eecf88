"""Every memcpy of a trace with what the copies advice needs: direction, pinned or pageable memory, size, the
runtime call that issued it (its host time) and the op around that call.

Sizes come from the copy events' ``bytes`` argument (Kineto writes it on every memcpy); pinned and pageable
are told apart by Kineto's names ("Memcpy HtoD (Pageable -> Device)", "(Pinned -> Device)"); ROCm traces
("Host -> Device") do not say, so their copies are never called pageable.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pyarrow as pa
import pyarrow.compute as pc

from opscope.analyses.arrays import combined, pylist
from opscope.analyses.gpu import MEMCPY_DIRECTIONS, direction_code
from opscope.analyses.links import device_links
from opscope.model.buffers import true_positions
from opscope.model.lookup import index_in
from opscope.model.schema import kind_mask
from opscope.model.trace import Trace


def copy_table(trace: Trace, links: pa.Table | None = None) -> list[dict[str, Any]]:
    """Every copy of the trace, as dicts: ``row``, ``name``, ``direction`` (htod, dtoh, dtod, ptop, other),
    ``memory`` ("pageable", "pinned" or None when the name does not say), ``bytes`` (None when unknown),
    ``ts_ns``, ``dur_ns``, ``step``, ``counted`` (inside the steps; the whole trace without steps), ``call_ns``
    (the duration of the runtime call that issued it, None without one), ``host_ns`` (that call's time less
    its wait for earlier device work: a call that returns after its copy ends waited from its start to the
    copy's start), ``thread``, ``call_ts`` and ``op`` (the outermost op around the call). ``links`` is
    :func:`launch_links` when the caller has it."""
    ev = trace.select(["kind", "name", "ts_ns", "dur_ns", "step", "pid", "tid"])
    mask = pc.fill_null(kind_mask(ev, ("memcpy",)), False)
    rows = true_positions(mask)
    if len(rows) == 0:
        return []
    copies = ev.take(rows)
    links = launch_links(trace) if links is None else links
    where = index_in(rows, links["device_row"])
    launch = pc.take(combined(links["launch_row"]), where)
    op = pylist(pc.take(trace.select(["name"])["name"], pc.take(combined(links["top_row"]), where)))
    calls = ev.select(["ts_ns", "dur_ns", "pid", "tid"]).take(pc.fill_null(launch, 0))
    has_call = pc.is_valid(launch).to_pylist()
    call_start, call_dur, call_pid, call_tid = (pylist(calls[c]) for c in ("ts_ns", "dur_ns", "pid", "tid"))
    nbytes = _bytes(trace, pc.cast(rows, pa.int64()))  # event_id is the row index (the model's invariant)
    has_steps = trace.steps.num_rows > 0
    by_name: dict[str | None, tuple[str, str | None]] = {}  # a trace has a few copy names and many copies

    def of_name(name: str | None) -> tuple[str, str | None]:
        found = by_name.get(name)
        if found is None:
            lower = (name or "").lower()
            found = by_name[name] = (MEMCPY_DIRECTIONS[direction_code(name)],
                                     "pageable" if "pageable" in lower else "pinned" if "pinned" in lower else None)
        return found

    out = []
    for row, name, ts, dur, step, called, call_ts, call_ns, pid, tid, top in zip(
            rows.to_pylist(), pylist(copies["name"]), copies["ts_ns"].to_pylist(), copies["dur_ns"].to_pylist(),
            copies["step"].to_pylist(), has_call, call_start, call_dur, call_pid, call_tid, op):
        host_ns = thread = None
        if called:
            waited = max(0, ts - call_ts) if call_ts + call_ns >= ts + dur else 0
            host_ns = max(0, call_ns - waited)
            thread = f"{pid}/{tid}"
        else:
            call_ts = call_ns = None
        direction, memory = of_name(name)
        out.append({
            "row": row, "name": name, "direction": direction, "memory": memory,
            "bytes": nbytes.get(row), "ts_ns": ts, "dur_ns": dur, "step": step,
            "counted": step is not None or not has_steps, "call_ns": call_ns, "host_ns": host_ns,
            "thread": thread, "call_ts": call_ts, "op": top,
        })
    return out


def launch_links(trace: Trace) -> pa.Table:
    """The device events that have a launch call: ``device_row``, ``launch_row`` and ``top_row`` (the outermost op
    around the call; null without one), rows of the events table. Rows, not :func:`link_table`'s names: a copy's op
    is named for the copies alone, not for every kernel (a 1 GB trace's link table holds 30 MB of names)."""
    links = device_links(trace)
    table = pa.table({"device_row": links["device_row"], "launch_row": links["launch_row"],
                      "top_row": links["top_row"]})
    return table.filter(pc.is_valid(table["launch_row"]))


def _bytes(trace: Trace, event_ids: pa.Array) -> dict[int, int]:
    """event_id -> the ``bytes`` argument of those events that have one (from ``copy_args``: the copies' args
    only, not every event's)."""
    args = trace.copy_args
    if args.num_rows == 0:
        return {}
    mine = args.filter(pc.is_in(args["event_id"], value_set=event_ids))
    ids, texts = mine["event_id"].to_pylist(), mine["args"].to_pylist()
    values = _bytes_values(texts)
    return {eid: value for eid, value in zip(ids, values) if isinstance(value, int) and value >= 0}


class _Sized(msgspec.Struct):
    """The one key of a copy's args read here: the others are passed over, not built into a dict (a repeated key
    gives its last value, as a dict does)."""

    bytes: Any = None


_decode_sized = msgspec.json.Decoder(_Sized).decode


def _bytes_values(texts: list[str | None]) -> list[Any]:
    """Each args text's ``bytes`` value (None where absent, where the text is not valid JSON, or not an object)."""
    values = []
    for text in texts:
        try:
            values.append(_decode_sized(text).bytes if text else None)
        except (msgspec.DecodeError, msgspec.ValidationError):
            values.append(None)
    return values


COPY_SCHEMA = pa.schema([
    ("row", pa.int64()), ("name", pa.string()), ("direction", pa.string()), ("memory", pa.string()),
    ("bytes", pa.int64()), ("ts_ns", pa.int64()), ("dur_ns", pa.int64()), ("step", pa.int64()),
    ("counted", pa.bool_()), ("call_ns", pa.int64()), ("host_ns", pa.int64()), ("thread", pa.string()),
    ("call_ts", pa.int64()), ("op", pa.string()),
])


def copies_table(trace: Trace) -> pa.Table:
    """:func:`copy_table` as an Arrow table (the same columns when the trace has no copies)."""
    return pa.Table.from_pylist(copy_table(trace), schema=COPY_SCHEMA)
