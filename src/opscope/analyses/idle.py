"""Why the GPU sat idle: every idle nanosecond of a device put down to exactly one cause.

Idle time is the window minus the device's busy time (the union of its work, see ``gpu.py``) and minus its
unseen busy time (the stretch before its first recorded work spent on work the trace does not show). The causes,
by priority (the first that holds at an instant wins):

1. ``sync``: the host was inside a synchronising call (cudaStreamSynchronize, cudaDeviceSynchronize,
   cudaEventSynchronize, a blocking cudaMemcpy; their hip/cu equivalents) or a sync record of the device
   timeline (Kineto's cuda_sync) covers the instant.
2. ``input_pipeline``: the host was inside the data loader (an op, annotation or Python frame whose name
   holds "DataLoader"/"dataloader", e.g. ``enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__``).
3. ``launch_overhead``: a gap between two busy periods shorter than ``short_gap_ns`` whose next work was
   launched only after the gap began: short kernels finish faster than the host launches them.
4. ``kernel_gap``: a gap shorter than ``short_gap_ns`` whose next work was already launched when it began:
   the device's own turnaround between back-to-back kernels (HTA's "kernel wait"; graphs have them too).
5. ``host_wait``: no launch was outstanding (everything launched so far had started): the device waited
   for the host to queue work.
6. ``other``: none of these: work was queued but did not start for longer than a short gap (stream/event
   dependencies, a copy staged by the host), or the trace has no launches to tell host waits from the rest.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from opscope.analyses.arrays import combined, kept_rows, name_match, native_loops, rows_equal, share_pct
from opscope.analyses.intervals import merged_intervals, sweep
from opscope.model.buffers import values_view
from opscope.model.memo import memoized
from opscope.model.schema import kind_mask
from opscope.model.trace import Trace

if TYPE_CHECKING:
    from opscope.analyses.gpu import GpuAnalysis

IDLE_CAUSES = ("sync", "input_pipeline", "launch_overhead", "kernel_gap", "host_wait", "other")
#: Host calls that block until device work is done.
SYNC_CALLS = r"^(cuda|hip|cu)(Stream|Device|Event|Ctx|Thread)Synchronize|^(cuda|hip|cu)Memcpy(?!\w*Async)"
#: Names of the data loader's host events.
INPUT_PIPELINE = r"(?i)dataloader"
INPUT_KINDS = ("python", "user_annotation", "cpu_op")

IDLE_SCHEMA = pa.schema([
    ("device", pa.int64()), ("cause", pa.string()), ("idle_ns", pa.int64()), ("idle_pct", pa.float64()),
    ("window_pct", pa.float64()),
])
#: One line for the reader of the idle table.
IDLE_NOTE = ("each idle ns has one cause, the first that holds: sync (host in a synchronising call), input_pipeline "
             "(host in the DataLoader), launch_overhead (gap < {short} between busy periods, next work launched "
             "after it began), kernel_gap (such a gap with the next work already queued), host_wait (nothing "
             "launched and not yet started), other; idle_pct: share of the device's idle time")
_GAP, _SHORT_LATE, _SHORT_QUEUED, _SYNC, _INPUT, _OUTSTANDING = range(6)


def idle_causes(analysis: GpuAnalysis) -> pa.Table:
    """One row per device and cause (all five, in priority order): idle ns, share of the device's idle time and
    of the window."""
    work = analysis.work
    if work.table.num_rows == 0:
        return IDLE_SCHEMA.empty_table()
    rows = []
    for dev, covers, launches_known in _device_covers(analysis):
        by_cause = _attribute(covers, launches_known)
        idle = sum(by_cause.values())
        window = work.device_window_ns(dev)
        for i, cause in enumerate(IDLE_CAUSES):
            ns = by_cause.get(i, 0)
            rows.append({"device": dev, "cause": cause, "idle_ns": ns, "idle_pct": share_pct(ns, idle),
                         "window_pct": share_pct(ns, window)})
    return pa.Table.from_pylist(rows, schema=IDLE_SCHEMA)


def _device_covers(analysis: GpuAnalysis) -> Iterator[tuple[int, dict[int, tuple[pa.Array, pa.Array]], bool]]:
    """For each device: the spans of every cause's condition in the window (its idle gaps, the short gaps launched
    late or already queued, host sync, the data loader, work launched and not started), and whether its launches
    are known (host_wait needs them)."""
    work = analysis.work
    w0, w1 = work.window_start, work.window_end
    sync, data = _host_covers(analysis.trace, w0, w1)
    busy = analysis.device_not_idle
    busy = kept_rows(busy, pc.greater(busy["end"], busy["start"]))  # (the merged intervals all are: no copy)
    t = work.table
    pending = analysis.pending
    for dev in work.devices:
        gap_s, gap_e, short_late, short_queued = _gaps(rows_equal(busy, "group", dev), w0, w1,
                                                       analysis.short_gap_ns)
        mine = rows_equal(pending, "device", dev)
        # some work of the device has its launch in the trace (a mask: not a copy of the device's rows)
        launches_known = bool(pc.any(pc.and_(pc.equal(t["device"], dev), pc.is_valid(t["launch"]))).as_py())
        covers = {_GAP: (gap_s, gap_e), _SHORT_LATE: short_late, _SHORT_QUEUED: short_queued, _SYNC: sync,
                  _INPUT: data, _OUTSTANDING: (combined(mine["start"]), combined(mine["end"]))}
        yield dev, covers, launches_known


def _host_covers(trace, w0: int, w1: int) -> tuple[tuple[pa.Array, pa.Array], tuple[pa.Array, pa.Array]]:
    """Spans (clipped to the window) of host synchronisation and of the data loader."""
    ev = trace.select(["kind", "name", "ts_ns", "dur_ns"])
    is_sync = pc.or_(pc.and_(kind_mask(ev, ("runtime",)), name_match(ev["name"], SYNC_CALLS)),
                     kind_mask(ev, ("sync",)))
    is_data = pc.and_(kind_mask(ev, INPUT_KINDS), name_match(ev["name"], INPUT_PIPELINE))
    out = []
    for mask in (is_sync, is_data):
        spans = ev.select(["ts_ns", "dur_ns"]).filter(mask)
        s = combined(spans["ts_ns"]) if spans.num_rows else pa.array([], pa.int64())
        e = pc.add(s, combined(spans["dur_ns"])) if spans.num_rows else pa.array([], pa.int64())
        out.append((pc.max_element_wise(s, w0), pc.min_element_wise(e, w1)))
    return out[0], out[1]


def _gaps(busy: pa.Table, w0: int, w1: int, short_gap_ns: int):
    """The idle gaps of one device (its merged busy intervals in start order), and among the gaps between two
    busy periods shorter than ``short_gap_ns`` those whose next work was launched after the gap began (launch
    overhead) and those whose next work was already queued (kernel gap)."""
    s, e = combined(busy["start"]), combined(busy["end"])
    launch = combined(busy["launch"])
    k = len(s)
    gap_s = pa.concat_arrays([pa.array([w0], pa.int64()), e])
    gap_e = pa.concat_arrays([s, pa.array([w1], pa.int64())])
    next_launch = pa.concat_arrays([launch, pa.nulls(1, pa.int64())])
    if k == 0:
        interior = pa.array([False])
    else:  # gap 0 is before the first busy period, gap k after the last
        interior = pa.concat_arrays([pa.array([False]), pa.repeat(pa.scalar(True), k - 1), pa.array([False])])
    length = pc.subtract(gap_e, gap_s)
    short = pc.and_(interior, pc.less(length, short_gap_ns))
    late = pc.greater(next_launch, gap_s)
    short_late = pc.fill_null(pc.and_(short, late), False)
    short_queued = pc.fill_null(pc.and_(short, pc.invert(late)), False)
    keep = pc.greater(length, 0)
    gap_s, gap_e = pc.filter(gap_s, keep), pc.filter(gap_e, keep)
    short_late, short_queued = pc.filter(short_late, keep), pc.filter(short_queued, keep)
    return (gap_s, gap_e, (pc.filter(gap_s, short_late), pc.filter(gap_e, short_late)),
            (pc.filter(gap_s, short_queued), pc.filter(gap_e, short_queued)))


def _attribute(covers: dict[int, tuple[pa.Array, pa.Array]], launches_known: bool) -> dict[int, int]:
    """Sweep over the boundaries of every cover: each stretch of a gap goes to the first cause that holds (the
    definition; :func:`_attribute_by_measure` gives the same sums, but for causes with no time, without the sort)."""
    if len(covers[_GAP][0]) == 0:
        return {}
    measured = _attribute_by_measure(covers, launches_known)
    if measured is not None:
        return measured
    idle = _swept(covers, launches_known)
    sums = idle.group_by("cause", use_threads=False).aggregate([("seg", "sum")])
    return dict(zip(sums["cause"].to_pylist(), sums["seg_sum"].to_pylist()))


def _swept(covers: dict[int, tuple[pa.Array, pa.Array]], launches_known: bool) -> pa.Table:
    """The sweep of :func:`_attribute`: one row per stretch of the gaps between two boundaries of any cover, with
    its start ``t``, length ``seg`` and ``cause`` (the index in IDLE_CAUSES of the first condition that holds)."""
    parts = []
    for code, (s, e) in covers.items():
        keep = pc.greater(e, s)
        s, e = pc.filter(s, keep), pc.filter(e, keep)
        if len(s):
            parts.append(pa.table({"code": pa.repeat(pa.scalar(code, pa.int8()), len(s)), "start": s, "end": e}))
    points = sweep(pa.concat_tables(parts))
    code, delta, seg = (combined(points[c]) for c in ("code", "delta", "seg"))
    cause, in_gap = _levels_in_c(code, delta, launches_known) or _levels(code, delta, covers, launches_known)
    return pa.table({"cause": cause, "t": combined(points["t"]), "seg": seg}).filter(in_gap)


#: The conditions of a stretch's cause, in the order of IDLE_CAUSES (then host wait, then other).
_CONDITIONS = (_SYNC, _INPUT, _SHORT_LATE, _SHORT_QUEUED)


def _levels(code: pa.Array, delta: pa.Array, covers: dict, launches_known: bool) -> tuple[pa.Array, pa.Array]:
    """Per boundary (in sweep order), the cause of the stretch after it (the index in IDLE_CAUSES of the first
    condition that holds: a cover open over it, then no launch outstanding) and whether a gap is open over it."""
    n = len(code)
    active = {}
    for c in covers:
        level = pc.cumulative_sum(pc.if_else(pc.equal(code, c), delta, 0))
        active[c] = pc.greater(level, 0)
    host_wait = pc.invert(active[_OUTSTANDING]) if launches_known else pa.repeat(pa.scalar(False), n)
    cause = pa.repeat(pa.scalar(len(IDLE_CAUSES) - 1, pa.int64()), n)
    for i, holds in reversed(list(enumerate([*(active[c] for c in _CONDITIONS), host_wait]))):
        cause = pc.if_else(holds, i, cause)
    return cause, active[_GAP]


def _levels_in_c(code: pa.Array, delta: pa.Array, launches_known: bool) -> tuple[pa.Array, pa.Array] | None:
    """:func:`_levels` in one pass in C (``idle_levels``), where built; else None."""
    loops = native_loops()
    n = len(code)
    if loops is None or code.null_count or delta.null_count:
        return None
    cause, keep = bytearray(8 * n), bytearray(n)
    loops.idle_levels(values_view(code, "b"), values_view(delta, "q"), bytes(_CONDITIONS),
                      _OUTSTANDING if launches_known else -1, _GAP, cause, keep)
    return (pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(cause)]),
            pc.cast(pa.Array.from_buffers(pa.uint8(), n, [None, pa.py_buffer(keep)]), pa.bool_()))


def cause_spans(analysis: GpuAnalysis) -> dict[int, dict[str, tuple[pa.Array, pa.Array]]]:
    """Per device and cause, the stretches of idle time :func:`idle_causes` puts down to that cause, as disjoint
    (starts, ends) int64 arrays in time order: where a cause's idle time is, not only how much (the what-if's
    ``idle:CAUSE`` and the gap causes need the instants). Causes with no time are left out. Computed once per trace
    and gap length (the trace's memo)."""
    return _cause_spans_of(analysis.trace, analysis.short_gap_ns, analysis)


@memoized(ignore=("analysis",))
def _cause_spans_of(trace: Trace, short_gap_ns: int, analysis: GpuAnalysis,
                    ) -> dict[int, dict[str, tuple[pa.Array, pa.Array]]]:
    out: dict[int, dict[str, tuple[pa.Array, pa.Array]]] = {}
    if analysis.work.table.num_rows == 0:
        return out
    for dev, covers, launches_known in _device_covers(analysis):
        if len(covers[_GAP][0]) == 0:
            continue
        found = _stretches_in_c(covers, launches_known)
        out[dev] = found if found is not None else _stretches(covers, launches_known)
    return out


def _stretches(covers: dict[int, tuple[pa.Array, pa.Array]], launches_known: bool,
               ) -> dict[str, tuple[pa.Array, pa.Array]]:
    """One device's stretches per cause (the definition): the sweep's, those that touch joined."""
    idle = _swept(covers, launches_known)
    idle = idle.filter(pc.greater(idle["seg"], 0))
    cause = combined(idle["cause"])
    mine: dict[str, tuple[pa.Array, pa.Array]] = {}
    for code in pc.unique(cause).to_pylist():  # in the order each cause first holds
        stretch = idle.filter(pc.equal(cause, code))
        mine[IDLE_CAUSES[code]] = _joined(combined(stretch["t"]), combined(pc.add(stretch["t"], stretch["seg"])))
    return mine


def _stretches_in_c(covers: dict[int, tuple[pa.Array, pa.Array]], launches_known: bool,
                    ) -> dict[str, tuple[pa.Array, pa.Array]] | None:
    """:func:`_stretches` by one merge in C of each cover's union (``idle_stretches``: no sort of every boundary, no
    table of them), where built; else None."""
    loops = native_loops()
    if loops is None:
        return None
    empty = (pa.array([], pa.int64()), pa.array([], pa.int64()))
    lists = [_union([covers[code]]) for code in (_GAP, *_CONDITIONS)]
    lists.append(_union([covers[_OUTSTANDING]]) if launches_known else empty)  # only host_wait reads it
    views = [values_view(a, "q") for pair in lists for a in pair]
    count = loops.idle_stretches(*views, launches_known, None, None, None)
    if count is None:
        return None
    cause, start, end = bytearray(count), bytearray(8 * count), bytearray(8 * count)
    loops.idle_stretches(*views, launches_known, cause, start, end)
    codes = pa.Array.from_buffers(pa.int8(), count, [None, pa.py_buffer(cause)])
    starts = pa.Array.from_buffers(pa.int64(), count, [None, pa.py_buffer(start)])
    ends = pa.Array.from_buffers(pa.int64(), count, [None, pa.py_buffer(end)])
    # the stretches by cause in one stable sort (each cause's in time order), each cause a slice of it
    order = pc.sort_indices(codes)
    starts, ends = starts.take(order), ends.take(order)
    counts = dict(zip(*(pc.value_counts(codes).flatten()[k].to_pylist() for k in (0, 1))))
    at = {code: sum(counts[c] for c in counts if c < code) for code in counts}
    return {IDLE_CAUSES[code]: (starts.slice(at[code], counts[code]), ends.slice(at[code], counts[code]))
            for code in pc.unique(codes).to_pylist()}  # in the order each cause first holds


def _joined(starts: pa.Array, ends: pa.Array) -> tuple[pa.Array, pa.Array]:
    """Disjoint stretches in time order with those that touch (one's end the next one's start) made one span."""
    n = len(starts)
    if n < 2:
        return starts, ends
    opens = pa.concat_arrays([pa.array([True]), pc.not_equal(starts.slice(1), ends.slice(0, n - 1))])
    closes = pa.concat_arrays([opens.slice(1), pa.array([True])])
    return pc.filter(starts, opens), pc.filter(ends, closes)


def _attribute_by_measure(covers: dict[int, tuple[pa.Array, pa.Array]], launches_known: bool) -> dict[int, int] | None:
    """:func:`_attribute`'s sums as lengths of sets instead of a sweep over every boundary (no sort of them all):
    each cause's time is the gaps' time inside one union of conditions less their time inside the union of the
    conditions before it (sync, then sync or input, then sync, input or launched work outstanding), per class of
    gap (short and launched late, short and queued, the rest). The gaps and the two short classes must each be
    disjoint and in time order, the short classes parts of the gaps and apart from each other (as :func:`_gaps`
    makes them); None where they are not or the C loops are not built: the sweep (the definition) then runs.
    Causes with no time are left out."""
    loops = native_loops()
    if loops is None:
        return None
    sync, data, outstanding = covers[_SYNC], covers[_INPUT], covers[_OUTSTANDING]
    u_sync = _union([sync])
    u_host = _union([sync, data])
    u_all = _union([u_host, outstanding]) if launches_known else u_host
    classes = [_nonempty(covers[code]) for code in (_GAP, _SHORT_LATE, _SHORT_QUEUED)]
    measure: list[list[int]] = []  # per class: its length, then its overlap with each union
    for spans in classes:
        row = [int(pc.sum(pc.subtract(spans[1], spans[0])).as_py() or 0)]
        for union in (u_sync, u_host, u_all):
            found = loops.overlap_ns(*(values_view(a, "q") for a in (*spans, *union)))
            if found is None:
                return None
            row.append(found)
        measure.append(row)
    (gaps, g_sync, g_host, g_all), (late, _, late_host, late_all), (queued, _, queued_host, queued_all) = measure
    # the short classes must be parts of the gaps and apart (as _gaps makes them), else the sweep decides
    within = [loops.overlap_ns(*(values_view(a, "q") for a in (*short, *classes[0]))) for short in classes[1:]]
    apart = loops.overlap_ns(*(values_view(a, "q") for a in (*classes[1], *classes[2])))
    if within != [late, queued] or apart != 0:
        return None
    # the rest of the gaps (neither short class): the gaps' time less the short classes' (subsets of the gaps)
    rest, rest_host, rest_all = gaps - late - queued, g_host - late_host - queued_host, g_all - late_all - queued_all
    sums = {0: g_sync, 1: g_host - g_sync, 2: late - late_host, 3: queued - queued_host}
    if launches_known:  # host wait: the rest's time with no launched work outstanding
        sums[4], sums[5] = rest - rest_all, rest_all - rest_host
    else:
        sums[5] = rest - rest_host
    return {cause: ns for cause, ns in sums.items() if ns}


def _nonempty(spans: tuple[pa.Array, pa.Array]) -> tuple[pa.Array, pa.Array]:
    """The spans of positive length, as int64 arrays without nulls (the arrays themselves where every span has)."""
    s, e = (pc.cast(combined(a), pa.int64()) for a in spans)
    keep = pc.greater(e, s)
    if pc.all(keep).as_py():
        return s, e
    return pc.filter(s, keep), pc.filter(e, keep)


def _union(parts: list[tuple[pa.Array, pa.Array]]) -> tuple[pa.Array, pa.Array]:
    """The union of the spans of every part as disjoint spans in time order; a single part whose spans already are
    (apart from each other and in order: the device's gaps, its short gaps) as it is."""
    kept = [_nonempty(p) for p in parts]
    if len(kept) == 1:
        s, e = kept[0]
        if len(s) < 2 or pc.all(pc.greater(s.slice(1), e.slice(0, len(e) - 1))).as_py():
            return s, e
    s = pa.concat_arrays([k[0] for k in kept])
    e = pa.concat_arrays([k[1] for k in kept])
    if len(s) == 0:
        return s, e
    if len(s) > 1 and not pc.all(pc.greater_equal(s.slice(1), s.slice(0, len(s) - 1))).as_py():
        order = pc.sort_indices(s)
        s, e = s.take(order), e.take(order)
    merged = merged_intervals(pa.repeat(pa.scalar(0, pa.int64()), len(s)), s, e, presorted=True)
    return combined(merged["start"]), combined(merged["end"])


GAP_SCHEMA = pa.schema([
    ("device", pa.int64()), ("start_ns", pa.int64()), ("dur_ns", pa.int64()), ("cause", pa.string()),
    ("cause_ns", pa.int64()),
])


def longest_gaps(analysis: GpuAnalysis, top: int = 10) -> pa.Table:
    """The ``top`` longest idle gaps of each device in the window (unseen busy time is no gap), longest first, each
    with the cause that holds for most of it and for how long, as :func:`idle_causes` attributes idle time."""
    work = analysis.work
    if work.table.num_rows == 0 or top <= 0:
        return GAP_SCHEMA.empty_table()
    rows = []
    for dev, covers, launches_known in _device_covers(analysis):
        gap_s, gap_e = covers[_GAP]
        if not len(gap_s):
            continue
        length = pc.subtract(gap_e, gap_s)
        order = pc.sort_indices(pa.table({"len": length, "start": gap_s}),
                                [("len", "descending"), ("start", "ascending")])[:top]
        for i in order.to_pylist():
            s, e = gap_s[i].as_py(), gap_e[i].as_py()
            # the same attribution as idle_causes, over this one gap
            one = {code: _within(spans, s, e) for code, spans in covers.items()}
            by_cause = _attribute(one, launches_known)
            code, ns = max(by_cause.items(), key=lambda kv: (kv[1], -kv[0])) if by_cause else \
                (len(IDLE_CAUSES) - 1, e - s)
            rows.append({"device": dev, "start_ns": s, "dur_ns": e - s, "cause": IDLE_CAUSES[code], "cause_ns": ns})
    return pa.Table.from_pylist(rows, schema=GAP_SCHEMA)


def _within(spans: tuple[pa.Array, pa.Array], s: int, e: int) -> tuple[pa.Array, pa.Array]:
    """The spans clipped to ``[s, e)`` (a sweep over one gap need not see the rest of the trace)."""
    starts, ends = spans
    keep = pc.and_(pc.less(starts, e), pc.greater(ends, s))
    return (pc.max_element_wise(pc.filter(starts, keep), s), pc.min_element_wise(pc.filter(ends, keep), e))
