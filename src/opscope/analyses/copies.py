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

from opscope.analyses.arrays import combined
from opscope.analyses.gpu import MEMCPY_DIRECTIONS, direction_code
from opscope.analyses.links import link_table
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
    rows = pc.indices_nonzero(mask)
    if len(rows) == 0:
        return []
    copies = ev.take(rows)
    links = launch_links(trace) if links is None else links
    where = index_in(rows, links["device_row"])
    launch = pc.take(combined(links["launch_row"]), where)
    op = pc.take(combined(links["top_op_name"]), where).to_pylist()
    calls = ev.select(["ts_ns", "dur_ns", "pid", "tid"]).take(pc.fill_null(launch, 0))
    has_call = pc.is_valid(launch).to_pylist()
    call_start, call_dur, call_pid, call_tid = (calls[c].to_pylist() for c in ("ts_ns", "dur_ns", "pid", "tid"))
    nbytes = _bytes(trace, pc.cast(rows, pa.int64()))  # event_id is the row index (the model's invariant)
    has_steps = trace.steps.num_rows > 0
    out = []
    for i, (row, name, ts, dur, step) in enumerate(zip(
            rows.to_pylist(), copies["name"].to_pylist(), copies["ts_ns"].to_pylist(), copies["dur_ns"].to_pylist(),
            copies["step"].to_pylist())):
        lower = (name or "").lower()
        call_ns = host_ns = thread = call_ts = None
        if has_call[i]:
            call_ts, call_ns = call_start[i], call_dur[i]
            waited = max(0, ts - call_ts) if call_ts + call_ns >= ts + dur else 0
            host_ns = max(0, call_ns - waited)
            thread = f"{call_pid[i]}/{call_tid[i]}"
        out.append({
            "row": row, "name": name, "direction": MEMCPY_DIRECTIONS[direction_code(name)],
            "memory": "pageable" if "pageable" in lower else "pinned" if "pinned" in lower else None,
            "bytes": nbytes.get(row), "ts_ns": ts, "dur_ns": dur, "step": step,
            "counted": step is not None or not has_steps, "call_ns": call_ns, "host_ns": host_ns,
            "thread": thread, "call_ts": call_ts, "op": op[i],
        })
    return out


def launch_links(trace: Trace) -> pa.Table:
    """The device events that have a launch call: ``device_row``, ``launch_row``, ``top_op_name``."""
    links = link_table(trace)
    return links.filter(pc.is_valid(links["launch_row"])).select(["device_row", "launch_row", "top_op_name"])


def _bytes(trace: Trace, event_ids: pa.Array) -> dict[int, int]:
    """event_id -> the ``bytes`` argument of those events that have one (from ``copy_args``: the copies' args
    only, not every event's)."""
    args = trace.copy_args
    if args.num_rows == 0:
        return {}
    mine = args.filter(pc.is_in(args["event_id"], value_set=event_ids))
    out = {}
    for eid, text in zip(mine["event_id"].to_pylist(), mine["args"].to_pylist()):
        try:
            value = msgspec.json.decode(text).get("bytes") if text else None
        except (msgspec.DecodeError, AttributeError):
            continue
        if isinstance(value, int) and value >= 0:
            out[eid] = value
    return out


COPY_SCHEMA = pa.schema([
    ("row", pa.int64()), ("name", pa.string()), ("direction", pa.string()), ("memory", pa.string()),
    ("bytes", pa.int64()), ("ts_ns", pa.int64()), ("dur_ns", pa.int64()), ("step", pa.int64()),
    ("counted", pa.bool_()), ("call_ns", pa.int64()), ("host_ns", pa.int64()), ("thread", pa.string()),
    ("call_ts", pa.int64()), ("op", pa.string()),
])


def copies_table(trace: Trace) -> pa.Table:
    """:func:`copy_table` as an Arrow table (the same columns when the trace has no copies)."""
    return pa.Table.from_pylist(copy_table(trace), schema=COPY_SCHEMA)
