"""Cross-stream waits the trace records: a stream told to wait for an event recorded on another stream.

``cudaEventRecord(e, W)`` marks the work launched on stream W so far; ``cudaStreamWaitEvent(S, e)`` holds the work
launched on stream S from then on until that work is done. Kineto writes the wait as a ``Stream Wait Event`` record
on S's timeline whose arguments name W (``wait_on_stream``) and the correlation id of the ``cudaEventRecord`` call
(``wait_on_cuda_event_record_corr_id``); its own correlation id is the ``cudaStreamWaitEvent`` call's. The work
waited for is the last launched on W before the record call began; the work that waits is the first launched on S
after the wait call began.
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
