"""Where GPU time goes: busy time per device and stream by kind of work, idle time, true concurrency, launches.

Definitions (``opscope gpu --help`` says the same):

- **window**: the profiled window, from the start of the first ``ProfilerStep#N`` to the end of the last one;
  a trace without steps: from the start of its first event (of any kind) to the end of its last. Device
  work is clipped to the window and every percentage is a share of it, less a device's unseen busy time.
- **unseen busy**: a device's first recorded work that started more than :data:`QUEUED_WAIT_NS` after the call
  that launched it returned was queued behind work the trace does not show (launched before the profiler
  started: graph-replay servers keep the queue full). From that launch to that start the device was busy with
  unseen work, and from the window's start when the wait is longer than the time the trace ran before the
  launch (the backlog predates the trace). That stretch is neither busy nor idle: it is left out of the device's
  window, its idle time and every saving, and shown as ``unseen_busy_ns``.
- **work**: kernels, collectives (``comm``: NCCL/RCCL kernels), memcpys and memsets. Sync records and GPU
  annotations on the device timeline are not work: they say what the host waited for, not what ran.
- **busy**: the union of the work's intervals (overlaps count once); a device's busy time is the union over
  its streams. The compute/comm/memset/memcpy columns are unions of that kind of work, so on a device row
  they overlap where streams ran concurrently and may add up to more than busy.
- **clipping**: a stream runs its work in order, so an event that ends after the next event on its stream
  starts (ROCm writes such durations; µs rounding of ns times makes them too) is cut at that start and
  counted. Kernels of one graph launch (same correlation id) are not cut: a graph's branches run concurrently.
- **concurrent**: time two or more streams of the device were busy at once (a sweep over the per-stream
  unions), whatever the number of host threads that launched the work.
- **launch delay**: per launch (correlation id), the start of its first device event minus the start of the
  runtime call; a CUDA/HIP graph launch counts once. Negative delays mean CPU/GPU clock skew.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

import pyarrow as pa
import pyarrow.compute as pc

from opscope.analyses.arrays import combined, count_by, native_loops, rows_equal, share_pct
from opscope.analyses.intervals import (
    covered_by_group,
    covered_spans,
    covered_within,
    merged_intervals,
    sweep,
)
from opscope.analyses.links import LINKED_KINDS, correlated_launches
from opscope.analyses.steps import step_table, step_window, window_line
from opscope.model.buffers import values_view
from opscope.model.memo import memoized
from opscope.model.schema import kind_mask
from opscope.model.trace import Trace

#: Kinds of device work (sync records and annotations are not work).
DEVICE_WORK = LINKED_KINDS  # the rows of links.correlated_launches, which _launches reads
MEMCPY_DIRECTIONS = ("htod", "dtoh", "dtod", "ptop", "other")
#: Category codes of work rows: 0 compute, 1 comm, 2 memset, 3.. memcpy by direction.
CATEGORIES = ("compute", "comm", "memset") + tuple(f"memcpy_{d}" for d in MEMCPY_DIRECTIONS)
COMPUTE, COMM, MEMSET, MEMCPY = 0, 1, 2, 3
_ANY_MEMCPY = len(CATEGORIES)  # extra group code: memcpy of any direction
_CODES = 16  # group key = id * _CODES + category
_KIND_CODE = {"kernel": COMPUTE, "comm": COMM, "memset": MEMSET, "memcpy": MEMCPY}
# "Memcpy HtoD (Pageable -> Device)" (CUPTI/Kineto), "CopyHostToDevice" (rocprof), "hipMemcpyDtoH"
_DIRECTION_SHORT = re.compile(r"(?i)memcpy\w*?\s*([hdpa])\s*to\s*([hdpa])(?![a-z])")
_PLACE = r"(host|device|peer|pinned|pageable)"
_DIRECTION_WORDS = re.compile(rf"(?i){_PLACE}\s*(?:to|->)\s*{_PLACE}")
_WORD_LETTER = {"host": "h", "pinned": "h", "pageable": "h", "device": "d", "peer": "p"}
_DIRECTION_CODE = {"hd": 0, "dh": 1, "dd": 2, "pp": 3}
_COPY_NAME = re.compile(r"(?i)memcpy|dma")
#: A first recorded work that waited longer than this after its launch call returned was queued behind unseen
#: work. An idle device starts work within tens of µs of the launch (at most 22 µs from the call's end on the
#: H100, MI300 and B200 traces of ../shared); a backlog left by an earlier, unrecorded step is milliseconds.
QUEUED_WAIT_NS = 100_000
_FILL_NAME = re.compile(r"(?i)memset")

BREAKDOWN_SCHEMA = pa.schema([
    ("device", pa.int64()), ("stream", pa.int64()), ("events", pa.int64()),
    ("compute_ns", pa.int64()), ("memcpy_ns", pa.int64()),
    *[(f"memcpy_{d}_ns", pa.int64()) for d in MEMCPY_DIRECTIONS],
    ("memset_ns", pa.int64()), ("comm_ns", pa.int64()), ("busy_ns", pa.int64()), ("idle_ns", pa.int64()),
    ("unseen_busy_ns", pa.int64()), ("window_ns", pa.int64()), ("busy_pct", pa.float64()),
    ("concurrent_ns", pa.int64()), ("clipped", pa.int64()),
])

LAUNCH_SCHEMA = pa.schema([
    ("device", pa.int64()), ("streams", pa.int64()), ("launch_threads", pa.int64()), ("concurrent_ns", pa.int64()),
    ("concurrent_pct", pa.float64()), ("max_concurrent_streams", pa.int64()), ("kernels", pa.int64()),
    ("kernels_per_step", pa.float64()), ("median_kernel_ns", pa.int64()), ("launches", pa.int64()),
    ("graph_launches", pa.int64()), ("launch_delay_median_ns", pa.int64()), ("launch_delay_p90_ns", pa.int64()),
    ("skewed_launches", pa.int64()),
])


@lru_cache(maxsize=4096)  # called per copy row: a trace has a few distinct copy names
def direction_code(name: str | None) -> int:
    """Index into :data:`MEMCPY_DIRECTIONS` of a memcpy event's name ("Memcpy HtoD (Pageable -> Device)")."""
    if not name:
        return len(MEMCPY_DIRECTIONS) - 1
    m = _DIRECTION_SHORT.search(name)
    if m:
        pair = (m.group(1) + m.group(2)).lower()
    else:
        m = _DIRECTION_WORDS.search(name)
        pair = _WORD_LETTER[m.group(1).lower()] + _WORD_LETTER[m.group(2).lower()] if m else ""
    return _DIRECTION_CODE.get(pair, len(MEMCPY_DIRECTIONS) - 1)


# --- the device work, prepared once ----------------------------------------------------------------------

@dataclass
class GpuWork:
    """The device work of a trace, one row per event, with what every GPU analysis needs.

    ``table`` is sorted by (device, stream) and time; columns: ``device``, ``stream``, ``sid`` (dense id of the
    (device, stream) pair), ``cat`` (a :data:`CATEGORIES` index), ``raw_start``/``raw_end`` (as the trace says),
    ``cut_end`` (the end cut at the next event's start on the stream), ``cut`` (whether it was), ``start``/``end``
    (cut, then clipped to the window; ``end >= start``), ``correlation``, ``launch`` (ts of the runtime call with
    the same correlation id; null when none), ``thread`` (a number for the host thread of that call), ``step``.
    """

    window_start: int
    window_end: int
    window_from_steps: bool
    steps: int
    table: pa.Table
    clipped: int
    last_step_start: int | None = None
    devices: list[int] = field(default_factory=list)
    unseen: dict[int, UnseenBusy] = field(default_factory=dict)

    @property
    def window_ns(self) -> int:
        return max(0, self.window_end - self.window_start)

    def device_window_ns(self, device: int) -> int:
        """The part of the window in which the device's state is known: the window less its unseen busy time."""
        unseen = self.unseen.get(device)
        return self.window_ns - (unseen.ns if unseen else 0)


@dataclass(frozen=True)
class UnseenBusy:
    """A device's stretch before its first recorded work, spent on work the trace does not show."""

    start: int
    end: int  #: the first recorded work's start
    launch: int  #: start of the call that launched that work
    wait_ns: int  #: from the end of that call to the work's start

    @property
    def ns(self) -> int:
        return self.end - self.start


def device_work(trace: Trace) -> GpuWork:
    """Select and prepare the device work: categories, launches, per-stream clipping, the window."""
    ev = trace.select(["kind", "name", "ts_ns", "dur_ns", "device", "stream", "correlation", "step", "pid", "tid"])
    steps = trace.steps
    w0, w1 = step_window(trace)
    last_step = pc.max(steps["ts_ns"]).as_py() if steps.num_rows else None
    work = ev.filter(kind_mask(ev, DEVICE_WORK))
    n = work.num_rows
    if n == 0:
        return GpuWork(w0, w1, bool(steps.num_rows), steps.num_rows, _empty_work(), 0, last_step)
    cat = _categories(work["kind"], work["name"])
    launch, launch_end, thread = _launches(trace, ev)
    device = pc.fill_null(combined(work["device"]), -1)
    stream = pc.fill_null(combined(work["stream"]), -1)
    t = pa.table({
        "device": device, "stream": stream, "cat": cat,
        "raw_start": combined(work["ts_ns"]), "raw_end": pc.add(combined(work["ts_ns"]), combined(work["dur_ns"])),
        "correlation": combined(work["correlation"]), "launch": launch, "launch_end": launch_end, "thread": thread,
        "step": combined(work["step"]),
    })
    del work, ev
    # Stable: each stream's rows stay in time order (start, longest first). One device and stream (many traces):
    # in that order already.
    if pc.count_distinct(device).as_py() > 1 or pc.count_distinct(stream).as_py() > 1:
        t = t.take(pc.sort_indices(t, [("device", "ascending"), ("stream", "ascending")]))
    d, s = combined(t["device"]), combined(t["stream"])
    changed = pa.concat_arrays([pa.array([True]), pc.or_(pc.not_equal(d.slice(1), d.slice(0, n - 1)),
                                                         pc.not_equal(s.slice(1), s.slice(0, n - 1)))])
    sid = pc.subtract(pc.cumulative_sum(pc.cast(changed, pa.int64())), 1)
    start = combined(t["raw_start"])
    end = combined(t["raw_end"])
    corr = combined(t["correlation"])
    # A stream runs in order: cut an event at the start of the next one on its stream (not within a graph).
    same_next = pa.concat_arrays([pc.invert(changed.slice(1)), pa.array([False])])
    next_start = pa.concat_arrays([start.slice(1), pa.array([0], pa.int64())])
    next_corr = pa.concat_arrays([corr.slice(1), pa.nulls(1, pa.int64())])
    same_graph = pc.fill_null(pc.equal(corr, next_corr), False)
    cut = pc.and_(pc.and_(same_next, pc.greater(end, next_start)), pc.invert(same_graph))
    clipped = int(pc.sum(pc.cast(cut, pa.int64())).as_py() or 0)
    end = pc.if_else(cut, pc.max_element_wise(start, next_start), end)
    start_w = pc.min_element_wise(pc.max_element_wise(start, w0), w1)
    end_w = pc.max_element_wise(pc.min_element_wise(end, w1), start_w)
    t = t.append_column("sid", sid).append_column("start", start_w).append_column("end", end_w) \
        .append_column("cut_end", end).append_column("cut", cut)
    devices = pc.unique(d).sort().to_pylist()
    return GpuWork(w0, w1, bool(steps.num_rows), steps.num_rows, t, clipped, last_step, devices,
                   unseen_busy(t, w0, w1))


def unseen_busy(table: pa.Table, w0: int, w1: int) -> dict[int, UnseenBusy]:
    """Per device whose first recorded work in the window waited in the queue (see the module's docstring): the
    stretch the device spent on work the trace does not show."""
    reach = table.select(["device", "raw_start", "launch", "launch_end"]) \
        .filter(pc.and_(pc.greater(table["cut_end"], w0), pc.less(table["raw_start"], w1)))
    if reach.num_rows == 0:
        return {}
    first = reach.group_by("device", use_threads=False).aggregate([("raw_start", "min")])
    out = {}
    for device, start in zip(first["device"].to_pylist(), first["raw_start_min"].to_pylist()):
        if start <= w0:
            continue  # recorded work covers the window's start: nothing unseen before it
        row = reach.filter(pc.and_(pc.equal(reach["device"], device), pc.equal(reach["raw_start"], start)))
        row = row.filter(pc.is_valid(row["launch_end"]))
        if row.num_rows == 0:
            continue  # no launch to tell a queued start from an idle device
        launch, launch_end = row["launch"][0].as_py(), row["launch_end"][0].as_py()
        wait = start - launch_end
        if wait <= QUEUED_WAIT_NS:
            continue
        # A backlog longer than the time the trace ran before the launch was there when the trace began.
        begin = w0 if wait >= launch - w0 else max(w0, launch)
        out[device] = UnseenBusy(begin, start, launch, wait)
    return out


def stream_levels(stream_busy: pa.Table) -> dict[int, tuple[int, int]]:
    """``{device: (ns with >= 2 streams busy, most streams busy at once)}`` from the merged busy intervals of each
    stream (:attr:`GpuAnalysis.stream_busy`: ``device``, ``group`` the stream, ``start``, ``end``): a sweep over
    their boundaries per device (the definition), at equal times ends first."""
    sb = stream_busy.filter(pc.greater(stream_busy["end"], stream_busy["start"]))
    if sb.num_rows == 0:
        return {}
    found = _stream_levels_in_c(sb)
    if found is not None:
        return found
    points = sweep(pa.table({"device": sb["device"], "start": sb["start"], "end": sb["end"]}), by="device")
    level = pc.cumulative_sum(combined(points["delta"]))
    dev, seg = combined(points["device"]), combined(points["seg"])
    over = pc.if_else(pc.greater_equal(level, 2), seg, 0)
    agg = pa.table({"device": dev, "over": over, "level": level}).group_by("device", use_threads=False) \
        .aggregate([("over", "sum"), ("level", "max")])
    return {d: (o, lv) for d, o, lv in zip(agg["device"].to_pylist(), agg["over_sum"].to_pylist(),
                                            agg["level_max"].to_pylist())}


def _stream_levels_in_c(stream_busy: pa.Table) -> dict[int, tuple[int, int]] | None:
    """:func:`stream_levels` by ``_loops.stream_levels`` (a merge of each device's streams, no sort), or
    None where the C loops are not built, a column holds nulls, or the rows are not grouped by stream in time order:
    the sweep (the definition) then runs."""
    loops = native_loops()
    columns = [combined(stream_busy[c]) for c in ("device", "group", "start", "end")]
    if loops is None or any(c.type != pa.int64() or c.null_count for c in columns):
        return None
    found = loops.stream_levels(*(values_view(c, "q") for c in columns))
    return None if found is None else {device: (over, most) for device, over, most in found}


def _empty_work() -> pa.Table:
    i64 = pa.array([], pa.int64())
    return pa.table({"device": i64, "stream": i64, "cat": pa.array([], pa.int8()), "raw_start": i64,
                     "raw_end": i64, "correlation": i64, "launch": i64, "launch_end": i64, "thread": i64,
                     "step": i64, "sid": i64,
                     "start": i64, "end": i64, "cut_end": i64, "cut": pa.array([], pa.bool_())})


def _categories(kind: pa.ChunkedArray, name: pa.ChunkedArray) -> pa.Array:
    """Category code per row, computed once per distinct kind and name (dictionaries), not per row.

    memcpy rows get their direction from the name; a ``kernel`` whose name says it is a copy or a fill
    (``Memcpy...``/``dma...``/``Memset...``, as MTIA and some writers record them) counts as memcpy/memset.
    """
    base = _map_values(kind, lambda k: _KIND_CODE.get(k, COMPUTE))
    by_name = _map_values(name, _name_category)
    is_memcpy = pc.equal(base, MEMCPY)
    renamed = pc.and_(pc.equal(base, COMPUTE), pc.greater_equal(by_name, 0))
    if pc.any(is_memcpy).as_py():
        direction = _map_values(name, lambda n: MEMCPY + direction_code(n))
        base = pc.if_else(is_memcpy, direction, base)
    return pc.if_else(renamed, by_name, base)


def _name_category(name: str | None) -> int:
    """MEMCPY + direction for copy names, MEMSET for fills, -1 for anything else."""
    if not name:
        return -1
    if _COPY_NAME.match(name):
        return MEMCPY + direction_code(name)
    if _FILL_NAME.match(name):
        return MEMSET
    return -1


def _map_values(column: pa.ChunkedArray, fn) -> pa.Array:
    memo: dict = {}

    def code(v):
        if v not in memo:
            memo[v] = fn(v)
        return memo[v]

    chunks = []
    for chunk in column.chunks:
        if pa.types.is_dictionary(chunk.type):
            codes = pa.array([code(v) for v in chunk.dictionary.to_pylist()], pa.int8())
            chunks.append(codes.take(chunk.indices))
        else:
            chunks.append(pa.array([code(v) for v in chunk.to_pylist()], pa.int8()))
    return pa.concat_arrays(chunks) if chunks else pa.array([], pa.int8())


def _launches(trace: Trace, events: pa.Table) -> tuple[pa.Array, pa.Array, pa.Array]:
    """Per device work row (in row order): the start and end of the runtime call with its correlation id, and a number
    for the host thread that made it (nulls where there is no such call)."""
    correlated = correlated_launches(trace)
    n = len(correlated.device_rows)
    if len(correlated.keyed_runtime) == 0 or correlated.device_corr.null_count == n:
        return (pa.nulls(n, pa.int64()),) * 3
    runtime = events.select(["ts_ns", "dur_ns", "pid", "tid"]).take(correlated.keyed_runtime)
    thread = _thread_numbers(runtime)
    ts = combined(runtime["ts_ns"])
    end = pc.add(ts, pc.fill_null(combined(runtime["dur_ns"]), 0))
    where = correlated.where
    return pc.take(ts, where), pc.take(end, where), pc.take(thread, where)


def _thread_numbers(runtime: pa.Table) -> pa.Array:
    """A number per row for its host thread: the rows with one "pid/tid" text share a number (null without one)."""
    ids = runtime.select(["pid", "tid"]).unify_dictionaries()
    pid, tid = ids["pid"], ids["tid"]
    if pa.types.is_dictionary(pid.type) and pa.types.is_dictionary(tid.type) and pid.num_chunks and tid.num_chunks \
            and not any(pc.any(pc.match_substring(c.chunks[0].dictionary, "/")).as_py() for c in (pid, tid)):
        # The pair of dictionary codes: one int per row instead of two strings joined (a 1 GB trace has ~1M
        # launches). Without a "/" in any pid or tid, equal codes are equal "pid/tid" texts, as below.
        codes = [pc.cast(combined(pa.chunked_array([c.indices for c in col.chunks], pa.int32())), pa.int64())
                 for col in (pid, tid)]
        key = pc.add(pc.multiply(codes[0], 1 << 32), codes[1])
        return pc.cast(pc.dictionary_encode(key).indices, pa.int64())
    thread = pc.binary_join_element_wise(pc.cast(runtime["pid"], pa.string()), pc.cast(runtime["tid"], pa.string()),
                                         "/")
    return pc.cast(combined(pc.dictionary_encode(thread)).indices, pa.int64())


# --- analyses ------------------------------------------------------------------------------------------

def has_device_work(trace: Trace) -> bool:
    """Whether the trace has any device work (what :attr:`GpuAnalysis.has_work` says, without preparing it)."""
    return bool(pc.any(kind_mask(trace.select(["kind"]), DEVICE_WORK)).as_py())


@memoized()
def gpu_analysis(trace: Trace, short_gap_ns: int = 10_000) -> GpuAnalysis:
    """The trace's :class:`GpuAnalysis` with this ``short_gap_ns``, made once per trace: the sections of a report,
    the rules of advise and the parts of a diff share its merged intervals and tables."""
    return GpuAnalysis(trace, short_gap_ns=short_gap_ns)


@memoized()
def shared_work(trace: Trace) -> GpuWork:
    """The trace's :func:`device_work`, once per trace (every :class:`GpuAnalysis` of it shares it)."""
    return device_work(trace)


# The tables below are computed once per trace (the report's sections and the advice rules share them), and kept in
# the cache entry of a cached trace for the next command; ``analysis``: the GpuAnalysis asking, whose intervals they
# are computed from (the breakdown, launches and notes do not depend on its short-gap setting).

@memoized(keep=True, ignore=("analysis",))
def gpu_breakdown(trace: Trace, analysis: GpuAnalysis | None = None) -> pa.Table:
    return (analysis or gpu_analysis(trace))._breakdown()


@memoized(keep=True, ignore=("analysis",))
def gpu_launches(trace: Trace, analysis: GpuAnalysis | None = None) -> pa.Table:
    return (analysis or gpu_analysis(trace))._launches()


@memoized(keep=True, ignore=("analysis",))
def gpu_idle(trace: Trace, short_gap_ns: int, analysis: GpuAnalysis | None = None) -> pa.Table:
    return (analysis or gpu_analysis(trace, short_gap_ns))._idle()


@memoized(keep=True, ignore=("analysis",))
def gpu_notes(trace: Trace, analysis: GpuAnalysis | None = None) -> list[str]:
    return (analysis or gpu_analysis(trace))._notes()


@memoized(keep=True, ignore=("analysis",))
def gpu_launch_notes(trace: Trace, analysis: GpuAnalysis | None = None) -> list[str]:
    return (analysis or gpu_analysis(trace))._launch_notes()


# The merged intervals every table of the analysis shares, once per trace.

@memoized()
def _part_intervals(trace: Trace) -> dict[str, dict[int, tuple[pa.Array, pa.Array]]]:
    """Per part (compute, comm, memset, memcpy, and busy = any work) and device, the union of that part's work as
    disjoint (starts, ends) in time order: what :meth:`GpuAnalysis.parts_per_span` measures spans against, made once
    per trace."""
    t = shared_work(trace).table
    cat = pc.cast(combined(t["cat"]), pa.int64())
    device, start, end = combined(t["device"]), combined(t["start"]), combined(t["end"])
    masks = {"compute": pc.equal(cat, COMPUTE), "comm": pc.equal(cat, COMM), "memset": pc.equal(cat, MEMSET),
             "memcpy": pc.greater_equal(cat, MEMCPY), "busy": None}
    out: dict[str, dict[int, tuple[pa.Array, pa.Array]]] = {}
    for part, mask in masks.items():
        d, s, e = (device, start, end) if mask is None else (device.filter(mask), start.filter(mask), end.filter(mask))
        merged = merged_intervals(d, s, e)  # per device (in device order), in time order
        group = combined(merged["group"])
        out[part] = {}
        for dev in pc.unique(group).to_pylist():
            mine = pc.equal(group, dev)
            out[part][dev] = (combined(pc.filter(merged["start"], mine)), combined(pc.filter(merged["end"], mine)))
    return out


@memoized()
def _stream_busy(trace: Trace) -> pa.Table:
    t = shared_work(trace).table
    m = merged_intervals(combined(t["sid"]), combined(t["start"]), combined(t["end"]),
                         presorted=True)
    # (``first`` read here and let go: the merged tables are held for the command)
    return m.append_column("device", pc.take(t["device"], m["first"])) \
            .append_column("launch", pc.take(t["launch"], m["first"])).drop_columns(["first"])


@memoized()
def _device_busy(trace: Trace) -> pa.Table:
    sb = _stream_busy(trace)
    if sb.num_rows == 0:
        return merged_intervals(*(pa.array([], pa.int64()),) * 3).drop_columns(["first"]) \
            .append_column("launch", pa.array([], pa.int64()))
    return _merged_keeping_launch(sb, "device")


@memoized()
def _device_not_idle(trace: Trace) -> pa.Table:
    db = _device_busy(trace)
    unseen = shared_work(trace).unseen
    if not unseen:
        return db
    extra = pa.table({"group": pa.array(list(unseen), pa.int64()),
                      "start": pa.array([u.start for u in unseen.values()], pa.int64()),
                      "end": pa.array([u.end for u in unseen.values()], pa.int64()),
                      "launch": pa.array([u.launch for u in unseen.values()], pa.int64())})
    both = pa.concat_tables([db.select(["group", "start", "end", "launch"]).cast(extra.schema), extra])
    return _merged_keeping_launch(both, "group")


def _merged_keeping_launch(intervals: pa.Table, key: str) -> pa.Table:
    """``intervals`` (``key``, ``start``, ``end``, ``launch``) merged per ``key``, each merged interval with the
    ``launch`` of the interval that opens it."""
    intervals = intervals.take(pc.sort_indices(intervals, [(key, "ascending"), ("start", "ascending")]))
    m = merged_intervals(combined(intervals[key]), combined(intervals["start"]), combined(intervals["end"]),
                         presorted=True)
    return m.append_column("launch", pc.take(intervals["launch"], m["first"])).drop_columns(["first"])


@memoized()
def _pending(trace: Trace) -> pa.Table:
    w = shared_work(trace)
    t = w.table.select(["device", "launch", "raw_start"])  # (a filter copies every column it is given)
    p = t.filter(pc.fill_null(pc.less(t["launch"], t["raw_start"]), False))
    return pa.table({"device": combined(p["device"]),
                     "start": pc.max_element_wise(combined(p["launch"]), w.window_start),
                     "end": pc.min_element_wise(combined(p["raw_start"]), w.window_end)})


@memoized()
def _concurrency(trace: Trace) -> dict[int, tuple[int, int]]:
    return stream_levels(_stream_busy(trace))


class GpuAnalysis:
    """Every GPU table of one trace, sharing the prepared work and the merged intervals (each computed once per
    trace: the memo; only the idle causes depend on ``short_gap_ns``)."""

    def __init__(self, trace: Trace, short_gap_ns: int = 10_000) -> None:
        self.trace = trace
        self.short_gap_ns = short_gap_ns

    @property
    def work(self) -> GpuWork:
        """The prepared device work (shared by every analysis of the trace). Not computed when the tables a
        command shows were kept in the cache by an earlier command."""
        return shared_work(self.trace)

    @property
    def stream_busy(self) -> pa.Table:
        """Merged busy intervals per stream (``group`` = sid), with ``device`` and the ``launch`` of the work
        that opens each interval."""
        return _stream_busy(self.trace)

    @property
    def device_busy(self) -> pa.Table:
        """Merged busy intervals per device (``group`` = device), with the ``launch`` of the opening work."""
        return _device_busy(self.trace)

    @property
    def device_not_idle(self) -> pa.Table:
        """:attr:`device_busy` with each device's unseen busy stretch merged in: when the device was not idle.
        Idle gaps are the window less these intervals."""
        return _device_not_idle(self.trace)

    def unseen_within(self, spans: list[tuple[int, int]]) -> list[int]:
        """How much of each ``(start, end)`` span some device spent on unseen work (the union over devices)."""
        unseen = sorted((u.start, u.end) for u in self.work.unseen.values())
        if not unseen:
            return [0] * len(spans)
        merged = merged_intervals(pa.array([0] * len(unseen), pa.int64()), pa.array([u[0] for u in unseen]),
                                  pa.array([u[1] for u in unseen]), presorted=True)
        return covered_within(merged["start"], merged["end"], spans)

    def busy_within(self, spans: list[tuple[int, int]]) -> list[int]:
        """Device busy time inside each ``(start, end)`` span: the union over every device and stream of the work
        as the breakdown counts it (cut where a stream's next event starts, inside the window), so a span equal
        to the window gives a one-device trace's device-row ``busy_ns``."""
        db = self.device_busy
        if db.num_rows == 0:
            return [0] * len(spans)
        any_device = merged_intervals(pa.repeat(pa.scalar(0, pa.int64()), db.num_rows), combined(db["start"]),
                                      combined(db["end"]))
        return covered_within(any_device["start"], any_device["end"], spans)

    def parts_within(self, spans: list[tuple[int, int]]) -> dict[str, dict[int, int]]:
        """Per part (compute, comm, memset, memcpy, and busy = any work) and device: how long that part's work
        covers the ``(start, end)`` spans, from the intervals the breakdown uses (cut per stream, windowed); and
        ``unseen_busy``: how much of the spans each device spent on work the trace does not show."""
        return {part: {dev: sum(covered) for dev, covered in per_device.items()}
                for part, per_device in self.parts_per_span(spans).items()}

    def parts_per_span(self, spans: list[tuple[int, int]]) -> dict[str, dict[int, list[int]]]:
        """:meth:`parts_within` span by span: per part and device, how long that part's work covers each span, in
        the spans' order."""
        out: dict[str, dict[int, list[int]]] = {
            part: {dev: covered_within(starts, ends, spans) for dev, (starts, ends) in per_device.items()}
            for part, per_device in _part_intervals(self.trace).items()}
        out["unseen_busy"] = {dev: covered_within([u.start], [u.end], spans) for dev, u in self.work.unseen.items()}
        return out

    @property
    def has_work(self) -> bool:
        """Whether the trace has any device work (kernels, collectives, memcpys, memsets)."""
        return self.work.table.num_rows > 0

    @property
    def devices(self) -> list[int]:
        """The devices that ran work, in order."""
        return self.work.devices

    @property
    def pending(self) -> pa.Table:
        """Launched work waiting to start: for each work row launched before it started, its ``device`` and the
        span from the launch (``start``) to its start (``end``), clipped to the window (``end`` may be <= ``start``)."""
        return _pending(self.trace)

    def blocked(self) -> pa.Table:
        """When each device could not have taken new work from the host: busy, or holding launched work that had
        not started yet (waiting on something else: another stream, an event, work the trace does not show).
        Merged intervals: ``group`` (the device), ``start``, ``end``, ``first``."""
        b, p = self.device_not_idle, self.pending
        group = pa.concat_arrays([combined(b["group"]).cast(pa.int64()), combined(p["device"]).cast(pa.int64())])
        start = pa.concat_arrays([combined(b["start"]), combined(p["start"])])
        end = pa.concat_arrays([combined(b["end"]), combined(p["end"])])
        keep = pc.greater(end, start)
        return merged_intervals(pc.filter(group, keep), pc.filter(start, keep), pc.filter(end, keep))

    def comm_exposure(self) -> list[dict]:
        """Per device with collectives, over the window: the union of collectives (``comm_ns``), of compute
        kernels (``compute_ns``), the part of comm that compute covers (``overlapped_ns``), the rest
        (``exposed_ns``), and how much of it overlap could hide at most (``hideable_ns``: the compute not yet under
        a collective bounds it)."""
        t = self.work.table.select(["device", "cat", "start", "end"])
        positive = pc.greater(t["end"], t["start"])

        def merged(code: int) -> pa.Table:  # per device, the union of that category's work as disjoint spans
            part = t.filter(pc.and_(pc.equal(t["cat"], code), positive))
            return merged_intervals(combined(part["device"]), combined(part["start"]), combined(part["end"]))

        comm_spans = merged(COMM)
        if not comm_spans.num_rows:  # no collectives: nothing to overlap (the compute unions are not needed)
            return []
        compute_spans = merged(COMPUTE)
        u_comm, u_compute = covered_by_group(comm_spans), covered_by_group(compute_spans)
        rows = []
        for device in sorted(u_comm):
            comm, compute = u_comm[device], u_compute.get(device, 0)
            # the collectives' time under compute: each collective span's part that the compute spans cover (the
            # union of both is not made: the two sets of spans interleave across streams)
            mine, theirs = (rows_equal(spans, "group", device) for spans in (comm_spans, compute_spans))
            overlapped = pc.sum(covered_spans(theirs["start"], theirs["end"], mine["start"], mine["end"])).as_py() or 0
            exposed = comm - overlapped
            rows.append({"device": device, "comm_ns": comm, "compute_ns": compute, "overlapped_ns": overlapped,
                         "exposed_ns": exposed, "hideable_ns": max(0, min(exposed, compute - overlapped))})
        return rows

    @property
    def concurrency(self) -> dict[int, tuple[int, int]]:
        """``{device: (ns with >= 2 streams busy, most streams busy at once)}``."""
        return _concurrency(self.trace)

    # The tables below are computed once per trace (the report's sections and the advice rules share them), and
    # kept in the cache entry of a cached trace for the next command (gpu_breakdown...).
    def breakdown(self) -> pa.Table:
        """One row per device (``stream`` null: the union over its streams) followed by one per stream."""
        return gpu_breakdown(self.trace, self)

    def launches(self) -> pa.Table:
        """Per device: streams, true concurrency, kernel counts and durations, launch delays."""
        return gpu_launches(self.trace, self)

    def idle(self) -> pa.Table:
        """Per device, idle time by cause (analyses/idle.py)."""
        return gpu_idle(self.trace, self.short_gap_ns, self)

    def _idle(self) -> pa.Table:
        from opscope.analyses.idle import idle_causes

        return idle_causes(self)

    def _breakdown(self) -> pa.Table:
        w = self.work
        t = w.table
        if t.num_rows == 0:
            return BREAKDOWN_SCHEMA.empty_table()
        sid = combined(t["sid"])
        cat = pc.cast(combined(t["cat"]), pa.int64())
        start, end = combined(t["start"]), combined(t["end"])
        is_memcpy = pc.greater_equal(cat, MEMCPY)
        # Per stream and category (plus memcpy of any direction); rows of one key stay in time order.
        key = pa.concat_arrays([pc.add(pc.multiply(sid, _CODES), cat),
                                pc.add(pc.multiply(pc.filter(sid, is_memcpy), _CODES), _ANY_MEMCPY)])
        by_cat = merged_intervals(key, pa.concat_arrays([start, pc.filter(start, is_memcpy)]),
                                  pa.concat_arrays([end, pc.filter(end, is_memcpy)]))
        stream_cat = covered_by_group(by_cat)
        stream_all = covered_by_group(self.stream_busy)
        # Per device: re-merge the per-stream intervals.
        streams = t.select(["sid", "device", "stream"]).group_by(["sid", "device", "stream"], use_threads=False) \
            .aggregate([]).sort_by("sid")
        sid_device = dict(zip(streams["sid"].to_pylist(), streams["device"].to_pylist()))
        group = combined(by_cat["group"])
        stream_id = pc.divide(group, _CODES)  # integer division: keys are >= 0
        category = pc.subtract(group, pc.multiply(stream_id, _CODES))
        device_of = pc.take(combined(streams["device"]), stream_id)
        dt = pa.table({"k": pc.add(pc.multiply(device_of, _CODES), category), "s": by_cat["start"],
                       "e": by_cat["end"]})
        dt = dt.take(pc.sort_indices(dt, [("k", "ascending"), ("s", "ascending")]))
        device_cat = covered_by_group(merged_intervals(combined(dt["k"]), combined(dt["s"]),
                                                       combined(dt["e"]), presorted=True))
        device_all = covered_by_group(self.device_busy)
        counts = count_by(pc.filter(sid, _in_window(w)))
        clipped = count_by(pc.filter(sid, t["cut"]))
        conc = self.concurrency
        rows = []
        for dev in w.devices:
            sids = [s for s, d in sid_device.items() if d == dev]
            # The unseen work ran on some stream of the device: every row of the device leaves it out.
            window = w.device_window_ns(dev)
            unseen = w.window_ns - window
            rows.append(_row(dev, None, sum(counts.get(s, 0) for s in sids), device_cat, dev, device_all.get(dev, 0),
                             window, unseen, conc.get(dev, (0, 0))[0], sum(clipped.get(s, 0) for s in sids)))
            for s, stream in zip(streams["sid"].to_pylist(), streams["stream"].to_pylist()):
                if sid_device[s] == dev:
                    rows.append(_row(dev, stream, counts.get(s, 0), stream_cat, s, stream_all.get(s, 0), window,
                                     unseen, None, clipped.get(s, 0)))
        return pa.Table.from_pylist(rows, schema=BREAKDOWN_SCHEMA)

    def _launches(self) -> pa.Table:
        w = self.work
        t = w.table
        if t.num_rows == 0:
            return LAUNCH_SCHEMA.empty_table()
        busy = covered_by_group(self.device_busy)
        conc = self.concurrency
        in_window = t.select(["device", "cat", "raw_start", "raw_end", "launch", "correlation", "step", "thread"]) \
            .filter(_in_window(w))
        kernels = in_window.filter(pc.less_equal(in_window["cat"], COMM))
        stream_counts = count_by(t.select(["device", "sid"]).group_by(["device", "sid"], use_threads=False)
                                  .aggregate([])["device"])
        rows = []
        for dev in w.devices:
            k = rows_equal(kernels, "device", dev)
            durs = pc.subtract(k["raw_end"], k["raw_start"])
            per_launch = k.filter(pc.is_valid(k["launch"])).select(["correlation", "launch", "raw_start"]) \
                .group_by(["correlation", "launch"], use_threads=False) \
                .aggregate([("raw_start", "min"), ("raw_start", "count")])
            delay = pc.subtract(per_launch["raw_start_min"], per_launch["launch"])
            median, p90 = _quantiles(delay, (0.5, 0.9))
            stepped = pc.sum(pc.cast(pc.is_valid(k["step"]), pa.int64())).as_py() or 0
            concurrent, most = conc.get(dev, (0, 0))
            rows.append({
                "device": dev, "streams": stream_counts.get(dev, 0),
                "launch_threads": len(pc.unique(pc.drop_null(pc.filter(in_window["thread"],
                                                                       pc.equal(in_window["device"], dev))))),
                "concurrent_ns": concurrent,
                "concurrent_pct": share_pct(concurrent, busy.get(dev, 0)), "max_concurrent_streams": most,
                "kernels": k.num_rows,
                "kernels_per_step": round(stepped / w.steps, 2) if w.steps else None,
                "median_kernel_ns": _quantiles(durs, (0.5,))[0],
                "launches": per_launch.num_rows,
                "graph_launches": int(pc.sum(pc.cast(pc.greater(per_launch["raw_start_count"], 1), pa.int64()))
                                      .as_py() or 0),
                "launch_delay_median_ns": median, "launch_delay_p90_ns": p90,
                "skewed_launches": int(pc.sum(pc.cast(pc.less(delay, 0), pa.int64())).as_py() or 0),
            })
        return pa.Table.from_pylist(rows, schema=LAUNCH_SCHEMA)

    def min_launch_delay(self) -> int | None:
        """The most negative (or smallest) launch delay over all devices, for the skew note."""
        t = self.work.table.select(["cat", "correlation", "launch", "raw_start"])
        k = t.filter(pc.and_(pc.less_equal(t["cat"], COMM), pc.is_valid(t["launch"])))
        if k.num_rows == 0:
            return None
        per = k.group_by(["correlation", "launch"], use_threads=False).aggregate([("raw_start", "min")])
        return pc.min(pc.subtract(per["raw_start_min"], per["launch"])).as_py()

    def notes(self) -> list[str]:
        """What to know about the breakdown: the window, what busy means, clipped events."""
        return list(gpu_notes(self.trace, self))

    def _notes(self) -> list[str]:
        w = self.work
        if w.table.num_rows == 0:
            return [NO_GPU]

        out = [window_line(self.trace)]
        out += [unseen_line(dev, u) for dev, u in w.unseen.items()]
        out.append("busy = union of the work's intervals; on a device row (stream -) compute/memcpy/memset/comm are "
                   "unions over its streams and may overlap; concurrent = time with >= 2 streams busy")
        if w.clipped:
            out.append(f"{w.clipped} device events ran past the start of the next event on their stream (ROCm "
                       "durations or rounded times); they were cut at that start for busy time")
        return out

    def launch_notes(self) -> list[str]:
        """What to know about launches: none linked, or clock skew."""
        return list(gpu_launch_notes(self.trace, self))

    def _launch_notes(self) -> list[str]:
        w = self.work
        if w.table.num_rows == 0:
            return [NO_GPU]
        from opscope.units import format_ns

        out = ["launch delay: start of a kernel launch's first kernel minus the start of its runtime call (a graph "
               "launch counts once); concurrent_pct: share of the device's busy time"]
        if w.table["launch"].null_count == w.table.num_rows:
            out.append("no launches: no device event has a runtime launch with its correlation id, so there are no "
                       "launch delays and idle time cannot be put down to waiting on the host or launch overhead")
        else:
            skew = self.min_launch_delay()
            if skew is not None and skew < 0:
                out.append(f"clock skew: some work starts on the GPU up to {format_ns(-skew)} before the CPU call that "
                           "launched it (skewed_launches); the CPU and GPU clocks disagree, so launch delays are "
                           "approximate")
        return out


def unseen_line(device: int, unseen: UnseenBusy) -> str:
    """Why a device's first stretch is not idle, in one line."""
    from opscope.units import format_ns

    return (f"device {device}: {format_ns(unseen.ns)} before its first recorded work are unseen_busy, not idle: that "
            f"work started {format_ns(unseen.wait_ns)} after the call that launched it returned, queued behind work "
            "the trace does not show (launched before the profiler started); left out of window_ns, idle and savings")


NO_GPU = "no GPU activity: this trace has no kernels, memcpys, memsets or collectives (a CPU-only profile)"


def _in_window(w: GpuWork) -> pa.ChunkedArray:
    """Rows of work that overlap the window (an instant event: that starts in it)."""
    t = w.table
    starts_before_end = pc.less(t["raw_start"], w.window_end)
    overlaps = pc.and_(starts_before_end, pc.greater(t["raw_end"], w.window_start))
    instant_inside = pc.and_(pc.and_(pc.equal(t["raw_end"], t["raw_start"]), starts_before_end),
                             pc.greater_equal(t["raw_start"], w.window_start))
    return pc.or_(overlaps, instant_inside)


def _row(device, stream, events, by_cat: dict[int, int], key: int, busy: int, window: int, unseen: int, concurrent,
         clipped):
    def cov(code):
        return by_cat.get(key * _CODES + code, 0)

    row = {"device": device, "stream": stream, "events": events, "compute_ns": cov(COMPUTE),
           "memcpy_ns": cov(_ANY_MEMCPY)}
    for i, d in enumerate(MEMCPY_DIRECTIONS):
        row[f"memcpy_{d}_ns"] = cov(MEMCPY + i)
    row.update({"memset_ns": cov(MEMSET), "comm_ns": cov(COMM), "busy_ns": busy, "idle_ns": max(0, window - busy),
                "unseen_busy_ns": unseen, "window_ns": window, "busy_pct": share_pct(busy, window),
                "concurrent_ns": concurrent, "clipped": clipped})
    return row


# --- helpers -------------------------------------------------------------------------------------------

def _quantiles(values, qs: tuple[float, ...]) -> list[int | None]:
    values = combined(values)
    if len(values) == 0:
        return [None] * len(qs)
    out = pc.quantile(values, q=list(qs), interpolation="linear").to_pylist()
    return [round(v) for v in out]


@memoized(keep=True, ignore=("analysis",))
def step_device_table(trace: Trace, analysis: GpuAnalysis | None = None) -> pa.Table:
    """The step table with the device busy time inside each step's interval beside it: ``gpu_busy_ns`` (the
    union of all device work within the step's start and end, as ``opscope gpu`` counts it) and
    ``gpu_busy_pct`` (of the step's duration less its ``unseen_busy_ns``, at most 100), next to
    ``launched_gpu_ns`` (the work the step launched, wherever it ran). ``unseen_busy_ns``: the part of the step
    a device spent on work the trace does not show (see :class:`UnseenBusy`; only a first step can have it).
    Null busy figures: the trace has no device work."""
    # kept in the cache entry (the figures do not depend on the analysis' short-gap setting)
    return _step_device_table(trace, analysis)


def _step_device_table(trace: Trace, analysis: GpuAnalysis | None) -> pa.Table:
    table = step_table(trace)
    analysis = analysis or gpu_analysis(trace)
    steps = trace.steps
    spans = list(zip(steps["ts_ns"].to_pylist(), pc.add(steps["ts_ns"], steps["dur_ns"]).to_pylist()))
    busy: list[int | None] = [None] * len(spans)
    unseen: list[int | None] = [None] * len(spans)
    if analysis.has_work:
        busy = list(analysis.busy_within(spans))
        unseen = list(analysis.unseen_within(spans))
    durs = table["dur_ns"].to_pylist()
    # One device's unseen stretch may overlap another's busy time: the measured part of the step never drops
    # below the busy time, so the share stays within 100%.
    pct = [None if b is None else share_pct(b, max(b, d - (u or 0))) for b, d, u in zip(busy, durs, unseen)]
    table = table.add_column(2, "gpu_busy_ns", pa.array(busy, pa.int64()))
    table = table.add_column(3, "gpu_busy_pct", pa.array(pct, pa.float64()))
    return table.add_column(4, "unseen_busy_ns", pa.array(unseen, pa.int64()))
