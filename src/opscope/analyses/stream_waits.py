"""Cross-stream waits the trace records: a stream told to wait for an event recorded on another stream.

``cudaEventRecord(e, W)`` marks the work launched on stream W so far; ``cudaStreamWaitEvent(S, e)`` holds the work
launched on stream S from then on until that work is done. Kineto writes the wait as a ``Stream Wait Event`` record
on S's timeline whose arguments name W (``wait_on_stream``) and the correlation id of the ``cudaEventRecord`` call
(``wait_on_cuda_event_record_corr_id``); its own correlation id is the ``cudaStreamWaitEvent`` call's. The work
waited for is the last launched on W before the record call began; the work that waits is the first launched on S
after the wait call began.

Many traces keep the ``cudaStreamWaitEvent``/``hipStreamWaitEvent`` calls but not the record
(:func:`implied_waits`): the call says that the work launched next on its thread may have waited for work launched
before it on another stream, not which stream. Where that work started long after both its launch and the work
before it on its stream, the work it waited for is taken to be whichever other stream's work, launched before the
call, ended last before it started.
"""

from __future__ import annotations

import bisect

import pyarrow as pa
import pyarrow.compute as pc

from opscope.analyses.arrays import name_match, rows_where
from opscope.analyses.event_args import args_by_id
from opscope.analyses.links import LINKED_KINDS, device_links
from opscope.model.schema import kind_mask
from opscope.model.trace import Trace

#: The device-timeline record of a stream wait (Kineto's cuda_sync kind).
WAIT_RECORD = r"^Stream Wait Event$"
#: The host call that makes a stream wait for an event.
WAIT_CALL = r"^(cuda|hip)StreamWaitEvent"


def stream_waits(trace: Trace) -> list[tuple[int, int]]:
    """(row of the device work that waited, row of the work it waited for), one pair per wait record whose two ends
    the trace has, in the records' order."""
    ev = trace.select(["kind", "name", "ts_ns", "device", "stream", "correlation"])
    records = rows_where(pc.and_(kind_mask(ev, ("sync",)), name_match(ev["name"], WAIT_RECORD)))
    if not len(records):
        return []
    args = args_by_id(trace, records.to_pylist())
    call_ts = _runtime_starts(ev)
    queues = _launch_queues(trace, ev)
    pairs = []
    for row, device, stream, correlation in zip(records.to_pylist(), *(pc.take(ev[c], records).to_pylist()
                                                                       for c in ("device", "stream", "correlation"))):
        a = args.get(row, {})
        wait_on, record_id = a.get("wait_on_stream"), a.get("wait_on_cuda_event_record_corr_id")
        if not isinstance(wait_on, int) or not isinstance(record_id, int) or correlation is None:
            continue
        recorded_at, wait_at = call_ts.get(record_id), call_ts.get(correlation)
        if recorded_at is None or wait_at is None:
            continue
        waited = _last_launched_before(queues.get((device, wait_on)), recorded_at)
        waiting = _first_launched_from(queues.get((device, stream)), wait_at)
        if waited is not None and waiting is not None:
            pairs.append((waiting, waited))
    return pairs


def _runtime_starts(ev: pa.Table) -> dict[int, int]:
    """Start of each runtime call, by its correlation id."""
    runtime = ev.filter(pc.and_(kind_mask(ev, ("runtime",)), pc.is_valid(ev["correlation"])))
    return dict(zip(runtime["correlation"].to_pylist(), runtime["ts_ns"].to_pylist()))


def _launch_queues(trace: Trace, ev: pa.Table) -> dict[tuple[int | None, int | None], tuple[list[int], list[int]]]:
    """Per (device, stream): the start of each launch call and the device row it launched, in launch order."""
    links = device_links(trace)
    launched = pc.is_valid(links["launch_row"])
    rows = pc.filter(links["device_row"], launched)
    kinds_ok = pc.take(kind_mask(ev, LINKED_KINDS), rows)
    rows = pc.filter(rows, kinds_ok)
    launch_ts = pc.take(ev["ts_ns"], pc.filter(pc.filter(links["launch_row"], launched), kinds_ok)).to_pylist()
    queues: dict[tuple[int | None, int | None], list[tuple[int, int]]] = {}
    for row, device, stream, ts in zip(rows.to_pylist(), pc.take(ev["device"], rows).to_pylist(),
                                       pc.take(ev["stream"], rows).to_pylist(), launch_ts):
        queues.setdefault((device, stream), []).append((ts, row))
    out = {}
    for key, items in queues.items():
        items.sort()
        out[key] = ([ts for ts, _ in items], [row for _, row in items])
    return out


def _last_launched_before(queue: tuple[list[int], list[int]] | None, instant: int) -> int | None:
    if queue is None:
        return None
    k = bisect.bisect_left(queue[0], instant) - 1
    return queue[1][k] if k >= 0 else None


def _first_launched_from(queue: tuple[list[int], list[int]] | None, instant: int) -> int | None:
    if queue is None:
        return None
    k = bisect.bisect_left(queue[0], instant)
    return queue[1][k] if k < len(queue[1]) else None


def implied_waits(trace: Trace, cap_ns: int) -> list[tuple[int, int]]:
    """(row of the device work that waited, row of the work it waited for) that the wait calls imply (see the
    module): for the work launched next on a wait call's thread, only where it started more than ``cap_ns`` after
    both its launch ended and the work before it on its stream ended, and the other stream's work ended after both
    (it is what held the start); in launch order."""
    ev = trace.select(["kind", "name", "ts_ns", "dur_ns", "pid", "tid", "device", "stream"])
    calls = rows_where(pc.and_(kind_mask(ev, ("runtime",)), name_match(ev["name"], WAIT_CALL)))
    if not len(calls):
        return []
    links = device_links(trace)
    launched = pc.and_(pc.is_valid(links["launch_row"]), pc.take(kind_mask(ev, LINKED_KINDS), links["device_row"]))
    work = pc.filter(links["device_row"], launched).to_pylist()
    launch = pc.filter(links["launch_row"], launched).to_pylist()
    if not work:
        return []
    col = {c: ev[c].to_pylist() for c in ("ts_ns", "dur_ns", "pid", "tid", "device", "stream")}

    def end(row: int) -> int:
        return col["ts_ns"][row] + max(col["dur_ns"][row] or 0, 0)

    # per host thread, its launches in order; per stream, its work in start order (for the work before each)
    by_thread: dict[tuple, list[tuple[int, int, int]]] = {}
    for w, call in zip(work, launch):
        by_thread.setdefault((col["pid"][call], col["tid"][call]), []).append((col["ts_ns"][call], end(call), w))
    for items in by_thread.values():
        items.sort()
    queues = _launch_queues(trace, ev)
    reach: dict[tuple, tuple[list[int], list[int]]] = {}  # per stream, in launch order: the running maximum end, where
    for key, (_, rows) in queues.items():
        ends, last, top, at = [], [], -1, -1
        for i, row in enumerate(rows):
            if end(row) > top:
                top, at = end(row), i
            ends.append(top)
            last.append(at)
        reach[key] = (ends, last)
    before_on_stream: dict[int, int] = {}
    lanes: dict[tuple, list[int]] = {}
    for row in sorted(work, key=lambda r: (col["ts_ns"][r], r)):
        lane = lanes.setdefault((col["device"][row], col["stream"][row]), [])
        if lane:
            before_on_stream[row] = end(lane[-1])
        lane.append(row)
    # the last wait call before each launch on its thread (it covers the most work launched before it)
    last_call: dict[int, tuple[int, int]] = {}
    for call in calls.to_pylist():
        launches = by_thread.get((col["pid"][call], col["tid"][call]))
        if not launches:
            continue
        k = bisect.bisect_left(launches, (col["ts_ns"][call], -1, -1))
        if k < len(launches):
            last_call[launches[k][2]] = (col["ts_ns"][call], launches[k][1])
    pairs = []
    for waiting, (called_at, launch_end) in sorted(last_call.items(), key=lambda item: item[1]):
        start, device, stream = col["ts_ns"][waiting], col["device"][waiting], col["stream"][waiting]
        held_by = max(launch_end, before_on_stream.get(waiting, launch_end))
        if start - held_by <= cap_ns:
            continue
        best, best_end = None, held_by
        for (dev, other), (launched_at, rows) in queues.items():
            if dev != device or other == stream:
                continue
            # the event was recorded before the call, when is not known: of the work launched before the call, the
            # last to end no later than the start (ends grow along a stream: a bisect on their running maximum)
            ends, last = reach[(dev, other)]
            k = bisect.bisect_left(launched_at, called_at)
            j = bisect.bisect_right(ends, start, 0, k) - 1
            if j >= 0 and ends[j] > best_end:
                best, best_end = rows[last[j]], ends[j]
        if best is not None:
            pairs.append((waiting, best))
    return pairs
