"""What kept a device idle, read from the dependency graph: per idle gap, what the host thread that launched the
work after it was doing meanwhile, and how much of the gap that work spent waiting on work the trace does not show.

:mod:`opscope.analyses.idle` names a cause per instant from what was open on the host (a synchronising call, the
data loader, launches outstanding); it cannot tell a host that waits for the device from a device that waits for
something unrecorded (another process, a stream or graph the profiler missed). The graph can: the work after a
gap started ``unexplained`` ns later than its launch or its stream allowed
(:data:`opscope.analyses.depgraph.LATENCY_CAP_NS`), and those last ns before it started are waiting on unseen work,
whatever the host did meanwhile. The rest of the gap is the host's: the names on the launching thread, each instant
charged to the innermost op, annotation, runtime call or Python frame open over it (built-ins and step marks
skipped), with the Python frame of the program around the name that took most of it.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from opscope.analyses.arrays import combined, int64_values, like, name_match, rows_equal, value_codes
from opscope.analyses.depgraph import DEVICE, NONE, STEP_MARK, DepGraph, dependency_graph
from opscope.analyses.idle import cause_spans
from opscope.analyses.intervals import covered_spans, merged_intervals
from opscope.model.buffers import true_positions
from opscope.model.memo import memoized
from opscope.model.schema import kind_mask
from opscope.model.trace import Trace

if TYPE_CHECKING:
    from opscope.analyses.gpu import GpuAnalysis

#: Host events that name what a thread was doing.
NAMED_KINDS = ("cpu_op", "user_annotation", "runtime", "python")
#: Python frames that say nothing of the program: built-ins, C functions, ``<frozen ...>``.
BUILTIN_FRAME = re.compile(r"^<")
#: Python frames of the framework itself, passed over when naming the program's frame around a name.
FRAMEWORK_FRAME = re.compile(r"(^|[/\\])(torch|contextlib\.py|threading\.py|functools\.py)")
#: Names kept per gap.
TOP_NAMES = 3
#: A host part named by its category, not its event: no name, or a step's mark.
UNNAMED_OR_MARK = rf"\A\Z|{STEP_MARK}"


@dataclass
class GapCause:
    """One idle gap: ``unseen_ns`` of it the work after it waited on work the trace does not show; ``thread`` the
    host thread that launched that work ("pid/tid"; None: unknown); ``names`` (name, kind, ns inside the gap) on that
    thread, most time first; ``frame`` the program's Python frame around the first name."""

    device: int
    start: int
    end: int
    unseen_ns: int = 0
    thread: str | None = None
    names: list[tuple[str, str, int]] = field(default_factory=list)
    frame: str | None = None


def gap_causes(trace: Trace, gaps: list[tuple[int, int, int]]) -> list[GapCause]:
    """A :class:`GapCause` per ``(device, start, end)`` gap."""
    graph = dependency_graph(trace)
    after = _work_after(trace)
    out = []
    for device, start, end in gaps:
        gap = GapCause(device, start, end)
        node = after.first_at(device, end)
        if node is not None:
            waited = graph.unexplained[node]
            gap.unseen_ns = max(0, min(end, graph.start[node]) - max(start, graph.start[node] - waited))
            launch = graph.extra[node]
            if launch != NONE and graph.kind[launch] != DEVICE:
                gap.thread = graph.lane[launch]
        if gap.thread is None:
            gap.thread = _busiest_thread(graph, start, end)
        if gap.thread is not None:
            gap.names, gap.frame = thread_names(trace, gap.thread, start, end)
        out.append(gap)
    return out


def prepare_gap_causes(trace: Trace) -> None:
    """Compute what :func:`gap_causes` reads besides the gaps (the device work by start, memoized), ahead of it."""
    _work_after(trace)


@dataclass(frozen=True)
class _After:
    """Device nodes per device, by start: the work that ends a gap."""

    starts: dict[int, Sequence[int]]
    nodes: dict[int, Sequence[int]]

    def first_at(self, device: int, at: int) -> int | None:
        """The node of ``device`` that starts at ``at``, the one with the longest unexplained wait among several
        (None: none starts there, as after the window's last gap)."""
        starts = self.starts.get(device, [])
        i = bisect.bisect_left(starts, at)
        return self.nodes[device][i] if i < len(starts) and starts[i] == at else None


@memoized()
def _work_after(trace: Trace) -> _After:
    graph = dependency_graph(trace)
    n = len(graph)
    kind = pa.Array.from_buffers(pa.int8(), n, [None, pa.py_buffer(graph.kind)])
    row = pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(graph.row)])
    nodes = true_positions(pc.and_(pc.equal(kind, like(DEVICE, kind)), pc.not_equal(row, like(NONE, row))))
    device_of = combined(trace.select(["device"])["device"])
    table = pa.table({
        "device": pc.take(device_of, pc.take(row, nodes)),
        "start": pc.take(pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(graph.start)]), nodes),
        "wait": pc.negate(graph.unexplained.arrow(pa.int64(), nodes)),  # at the nodes only: not a column per node
        "node": pc.cast(nodes, pa.int64()),
    })
    table = table.filter(pc.is_valid(table["device"]))
    table = table.sort_by([("device", "ascending"), ("start", "ascending"), ("wait", "ascending"),
                           ("node", "ascending")])
    starts: dict[int, Sequence[int]] = {}
    by_device: dict[int, Sequence[int]] = {}
    for device in pc.unique(table["device"]).to_pylist():
        mine = rows_equal(table, "device", device)
        starts[device] = int64_values(mine["start"])
        by_device[device] = int64_values(mine["node"])
    return _After(starts, by_device)


def _busiest_thread(graph: DepGraph, start: int, end: int) -> str | None:
    """The host thread whose slices cover the most of ``[start, end)``: the gap's thread when its next work has no
    launch in the trace."""
    best, most = None, 0
    for lane, nodes in graph.threads.items():
        if not len(nodes):
            continue
        lo = bisect.bisect_right(nodes, start, key=graph.end.__getitem__)
        hi = bisect.bisect_left(nodes, end, key=graph.start.__getitem__)
        covered = sum(max(0, min(end, graph.end[n]) - max(start, graph.start[n])) for n in nodes[lo:hi])
        if covered > most:
            best, most = lane, covered
    return best


def thread_names(trace: Trace, thread: str, start: int, end: int) -> tuple[list[tuple[str, str, int]], str | None]:
    """What one host thread ("pid/tid") did in ``[start, end)``: (name, kind, ns) per name, most time first (the top
    :data:`TOP_NAMES`; "(nothing recorded)" for time no named event covers), each instant charged to the innermost
    event open over it that says something (:data:`BUILTIN_FRAME` and step marks passed over); and the innermost
    Python frame outside the framework (:data:`FRAMEWORK_FRAME`) around the first name, None without one."""
    near = _thread_rows(trace, thread, start, end)
    rows = [(max(s, start), min(s + d, end), name, kind) for s, d, name, kind in
            zip(*(near[c].to_pylist() for c in ("ts_ns", "dur_ns", "name", "kind"))) if s + d > start and d > 0]
    rows.sort(key=lambda r: (r[0], -r[1]))
    time: dict[tuple[str, str], int] = {}
    around: dict[tuple[str, str], dict[str, int]] = {}
    stack: list[tuple[int, int, str, str]] = []
    now = start

    def charge(upto: int) -> None:
        nonlocal now
        if upto <= now:
            return
        owner = next(((name, kind) for _, _, name, kind in reversed(stack) if _says_something(name, kind)),
                     ("(nothing recorded)", ""))
        time[owner] = time.get(owner, 0) + upto - now
        frame = next((name for _, _, name, kind in reversed(stack) if kind == "python"
                      and not BUILTIN_FRAME.search(name) and not FRAMEWORK_FRAME.search(name)), None)
        if frame is not None and frame != owner[0]:
            frames = around.setdefault(owner, {})
            frames[frame] = frames.get(frame, 0) + upto - now
        now = upto

    for r in rows:
        while stack and stack[-1][1] <= r[0]:
            charge(stack[-1][1])  # the event's time up to its end, then it closes
            stack.pop()
        charge(r[0])
        stack.append((r[0], min(r[1], stack[-1][1]) if stack else r[1], r[2], r[3]))
    while stack:
        charge(stack[-1][1])
        stack.pop()
    charge(end)
    ranked = sorted(time.items(), key=lambda item: (-item[1], item[0]))[:TOP_NAMES]
    names = [(name, kind, ns) for (name, kind), ns in ranked]
    frames = around.get(ranked[0][0], {}) if ranked else {}
    frame = max(frames.items(), key=lambda item: (item[1], item[0]))[0] if frames else None
    return names, frame


def _says_something(name: str, kind: str) -> bool:
    return not (kind == "python" and BUILTIN_FRAME.search(name)) and not re.match(STEP_MARK, name)


def _thread_rows(trace: Trace, thread: str, start: int, end: int) -> pa.Table:
    """The named events of one thread ("pid/tid") that start before ``end`` and last past ``start``, in time order
    (longest first on ties: the model's order): ts_ns, dur_ns, name and kind ("None" where missing). Read from the
    rows that start at most the longest named event's duration before ``start`` (a search of the time-ordered rows,
    no copy of the thread's); where the rows are not in time order (a table made otherwise), the thread's rows are
    picked from all of them and sorted."""
    ev = trace.select(["kind", "name", "ts_ns", "dur_ns", "pid", "tid"])
    longest = _longest_named(trace)
    if longest is not None:
        ts = int64_values(ev["ts_ns"])  # in time order, no nulls (_longest_named checked)
        lo, hi = bisect.bisect_left(ts, start - longest), bisect.bisect_left(ts, end)
        ev = ev.slice(lo, hi - lo)
    pid, _, tid = thread.partition("/")
    # compared once per distinct pid and tid (their dictionaries), not as a string per row
    mine = pc.and_(kind_mask(ev, NAMED_KINDS), pc.and_(name_match(ev["pid"], rf"\A{re.escape(pid)}\Z"),
                                                       name_match(ev["tid"], rf"\A{re.escape(tid)}\Z")))
    picked = ev.filter(pc.fill_null(pc.and_(mine, pc.is_valid(ev["ts_ns"])), False)).select(
        ["ts_ns", "dur_ns", "name", "kind"])
    if longest is None:
        picked = picked.filter(pc.less(picked["ts_ns"], end))
        picked = picked.take(pc.sort_indices(picked, [("ts_ns", "ascending"), ("dur_ns", "descending")]))
    dur = pc.max_element_wise(pc.fill_null(picked["dur_ns"], 0), 0)
    reach = pc.and_(pc.greater(dur, 0), pc.greater(pc.add(picked["ts_ns"], dur), start))  # the rest ends before
    picked, dur = picked.filter(reach), pc.filter(dur, reach)
    return pa.table({"ts_ns": combined(picked["ts_ns"]), "dur_ns": combined(dur),
                     "name": combined(pc.fill_null(picked["name"].cast(pa.string()), "None")),
                     "kind": combined(pc.fill_null(picked["kind"].cast(pa.string()), "None"))})


@memoized()
def _longest_named(trace: Trace) -> int | None:
    """The longest duration of a named event (0 without one; None where the rows are not in time order, longest
    first on ties, without missing times: the model's order, which :func:`_thread_rows` searches)."""
    ev = trace.select(["kind", "ts_ns", "dur_ns"])
    ts, dur = combined(ev["ts_ns"]), combined(ev["dur_ns"])
    n = len(ts)
    if ts.null_count or dur.null_count:
        return None
    if n > 1:
        later, earlier = ts.slice(1), ts.slice(0, n - 1)
        ordered = pc.or_(pc.greater(later, earlier),
                         pc.and_(pc.equal(later, earlier), pc.less_equal(dur.slice(1), dur.slice(0, n - 1))))
        if not pc.all(ordered).as_py():
            return None
    longest = pc.max(pc.filter(dur, kind_mask(ev, NAMED_KINDS))).as_py()
    return max(longest or 0, 0)


def unseen_by_cause(trace: Trace, analysis: GpuAnalysis) -> dict[int, dict[str, int]]:
    """Per device and idle cause (:mod:`opscope.analyses.idle`), the ns of that cause's idle time during which the
    work that ended the wait had been waiting on work the trace does not show: the last ``unexplained`` ns before
    each device node started (the graph's), inside the cause's stretches."""
    graph = dependency_graph(trace)
    spans = cause_spans(analysis)
    n = len(graph)
    kind = pa.Array.from_buffers(pa.int8(), n, [None, pa.py_buffer(graph.kind)])
    row = pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(graph.row)])
    work = true_positions(pc.and_(pc.equal(kind, like(DEVICE, kind)), pc.not_equal(row, like(NONE, row))))
    unexplained = graph.unexplained.arrow(pa.int64(), work)  # at the device work only: not a column per node
    waiting, unexplained = (pc.filter(a, pc.greater(unexplained, 0)) for a in (work, unexplained))
    device_of = combined(trace.select(["device"])["device"])
    start = pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(graph.start)])
    waits = pa.table({"device": pc.take(device_of, pc.take(row, waiting)), "hi": pc.take(start, waiting),
                      "lo": pc.subtract(pc.take(start, waiting), unexplained)})
    out: dict[int, dict[str, int]] = {}
    for device, by_cause in spans.items():
        mine = waits.filter(pc.fill_null(pc.equal(waits["device"], device), False)) if device is not None else \
            waits.filter(pc.is_null(waits["device"]))
        if not mine.num_rows:
            continue
        # two streams' waits count once
        merged = merged_intervals(pa.repeat(pa.scalar(0, pa.int64()), mine.num_rows), combined(mine["lo"]),
                                  combined(mine["hi"]))
        found = out.setdefault(device, {})
        for cause, (starts, ends) in by_cause.items():
            ns = pc.sum(covered_spans(merged["start"], merged["end"], starts, ends)).as_py()
            if ns:
                found[cause] = ns
    return out


def host_by_cause(trace: Trace) -> dict[str, list[tuple[str, int]]]:
    """Per idle cause, the host's time inside that cause's idle time (any device) by name, most first (the top
    :data:`TOP_NAMES`): the parts ``opscope whatif --change idle:CAUSE=0`` removes (host slices of any thread, named
    by their innermost op, annotation or runtime call, or "(python)"/"(host untraced)" between them; a wait by its
    call, for the time it took to return once its work had ended)."""
    from opscope.analyses.whatif import idle_parts

    graph = dependency_graph(trace)
    parts = idle_parts(trace, graph)
    # a gap, or an event without a name or a step mark (whose own time is the program between its ops): its
    # category; grouped by the name's code and the category's, the texts read per group, the names coded at the
    # rows a cause holds only (a 1 GB trace: 111-118 MiB over the inputs coding and naming every row, 47-62 so)
    event_names = trace.select(["name"])["name"]
    unnamed = re.compile(UNNAMED_OR_MARK).search
    kind = pa.Array.from_buffers(pa.int8(), len(graph), [None, pa.py_buffer(graph.kind)])
    rows = pa.Array.from_buffers(pa.int32(), len(graph), [None, pa.py_buffer(graph.row)])
    codes = pa.Array.from_buffers(pa.int8(), len(graph), [None, pa.py_buffer(graph.category.codes)])
    out: dict[str, list[tuple[str, int]]] = {}
    for cause in {*parts.own, *parts.lag}:
        own = parts.own.get(cause)
        lag = parts.lag.get(cause)
        pieces = [own.select(["node", "ns"])] if own is not None else []
        if lag is not None:  # a wait's return (device work's lags are the device's, not the host's)
            lag_kind = pc.take(kind, lag["node"])
            pieces.append(lag.filter(pc.not_equal(lag_kind, like(DEVICE, lag_kind))).select(["node", "ns"]))
        if not pieces:
            continue
        table = pa.concat_tables(pieces)
        row = pc.take(rows, table["node"])
        name, names = value_codes(pc.take(event_names, pc.if_else(pc.equal(row, like(NONE, row)),
                                                                  pa.scalar(None, row.type), row)))
        sums = pa.table({"name": name, "category": pc.take(codes, table["node"]), "ns": table["ns"]}) \
            .group_by(["name", "category"], use_threads=False).aggregate([("ns", "sum")])
        totals: dict[str, int] = {}
        for code, category, ns in zip(*(sums[c].to_pylist() for c in ("name", "category", "ns_sum"))):
            text = names[code] if code >= 0 else None
            label = text if text is not None and not unnamed(text) else f"({graph.category.names[category]})"
            totals[label] = totals.get(label, 0) + ns  # a name that reads like a category's counts with it
        ordered = sorted(totals.items(), key=lambda item: (-item[1], item[0]))
        out[cause] = ordered[:TOP_NAMES]
    return out
