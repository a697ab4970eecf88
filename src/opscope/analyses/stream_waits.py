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
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from opscope.analyses.arrays import (
    arange,
    combined,
    int64_values,
    name_match,
    native_loops,
    pair_numbers,
    rows_where,
    value_codes,
)
from opscope.analyses.event_args import args_by_id
from opscope.analyses.links import LINKED_KINDS, device_links
from opscope.model.buffers import true_positions, values_view
from opscope.model.memo import memoized
from opscope.model.schema import kind_mask
from opscope.model.trace import Trace

#: The device-timeline record of a stream wait (Kineto's cuda_sync kind).
WAIT_RECORD = r"^Stream Wait Event$"
#: The host call that makes a stream wait for an event.
WAIT_CALL = r"^(cuda|hip)StreamWaitEvent"
#: The search (in C, or in Python without it) tries each other stream of a late work's device in turn while that
#: costs at most this many tries per call and work; beyond (thousands of streams and of wait calls), a sweep per
#: device answers in n log n.
_TRIES_A_ROW = 64


def stream_waits(trace: Trace) -> list[tuple[int, int]]:
    """(row of the device work that waited, row of the work it waited for), one pair per wait record whose two ends
    the trace has, in the records' order."""
    ev = trace.select(["kind", "name", "ts_ns", "dur_ns", "device", "stream", "correlation"])
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
        waited = queues.last_before((device, wait_on), recorded_at)
        waiting = queues.first_from((device, stream), wait_at)
        if waited is not None and waiting is not None:
            pairs.append((waiting, waited))
    return pairs


def _runtime_starts(ev: pa.Table) -> dict[int, int]:
    """Start of each runtime call, by its correlation id."""
    runtime = ev.filter(pc.and_(kind_mask(ev, ("runtime",)), pc.is_valid(ev["correlation"])))
    return dict(zip(runtime["correlation"].to_pylist(), runtime["ts_ns"].to_pylist()))


@dataclass(frozen=True)
class _Queues:
    """The launched device work per (device, stream), in launch order: flat columns sorted by (device, stream,
    launch start, row) with each stream's slice of them; ``reach`` is the running maximum of the ends along each
    stream and ``reach_row`` the row whose end it is (the earliest on a tie)."""

    slices: dict[tuple[int | None, int | None], tuple[int, int]]
    launched_at: Sequence[int]
    rows: Sequence[int]
    reach: Sequence[int]
    reach_row: Sequence[int]

    def last_before(self, key: tuple[int | None, int | None], instant: int) -> int | None:
        """The row of the work on ``key``'s stream launched last before ``instant``."""
        lo, hi = self.slices.get(key, (0, 0))
        k = bisect.bisect_left(self.launched_at, instant, lo, hi) - 1
        return self.rows[k] if k >= lo else None

    def first_from(self, key: tuple[int | None, int | None], instant: int) -> int | None:
        """The row of the work on ``key``'s stream launched first at or after ``instant``."""
        lo, hi = self.slices.get(key, (0, 0))
        k = bisect.bisect_left(self.launched_at, instant, lo, hi)
        return self.rows[k] if k < hi else None


def _launch_queues(trace: Trace, ev: pa.Table) -> _Queues:
    """Per (device, stream): the start of each launch call and the device row it launched, in launch order, with the
    running maximum of their ends."""
    links = device_links(trace)
    launched = pc.is_valid(links["launch_row"])
    rows = pc.filter(links["device_row"], launched)
    kinds_ok = pc.take(kind_mask(ev, LINKED_KINDS), rows)
    rows = combined(pc.cast(pc.filter(rows, kinds_ok), pa.int64()))
    table = pa.table({
        "device_key": _keys(pc.take(ev["device"], rows)), "stream_key": _keys(pc.take(ev["stream"], rows)),
        "at": combined(pc.take(ev["ts_ns"], pc.filter(pc.filter(links["launch_row"], launched), kinds_ok))),
        "row": rows, "position": arange(len(rows)),
    }).sort_by([("device_key", "ascending"), ("stream_key", "ascending"), ("at", "ascending"), ("row", "ascending")])
    n = table.num_rows
    if not n:
        return _Queues({}, [], [], [], [])
    device_key, stream_key = combined(table["device_key"]), combined(table["stream_key"])
    opens = pa.concat_arrays([pa.array([True]), pc.or_(pc.not_equal(device_key.slice(1), device_key.slice(0, n - 1)),
                                                        pc.not_equal(stream_key.slice(1), stream_key.slice(0, n - 1)))])
    firsts = true_positions(opens)
    bounds = [*int64_values(firsts), n]
    row = combined(table["row"])
    first_rows = pc.take(row, firsts)
    keys = zip(pc.take(ev["device"], first_rows).to_pylist(), pc.take(ev["stream"], first_rows).to_pylist())
    position = combined(table["position"])
    # the streams in the order they first occur among the links (which one a tie between two goes to)
    first_seen = [pc.min(position.slice(bounds[i], bounds[i + 1] - bounds[i])).as_py() for i in range(len(firsts))]
    slices = {key: (bounds[i], bounds[i + 1]) for i, key in sorted(enumerate(keys), key=lambda k: first_seen[k[0]])}
    group = pc.subtract(pc.cumulative_sum(pc.cast(opens, pa.int64())), 1)
    reach, reach_row = _running_reach(_ends(ev, row), group, row)
    return _Queues(slices, int64_values(table["at"]), int64_values(row), reach, reach_row)


def _running_reach(ends: pa.Array, group: pa.Array, rows: pa.Array) -> tuple[Sequence[int], Sequence[int]]:
    """Along each group (numbered 0, 1, ... in order), the running maximum of ``ends`` and the row where it was
    reached (the earliest on a tie). Each group's ends are shifted past the previous group's, so that one running
    maximum serves all."""
    base = pc.min(ends).as_py()
    span = pc.max(ends).as_py() - base + 1
    shifted = pc.add_checked(pc.subtract_checked(ends, base), pc.multiply_checked(group, span))
    top = pc.cumulative_max(shifted)
    n = len(ends)
    raised = pa.concat_arrays([pa.array([True]), pc.greater(shifted.slice(1), top.slice(0, n - 1))])
    where = pc.fill_null_forward(pc.if_else(raised, rows, pa.scalar(None, pa.int64())))
    reach = pc.add(pc.subtract(top, pc.multiply(group, span)), base)
    return int64_values(reach), int64_values(where)


@memoized(keep=True)  # kept in the cache entry: the next command on the trace does not search again
def implied_waits(trace: Trace, cap_ns: int) -> list[list[int]]:
    """[row of the device work that waited, row of the work it waited for] that the wait calls imply (see the
    module): for the work launched next on a wait call's thread, only where it started more than ``cap_ns`` after
    both its launch ended and the work before it on its stream ended, and the other stream's work ended after both
    (it is what held the start); in launch order."""
    ev = trace.select(["kind", "name", "ts_ns", "dur_ns", "pid", "tid", "device", "stream"])
    calls = rows_where(pc.and_(kind_mask(ev, ("runtime",)), name_match(ev["name"], WAIT_CALL)))
    if not len(calls):
        return []
    links = device_links(trace)
    launched = pc.and_(pc.is_valid(links["launch_row"]), pc.take(kind_mask(ev, LINKED_KINDS), links["device_row"]))
    work, launch = pc.filter(links["device_row"], launched), pc.filter(links["launch_row"], launched)
    if not len(work):
        return []
    found = _implied_in_c(ev, calls, work, launch, cap_ns)
    if found is not None:
        return found
    late = _late_after_calls(ev, calls, work, launch, cap_ns)
    if not late:
        return []
    queues = _launch_queues(trace, ev)
    waiting_rows = pa.array([row for row, _, _ in late], pa.int64())
    facts = list(zip(*(pc.take(ev[c], waiting_rows).to_pylist() for c in ("ts_ns", "device", "stream"))))
    per_device: dict[int | None, int] = {}
    for dev, _ in queues.slices:
        per_device[dev] = per_device.get(dev, 0) + 1
    tries = sum(per_device.get(device, 0) for _, device, _ in facts)
    if tries > _TRIES_A_ROW * (len(calls) + len(work)):  # thousands of streams and of wait calls: not their product
        return _waits_by_sweep(late, facts, queues)
    return _waits_by_tries(late, facts, queues)


def _waits_by_tries(late: list[tuple[int, int, int]], facts: list[tuple], queues: _Queues) -> list[list[int]]:
    """:func:`implied_waits`'s pairs, trying each other stream of each late work's device (the definition)."""
    pairs = []
    for (waiting, called_at, held_by), (start, device, stream) in zip(late, facts):
        best, best_end = None, held_by
        for (dev, other), (lo, hi) in queues.slices.items():
            if dev != device or other == stream:
                continue
            # the event was recorded before the call, when is not known: of the work launched before the call, the
            # last to end no later than the start (ends grow along a stream: a bisect on their running maximum)
            k = bisect.bisect_left(queues.launched_at, called_at, lo, hi)
            j = bisect.bisect_right(queues.reach, start, lo, k) - 1
            if j >= lo and queues.reach[j] > best_end:
                best, best_end = queues.reach_row[j], queues.reach[j]
        if best is not None:
            pairs.append([waiting, best])
    return pairs


def _waits_by_sweep(late: list[tuple[int, int, int]], facts: list[tuple], queues: _Queues) -> list[list[int]]:
    """:func:`_waits_by_tries`'s pairs by one sweep per device, in n log n whatever the streams (as the C search's
    sweep): the late works by call, the device's launches before each call put in a tree over their running ends'
    values. Along a stream those values grow, so the largest at most a work's start among a stream's launches
    before its call is the one the tries find on that stream; the tree answers the largest over the other streams.
    Each leaf (a value) keeps its two first-seen streams (a tie goes to the stream seen first, as the tries' order
    gives it) with the row that reached it, each node two streams present below it."""
    seen = {key: i for i, key in enumerate(queues.slices)}  # the streams in the tries' order
    asks: dict[int | None, list[int]] = {}
    for i, (_, device, _) in enumerate(facts):
        asks.setdefault(device, []).append(i)  # the late works are in call order already
    found: dict[int, int] = {}
    for device, mine in asks.items():
        lanes = [(key, lo, hi) for key, (lo, hi) in queues.slices.items() if key[0] == device]
        points = sorted((queues.launched_at[k], k, seen[key]) for key, lo, hi in lanes for k in range(lo, hi))
        values = sorted({queues.reach[k] for _, k, _ in points})
        width = 1
        while width < len(values):
            width *= 2
        leaf: list[list[tuple[int, int]]] = [[] for _ in values]  # (seen, row), the first-seen two
        two: list[tuple[int, ...]] = [()] * (2 * width)  # per tree node: up to two distinct streams below it
        at = 0
        for i in mine:
            _, called_at, held_by = late[i]
            start, _, own = facts[i]
            while at < len(points) and points[at][0] < called_at:  # launched before the call
                _, k, lane = points[at]
                at += 1
                v = bisect.bisect_left(values, queues.reach[k])
                entries = leaf[v]
                if any(lane == other for other, _ in entries):
                    continue  # the same value and row of that stream again
                entries.append((lane, queues.reach_row[k]))
                entries.sort()
                del entries[2:]
                node = width + v
                two[node] = tuple(lane for lane, _ in entries)
                node //= 2
                while node:
                    two[node] = tuple(dict.fromkeys(two[2 * node] + two[2 * node + 1]))[:2]
                    node //= 2
            last = bisect.bisect_right(values, start) - 1
            own_lane = seen.get((device, own))
            v = _rightmost_other(two, width, last, own_lane) if last >= 0 else -1
            if v < 0 or values[v] <= held_by:
                continue
            found[i] = next(row for lane, row in leaf[v] if lane != own_lane)
    return [[late[i][0], found[i]] for i in sorted(found)]


def _rightmost_other(two: list[tuple[int, ...]], width: int, last: int, own_lane: int | None) -> int:
    """The rightmost leaf at or before ``last`` holding a stream other than the late work's own (-1: none)."""

    def other_below(node: int) -> bool:
        return any(lane != own_lane for lane in two[node])

    def search(node: int, lo: int, hi: int) -> int:
        if lo > last or not other_below(node):
            return -1
        if node >= width:
            return lo
        mid = (lo + hi) // 2
        right = search(2 * node + 1, mid + 1, hi)
        return right if right >= 0 else search(2 * node, lo, mid)

    return search(1, 0, width - 1)


def _implied_in_c(ev: pa.Table, calls: pa.Array, work: pa.Array, launch: pa.Array, cap_ns: int,
                  ) -> list[list[int]] | None:
    """:func:`implied_waits`'s pairs from its calls, work and launches by one C call (``_loops.implied_waits``: no
    table sorted or grouped, no column of ends); None where the C loops are not built, a start is missing or a time
    lies too far out (the definition runs)."""
    loops = native_loops()
    if loops is None or ev["ts_ns"].null_count:
        return None
    calls, work, launch = (combined(pc.cast(a, pa.int64())) for a in (calls, work, launch))
    both = pa.concat_arrays([calls, launch])
    thread, n_threads = _numbered(ev["pid"], ev["tid"], both)
    device, stream = _keys(pc.take(ev["device"], work)), _keys(pc.take(ev["stream"], work))
    lane, n_lanes = _numbered(device, stream, None)
    dur = ev["dur_ns"] if not ev["dur_ns"].null_count else pc.fill_null(ev["dur_ns"], 0)
    views = (values_view(a, "q") for a in (calls, thread.slice(0, len(calls)), work, launch, thread.slice(len(calls)),
                                           device, lane, ev["ts_ns"], dur))
    budget = _TRIES_A_ROW * (len(calls) + len(work))
    out = loops.implied_waits(*views, n_threads, n_lanes, cap_ns, budget)
    if out is None:
        return None
    pairs = memoryview(out).cast("q")
    return [[pairs[k], pairs[k + 1]] for k in range(0, len(pairs), 2)]


def _numbered(a: pa.Array | pa.ChunkedArray, b: pa.Array | pa.ChunkedArray, rows: pa.Array | None,
              ) -> tuple[pa.Array, int]:
    """Per row (of ``rows`` where given), the number of its (a, b) pair of values, 0 .. n - 1 (a null a value of its
    own), and n."""
    numbers, pairs = pair_numbers(a if rows is None else pc.take(a, rows), b if rows is None else pc.take(b, rows))
    return pc.cast(numbers, pa.int64()), len(pairs)


def _ends(ev: pa.Table, rows: pa.Array) -> pa.Array:
    """Each row's end: its start plus its duration (none or negative: 0)."""
    dur = pc.max_element_wise(pc.fill_null(combined(pc.take(ev["dur_ns"], rows)), 0), 0)
    return pc.add(combined(pc.take(ev["ts_ns"], rows)), dur)


def _keys(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Values as codes with null a value of its own (:func:`value_codes`: keys that group and compare as Python's
    values do, cheaper to sort than text)."""
    return value_codes(values)[0]


def _late_after_calls(ev: pa.Table, calls: pa.Array, work: pa.Array, launch: pa.Array, cap_ns: int,
                      ) -> list[tuple[int, int, int]]:
    """(work row, the wait call's start, what held the work as far as its launch and its own stream show) of the
    work launched next on each wait call's thread (a work's last such call), where it started more than ``cap_ns``
    after both its launch ended and the work before it on its stream ended; in the order of (call start, launch
    end)."""
    n_calls, n_launches = len(calls), len(launch)
    calls, work, launch = (combined(pc.cast(a, pa.int64())) for a in (calls, work, launch))
    # calls and launches in one order (thread, start, a call before a launch at its instant, launches by end then
    # work): each call's next launch on its thread is the first launch after it there
    both_rows = pa.concat_arrays([calls, launch])  # one code for a thread whether a call or a launch has it
    both = pa.table({
        "pid": _keys(pc.take(ev["pid"], both_rows)), "tid": _keys(pc.take(ev["tid"], both_rows)),
        "ts": pa.concat_arrays([combined(pc.take(ev["ts_ns"], calls)), combined(pc.take(ev["ts_ns"], launch))]),
        "tag": pa.concat_arrays([pa.repeat(pa.scalar(0, pa.int8()), n_calls),
                                   pa.repeat(pa.scalar(1, pa.int8()), n_launches)]),
        "end": pa.concat_arrays([pa.nulls(n_calls, pa.int64()), _ends(ev, launch)]),
        "work": pa.concat_arrays([pa.nulls(n_calls, pa.int64()), work]),
        "call": pa.concat_arrays([calls, pa.nulls(n_launches, pa.int64())]),
    }).sort_by([("pid", "ascending"), ("tid", "ascending"), ("ts", "ascending"), ("tag", "ascending"),
                ("end", "ascending"), ("work", "ascending")])
    position = arange(both.num_rows)
    next_launch = pc.fill_null_backward(pc.if_else(pc.equal(both["tag"], 1), position, pa.scalar(None, pa.int64())))
    is_call = pc.equal(both["tag"], 0)
    found = pc.and_(is_call, pc.is_valid(next_launch))
    at = pc.filter(next_launch, found)
    same_thread = pc.and_(pc.equal(pc.filter(both["pid"], found), pc.take(both["pid"], at)),
                          pc.equal(pc.filter(both["tid"], found), pc.take(both["tid"], at)))
    at = pc.filter(at, same_thread)
    matched = pa.table({"work": pc.take(both["work"], at), "end": pc.take(both["end"], at),
                        "call": pc.filter(pc.filter(both["call"], found), same_thread)})
    if not matched.num_rows:
        return []
    # a work's last call (the later call covers the most work launched before it)
    last = matched.group_by(["work", "end"]).aggregate([("call", "max")])
    wait_of = last["work"]
    launch_end = last["end"]
    called_at = combined(pc.take(ev["ts_ns"], last["call_max"]))
    before = _before_on_stream(ev, work)
    held_by = pc.max_element_wise(launch_end, pc.fill_null(pc.take(before, pc.index_in(wait_of, value_set=work)),
                                                           launch_end))
    start = combined(pc.take(ev["ts_ns"], wait_of))
    late = pc.greater(pc.subtract(start, held_by), cap_ns)
    rows = pa.table({"work": wait_of, "called": called_at, "end": launch_end, "held": held_by}).filter(late)
    rows = rows.sort_by([("called", "ascending"), ("end", "ascending"), ("work", "ascending")])
    return list(zip(rows["work"].to_pylist(), rows["called"].to_pylist(), rows["held"].to_pylist()))


def _before_on_stream(ev: pa.Table, work: pa.Array) -> pa.Array:
    """Per work row (in ``work``'s order), the end of the work before it on its stream (by start, then row; null for
    the first)."""
    order = pa.table({"device": _keys(pc.take(ev["device"], work)), "stream": _keys(pc.take(ev["stream"], work)),
                      "ts": combined(pc.take(ev["ts_ns"], work)), "row": work,
                      "at": arange(len(work))})
    order = order.sort_by([("device", "ascending"), ("stream", "ascending"), ("ts", "ascending"),
                           ("row", "ascending")])
    ends = _ends(ev, order["row"].combine_chunks())
    same = pc.and_(pc.equal(order["device"].slice(1), order["device"].slice(0, len(work) - 1)),
                   pc.equal(order["stream"].slice(1), order["stream"].slice(0, len(work) - 1)))
    previous = pa.concat_arrays([pa.nulls(1, pa.int64()),
                                 combined(pc.if_else(same, ends.slice(0, len(work) - 1),
                                                      pa.scalar(None, pa.int64())))])
    out = pc.take(previous, pc.sort_indices(order["at"]))
    return combined(out)
