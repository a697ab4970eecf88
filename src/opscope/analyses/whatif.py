"""What if some work took another time: the dependency graph replayed with changed durations, per step.

A change is ``SELECTOR=FACTOR``: the durations of what the selector picks are multiplied by FACTOR (0 removes,
0.5 halves, 2 doubles). Selectors (:data:`SELECTORS`):

- ``op:REGEX``: host time inside ops and annotations (``record_function`` regions) whose name matches, nested events
  included (their host time only: the device work they launch is ``kernel:``'s);
- ``kernel:REGEX``: device work whose name matches; ``copy``: copies and fills; ``comm``: collectives;
- ``sync``: the host's waits for the device (0: the host no longer waits); ``sync:REGEX``: those inside host events
  (ops, ``record_function`` regions) whose name matches; ``launch``: runtime calls (launches);
- ``loader``: host time in the input pipeline (DataLoader);
- ``idle``: the lags the trace does not explain (:data:`opscope.analyses.depgraph.LATENCY_CAP_NS`). FACTOR scales
  each such lag's excess over the typical lag of its kind on its lane (the median launch-to-start lag, queue gap or
  wake-up of the lane's work whose lag is explained; the cap where there is none): 0 starts the work as its lane's
  work usually starts;
- ``idle:CAUSE``: the device's idle time that :mod:`opscope.analyses.idle` puts down to CAUSE (sync,
  input_pipeline, launch_overhead, kernel_gap, host_wait, other), or ``idle:unexplained`` (the same as ``idle``).

Any selector may end in ``@rank:N``: in a job, the change applies to rank N alone (on one trace, only if the trace
is rank N).

What ``idle:CAUSE=F`` multiplies: the parts of the graph that lie inside the stretches of device idle time put down
to CAUSE (:func:`opscope.analyses.idle.cause_spans`), by F, and nothing else:

- the own time of host nodes (slices of any thread) inside those stretches of any device: a slice half inside
  keeps its other half;
- the explained part of the lag that bound a node as measured, inside those stretches of the node's device: before
  device work, the launch latency or the stream's turnaround (the edge's lag up to
  :data:`~opscope.analyses.depgraph.LATENCY_CAP_NS`, at its start); after a wait, the time it took to return once
  its work had ended.

The unexplained part of a lag (the work waited on something the trace does not show) is never CAUSE's, whatever
the host did meanwhile: a blocking call that waited for work held up by it is not what kept the device idle, so
``idle:sync=0`` does not remove it (``idle:unexplained=0`` does). With the stretches of one cause apart from
another's, ``idle:CAUSE=0`` takes that cause's idle time off every path that runs through it; a step shortens by
what was on its critical path. ``kernel_gap`` is the stream's own turnaround between queued kernels (the explained
lag of work that was already queued), and ``launch_overhead`` the launch calls and latencies in short gaps.
"""

from __future__ import annotations

import re
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, replace

import pyarrow as pa
import pyarrow.compute as pc

from opscope.analyses.arrays import arange, combined, like, name_match, scatter
from opscope.analyses.depgraph import (
    CATEGORIES,
    COMMUNICATION,
    COPIES,
    DEVICE,
    HOST,
    INPUT,
    LATENCY_CAP_NS,
    LAUNCH,
    NONE,
    ON_AFTER,
    ON_CHAIN,
    ON_EXTRA,
    WAIT,
    DepGraph,
    Ends,
    Linked,
    dependency_graph,
    frozen_view,
    native_graph,
    node_column,
)
from opscope.analyses.idle import IDLE_CAUSES, cause_spans
from opscope.analyses.intervals import covered_keys, covered_spans, merged_intervals
from opscope.analyses.replay import AFTER, CHAIN, EXTRA, bounds, replay, step_lengths, step_nodes, step_table
from opscope.errors import UsageError
from opscope.model.buffers import true_positions, values_view
from opscope.model.memo import memoized
from opscope.model.trace import Trace

SELECTORS = ("op:REGEX", "kernel:REGEX", "copy", "comm", "sync", "sync:REGEX", "launch", "loader", "idle",
             "idle:CAUSE")
#: The causes ``idle:`` takes: those of :mod:`opscope.analyses.idle`, and the lags the trace does not explain.
IDLE_SELECTOR_CAUSES = (*IDLE_CAUSES, "unexplained")
#: Selectors that take a regex (``sync`` also goes without one).
_PATTERNED = ("op", "kernel", "sync")
_MAX_CLIMB = 512


@dataclass(frozen=True)
class Change:
    """One ``SELECTOR[@rank:N]=FACTOR`` (``pattern``: the regex of ``op:``/``kernel:``; ``rank``: N, or None for
    every rank)."""

    selector: str
    pattern: str | None
    factor: float
    rank: int | None = None

    def __str__(self) -> str:
        what = f"{self.selector}:{self.pattern}" if self.pattern is not None else self.selector
        where = f"@rank:{self.rank}" if self.rank is not None else ""
        return f"{what}{where}={self.factor:g}"

    def applies_to(self, rank: int | None) -> bool:
        """Whether the change applies to the trace of ``rank`` (None: a trace that names no rank)."""
        return self.rank is None or self.rank == rank


def parse_change(text: str) -> Change:
    """``SELECTOR[@rank:N]=FACTOR`` as a :class:`Change`; a UsageError that says what is accepted otherwise."""
    what, sep, value = text.rpartition("=")
    if not sep or not what:
        raise UsageError(f"--change {text!r}: write SELECTOR=FACTOR, e.g. kernel:gemm=0.5 or sync=0")
    rank = None
    head, at, rank_text = what.rpartition("@rank:")
    if at:
        if not rank_text.isdigit() or len(rank_text) > 9:
            raise UsageError(f"--change {text!r}: @rank: takes a rank number, e.g. comm@rank:1=0.5")
        what, rank = head, int(rank_text)
    change = _parsed(text, what, value)
    return Change(change.selector, change.pattern, change.factor, rank)


def _parsed(text: str, what: str, value: str) -> Change:
    try:
        factor = float(value)
    except ValueError:
        raise UsageError(f"--change {text!r}: the factor {value!r} is not a number") from None
    if not 0 <= factor < 1e6:
        raise UsageError(f"--change {text!r}: the factor must be 0 or more (0 removes, 0.5 halves)")
    selector, colon, pattern = what.partition(":")
    if selector in _PATTERNED and (colon or selector != "sync"):
        if not colon or not pattern:
            raise UsageError(f"--change {text!r}: {selector}: takes a regex, e.g. {selector}:gemm=0.5")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise UsageError(f"--change {text!r}: invalid regular expression {pattern!r}: {exc}") from None
        return Change(selector, pattern, factor)
    if selector == "idle" and colon:
        if pattern not in IDLE_SELECTOR_CAUSES:
            raise UsageError(f"--change {text!r}: idle: takes a cause, one of {', '.join(IDLE_SELECTOR_CAUSES)}")
        return Change(selector, pattern, factor)
    if colon or selector not in SELECTORS:
        raise UsageError(f"--change {text!r}: unknown selector; the selectors are {', '.join(SELECTORS)}")
    return Change(selector, None, factor)


def factors(trace: Trace, graph: DepGraph, changes: Sequence[Change], rank: int | None = None,
            ) -> tuple[memoryview | None, memoryview | None, list[int]]:
    """Per node, its duration factor and its unexplained-lag factor after ``changes`` (a later change multiplies an
    earlier one; those for another rank than ``rank`` are left out), as float64 memoryviews (None: no change moved
    any, every factor 1), and how many nodes each change picked."""
    n = len(graph)
    duration: pa.Array | None = None  # None until a change moves one: no array of n ones
    lag: pa.Array | None = None
    picked: list[int] = []
    parts: IdleParts | None = None
    for change in changes:
        if not change.applies_to(rank):
            picked.append(0)
            continue
        if change.selector == "idle" and change.pattern not in (None, "unexplained"):
            parts = parts or idle_parts(trace, graph)
            own, lags = parts.own.get(change.pattern, NODE_NS.empty_table()), parts.lag.get(
                change.pattern, NODE_EDGE_NS.empty_table())
            # a slice keeps the part of its time outside the cause's idle time
            share = pc.divide(pc.cast(own["ns"], pa.float64()), pc.cast(pc.take(node_column(graph.dur, pa.int64()),
                                                                                   own["node"]), pa.float64()))
            kept = scatter(n, own["node"], combined(pc.subtract(1.0, pc.multiply(share, 1.0 - change.factor))))
            duration = pc.fill_null(kept, 1.0) if duration is None else pc.multiply(duration, pc.fill_null(kept, 1.0))
            nodes = pa.concat_arrays([combined(own["node"]), combined(lags["node"])])
            chosen = pc.is_in(arange(n), value_set=nodes)
        elif change.selector == "idle":
            chosen = pc.not_equal(node_column(graph.unexplained, pa.int64()), 0)
            factor = _idle_factor(graph, chosen, change.factor)
            lag = factor if lag is None else pc.multiply(lag, factor)
        else:
            chosen = _chosen(trace, graph, change)
            factor = pa.scalar(float(change.factor), pa.float64())
            duration = (pc.if_else(chosen, factor, pa.scalar(1.0, pa.float64())) if duration is None
                        else pc.if_else(chosen, pc.multiply(duration, factor), duration))
        picked.append(pc.sum(chosen).as_py() or 0)
    return (None if duration is None else values_view(combined(duration), "d"),
            None if lag is None else values_view(combined(lag), "d"), picked)


def _idle_factor(graph: DepGraph, chosen: pa.Array, factor: float) -> pa.Array:
    """Per node, the unexplained-lag factor that scales a chosen node's binding lag's excess over its lane's typical
    lag of that kind by ``factor`` (the replay cuts ``unexplained x (1 - lag factor)``; 1 for the rest)."""
    on = node_column(graph.unexplained_on, pa.int8())
    lag = node_column(graph.chain_lag, pa.int64())
    for edge in (ON_EXTRA, ON_AFTER):
        lag = pc.if_else(pc.equal(on, like(edge, on)), node_column(_edge(graph, edge)[0], pa.int64()), lag)
    typical = pa.repeat(pa.scalar(LATENCY_CAP_NS, pa.int64()), len(graph))
    lane = graph.lane.arrow()
    for (code, edge), usual in _typical_lags(graph, chosen).items():
        typical = pc.if_else(pc.and_(pc.equal(lane, like(code, lane)), pc.equal(on, like(edge, on))), usual, typical)
    excess = pc.cast(pc.subtract(lag, typical), pa.float64())
    unexplained = pc.cast(pc.max_element_wise(node_column(graph.unexplained, pa.int64()), 1), pa.float64())
    return pc.if_else(chosen, pc.subtract(1.0, pc.divide(pc.multiply(excess, 1.0 - factor), unexplained)), 1.0)


def _edge(graph: DepGraph, edge: int) -> tuple[Sequence[int], Sequence[int]]:
    """The lag and dependency columns of one kind of edge (ON_CHAIN, ON_EXTRA or ON_AFTER)."""
    if edge == ON_EXTRA:
        return graph.extra_lag, graph.extra
    if edge == ON_AFTER:
        return graph.after_lag, graph.after
    return graph.chain_lag, graph.chain


def idle_lags(graph: DepGraph, changes: Sequence[Change], rank: int | None = None) -> tuple[Linked, Linked]:
    """The graph's chain and extra lags for a replay with ``changes``: where an ``idle`` change picks device work, the
    edge that did not bind its start (kept at no more than :data:`LATENCY_CAP_NS`) is lowered to its lane's typical
    lag of that kind, so that the work, its wait gone, starts as its lane's work usually starts."""
    chosen = None
    for change in changes:
        if change.selector == "idle" and change.pattern in (None, "unexplained") and change.applies_to(rank) \
                and change.factor < 1:
            chosen = pc.and_(pc.not_equal(node_column(graph.unexplained, pa.int64()), 0),
                             pc.equal(node_column(graph.kind, pa.int8()), DEVICE))
    if chosen is None or not pc.any(chosen).as_py():
        return graph.chain_lag, graph.extra_lag
    on = node_column(graph.unexplained_on, pa.int8())
    lane = graph.lane.arrow()
    chain_lag, extra_lag = node_column(graph.chain_lag, pa.int64()), node_column(graph.extra_lag, pa.int64())
    for (code, edge), usual in _typical_lags(graph, chosen).items():
        # this kind of edge of the chosen work on this lane that another kind of edge bound
        mine = pc.and_(pc.and_(chosen, pc.equal(lane, like(code, lane))), pc.not_equal(on, like(edge, on)))
        if edge == ON_EXTRA:
            extra_lag = pc.if_else(mine, pc.min_element_wise(extra_lag, usual), extra_lag)
        elif edge == ON_CHAIN:
            chain_lag = pc.if_else(mine, pc.min_element_wise(chain_lag, usual), chain_lag)
    # a node without a link keeps its lags of 0 (a typical lag is no less): the linked nodes' are the columns
    linked = pc.not_equal(node_column(graph.link, pa.int32()), NONE)
    return (graph.chain_lag.with_values(values_view(pc.filter(chain_lag, linked), "q")),
            graph.extra_lag.with_values(values_view(pc.filter(extra_lag, linked), "q")))


def _typical_lags(graph: DepGraph, chosen: pa.Array) -> dict[tuple[int, int], int]:
    """For each lane of the chosen nodes and each edge kind (ON_CHAIN: the queue's, ON_EXTRA: the launch's or the
    wait's, ON_AFTER: another stream's work waited for), the median lag of the lane's nodes bound by that kind of
    edge with nothing unexplained (no more than :data:`LATENCY_CAP_NS`; none where the lane has no such node)."""
    on = node_column(graph.unexplained_on, pa.int8())
    lane = graph.lane.arrow()
    unexplained = node_column(graph.unexplained, pa.int64())
    out: dict[tuple[int, int], int] = {}
    for code in pc.unique(pc.filter(lane, chosen)).to_pylist():
        for edge in (ON_CHAIN, ON_EXTRA, ON_AFTER):
            lags, dependencies = _edge(graph, edge)
            lag, dependency = node_column(lags, pa.int64()), node_column(dependencies, pa.int32())
            usable = pc.and_(pc.and_(pc.equal(lane, like(code, lane)), pc.equal(on, like(edge, on))),
                             pc.and_(pc.equal(unexplained, 0), pc.not_equal(dependency, like(NONE, dependency))))
            sample = pc.filter(lag, pc.and_(usable, pc.greater_equal(lag, 0)))
            if len(sample):
                median = pc.quantile(sample, q=0.5, interpolation="lower")[0].as_py()
                out[(code, edge)] = min(int(median), LATENCY_CAP_NS)
    return out


def _chosen(trace: Trace, graph: DepGraph, change: Change) -> pa.Array:
    """Which nodes the change picks (a mask over the nodes)."""
    kind = node_column(graph.kind, pa.int8())
    device = pc.equal(kind, like(DEVICE, kind))
    host = pc.invert(device)

    def category(name: str) -> pa.Array:
        codes = node_column(graph.category.codes, pa.int8())
        return pc.equal(codes, like(CATEGORIES.index(name), codes))

    def rows_in(mask: pa.Array | pa.ChunkedArray) -> pa.Array:
        """Per node, whether its event is one the mask over the events marks (a gap: false)."""
        row = node_column(graph.row, pa.int32())
        event = pc.if_else(pc.equal(row, like(NONE, row)), pa.scalar(None, pa.int32()), row)
        return pc.fill_null(pc.take(mask, event), False)

    if change.selector == "kernel":
        return pc.and_(device, rows_in(name_match(trace.select(["name"])["name"], change.pattern or "")))
    if change.selector in ("copy", "comm"):
        return pc.and_(device, category(COPIES if change.selector == "copy" else COMMUNICATION))
    if change.selector == "sync" and change.pattern is None:
        return pc.equal(kind, like(WAIT, kind))
    if change.selector == "launch":
        return pc.and_(host, category(LAUNCH))
    if change.selector == "loader":
        return pc.and_(host, category(INPUT))
    inside = pa.array(sorted(_inside_matching(trace, change.pattern or "")), pa.int32())
    picked = pc.is_in(node_column(graph.row, pa.int32()), value_set=inside)
    return pc.and_(pc.equal(kind, like(WAIT, kind)) if change.selector == "sync" else host, picked)


def _inside_matching(trace: Trace, pattern: str) -> set[int]:
    """Host event rows that match ``pattern`` or lie inside one that does (by the model's nesting)."""
    from opscope.analyses.arrays import rows_where
    from opscope.analyses.depgraph import SLICE_KINDS
    from opscope.model.schema import kind_mask

    ev = trace.select(["kind", "name", "parent"])
    host = kind_mask(ev, SLICE_KINDS)
    matching = set(rows_where(pc.and_(host, name_match(ev["name"], pattern))).to_pylist())
    if not matching:
        return set()
    parents = ev["parent"].to_pylist()
    inside: dict[int, bool] = {}
    for row in rows_where(host).to_pylist():
        trail, current, found = [], row, False
        for _ in range(_MAX_CLIMB):
            if current is None:
                break
            if current in inside:
                found = inside[current]
                break
            if current in matching:
                found = True
                break
            trail.append(current)
            current = parents[current]
        for r in trail:
            inside[r] = found
        inside[row] = found or row in matching
    return {row for row, found in inside.items() if found}


WHATIF = pa.schema([("rank", pa.int64()), ("step", pa.int64()), ("measured_ns", pa.int64()),
                    ("replayed_ns", pa.int64()), ("predicted_ns", pa.int64()), ("change_pct", pa.float64())])


def trace_rank(trace: Trace) -> int | None:
    """The distributed rank the trace records, or None."""
    rank = trace.metadata.get("rank")
    return rank if isinstance(rank, int) and not isinstance(rank, bool) else None


def whatif_table(trace: Trace, changes: Sequence[Change]) -> tuple[pa.Table, list[int]]:
    """Per step: measured, replayed with no change, predicted with ``changes``, and the predicted change against the
    replay (%); and how many nodes each change picked."""
    graph = dependency_graph(trace)
    rank = trace_rank(trace)
    nodes = step_nodes(trace, graph)
    replayed = step_lengths(replay(graph), nodes)  # its replay let go of before the changed one: never two at once
    duration, lag, picked = factors(trace, graph, changes, rank)
    predicted = step_lengths(replay(changed_graph(trace, graph, changes, rank), duration, lag), nodes)
    table = step_table(nodes, replayed, predicted)
    table = table.add_column(0, "rank", pa.array([rank] * table.num_rows, pa.int64()))
    return with_change_pct(table), picked


def changed_graph(trace: Trace, graph: DepGraph, changes: Sequence[Change], rank: int | None = None) -> DepGraph:
    """The graph whose lags the ``idle`` changes for ``rank`` move (the graph itself where none does): the explained
    lags inside an ``idle:CAUSE``'s idle time cut, the edges that did not bind unexplained waits lowered to their
    lane's usual lag (:func:`idle_lags`)."""
    mine = [change for change in changes if change.applies_to(rank)]
    cut = lags_cut(trace, graph, mine)
    chain_lag, extra_lag = idle_lags(cut, mine, rank)
    if chain_lag is cut.chain_lag and extra_lag is cut.extra_lag:
        return cut
    return replace(cut, chain_lag=chain_lag, extra_lag=extra_lag)


def with_change_pct(table: pa.Table) -> pa.Table:
    """A whatif table with its ``change_pct`` column: predicted against replayed (%)."""
    replayed, predicted = table["replayed_ns"].to_pylist(), table["predicted_ns"].to_pylist()
    change = [round(100.0 * (p - r) / r, 2) if r else None for r, p in zip(replayed, predicted)]
    return table.append_column("change_pct", pa.array(change, pa.float64())).cast(WHATIF)


# --- idle:CAUSE ----------------------------------------------------------------------------------------------


#: the parts of the graph inside a cause's idle time: per node, the ns of its own time
NODE_NS = pa.schema([("node", pa.int64()), ("ns", pa.int64())])
#: per node, the edge (CHAIN, EXTRA or AFTER) whose explained lag lies inside it and that lag's ns there
NODE_EDGE_NS = pa.schema([("node", pa.int64()), ("edge", pa.int8()), ("ns", pa.int64())])


@dataclass(frozen=True)
class IdleParts:
    """Per idle cause, the parts of the graph inside the device idle time put down to it (see the module): the
    nodes' own time (``own``: :data:`NODE_NS` rows) and the explained part of their binding lags (``lag``:
    :data:`NODE_EDGE_NS` rows)."""

    own: dict[str, pa.Table]
    lag: dict[str, pa.Table]


def idle_parts(trace: Trace, graph: DepGraph) -> IdleParts:
    """The graph's :class:`IdleParts` (the trace's own graph: made once per trace)."""
    if graph is dependency_graph(trace):
        return _trace_idle_parts(trace)
    return _idle_parts(trace, graph)


@memoized()
def _trace_idle_parts(trace: Trace) -> IdleParts:
    return _idle_parts(trace, dependency_graph(trace))


def _idle_parts(trace: Trace, graph: DepGraph) -> IdleParts:
    from opscope.analyses.gpu import gpu_analysis

    own: dict[str, pa.Table] = {}
    lag: dict[str, pa.Table] = {}
    spans = cause_spans(gpu_analysis(trace)) if len(graph) else {}
    if not spans:
        return IdleParts(own, lag)
    bound = bounds(graph)
    # only the nodes whose host time or explained lag lies inside some idle time are looked at per cause
    everywhere = _union_spans([part for by_cause in spans.values() for part in by_cause.values()])
    host, lagged, lag_lo, lag_hi, is_wait, lag_bound = (
        _idle_candidates_in_c(graph, bound, everywhere) or _idle_candidates(graph, bound, everywhere))
    by_cause_spans = {cause: {d: by_cause[cause] for d, by_cause in spans.items() if cause in by_cause}
                      for cause in IDLE_CAUSES}
    covered = _host_covered(graph, host, {cause: _union_spans(list(per_device.values()))
                                          for cause, per_device in by_cause_spans.items() if per_device})
    for cause, (node, ns) in covered.items():
        own[cause] = pa.table({"node": node, "ns": ns}, schema=NODE_NS)
    del host, covered  # millions of host slices on a long trace: not held through the lags' part
    # the device the lag lies on: a wait's, the device of the work it waited for
    device_of = trace.select(["device"])["device"]  # read at the lags' rows: not made one array of every row's
    waited = graph.extra.arrow(pa.int32(), lagged)
    on_node = pc.if_else(is_wait, pc.if_else(pc.equal(waited, NONE), 0, waited), lagged)
    rows = pc.take(node_column(graph.row, pa.int32()), on_node)
    valid = pc.not_equal(rows, NONE)
    lag_device = pc.if_else(valid, combined(pc.take(device_of, pc.if_else(valid, rows, 0))),
                            pa.scalar(None, device_of.type))
    by_device = {}
    lags = (lagged, lag_lo, lag_hi, lag_bound)
    for d in spans:
        on_device = pc.fill_null(pc.equal(lag_device, d), False) if d is not None else pc.is_null(lag_device)
        # (every lag on the one device of most traces: the arrays as they are, not copies)
        by_device[d] = lags if pc.all(on_device).as_py() else tuple(pc.filter(a, on_device) for a in lags)
    for cause, per_device in by_cause_spans.items():
        if not per_device:
            continue
        mine = []
        for d, (s, e) in per_device.items():
            nodes, lo, hi, edges = by_device[d]
            ns = covered_spans(s, e, lo, hi)
            hit = pc.greater(ns, 0)
            mine.append(pa.table({"node": pc.cast(pc.filter(nodes, hit), pa.int64()), "edge": pc.filter(edges, hit),
                                  "ns": pc.filter(ns, hit)}, schema=NODE_EDGE_NS))
        # a node's lag lies on one device: the devices' rows do not repeat a node
        lag[cause] = pa.concat_tables(mine) if mine else NODE_EDGE_NS.empty_table()
    return IdleParts(own, lag)


Candidates = tuple[pa.Array, pa.Array, pa.Array, pa.Array, pa.Array, pa.Array]


def _idle_candidates(graph: DepGraph, bound_by: Sequence[int], everywhere: tuple[pa.Array, pa.Array]) -> Candidates:
    """The parts of the graph some idle time (``everywhere``: disjoint spans in time order) covers by more than 0 ns:
    the nodes whose own time is the host's (``host``, int32, ascending: their spans are read again from the graph by
    :func:`_host_covered`), and the explained part of each binding lag (``lagged``, ``lag_lo``, ``lag_hi``, whether a
    wait's (``is_wait``) and the replay's bound (``lag_bound``)): device work's before its start, a wait's after its
    work ended."""
    kind, extra = node_column(graph.kind, pa.int8()), node_column(graph.extra, pa.int32())
    start, end, dur = (node_column(v, pa.int64()) for v in (graph.start, graph.end, graph.dur))
    bound = node_column(bound_by, pa.int8())

    def inside_idle(nodes: pa.Array, lo: pa.Array, hi: pa.Array) -> tuple[pa.Array, pa.Array, pa.Array]:
        somewhere = pc.greater(covered_spans(*everywhere, lo, hi), 0)
        return pc.filter(nodes, somewhere), pc.filter(lo, somewhere), pc.filter(hi, somewhere)

    host = true_positions(pc.and_(pc.greater(dur, 0), pc.or_(pc.equal(kind, like(HOST, kind)), pc.and_(
        pc.equal(kind, like(WAIT, kind)), pc.equal(extra, like(NONE, extra))))))
    host = inside_idle(host, pc.take(start, host), pc.take(end, host))[0]
    candidates = true_positions(pc.or_(
        pc.and_(pc.equal(kind, like(DEVICE, kind)),
                pc.is_in(bound, value_set=pa.array([CHAIN, EXTRA, AFTER], pa.int8()))),
        pc.and_(pc.equal(kind, like(WAIT, kind)), pc.equal(bound, like(EXTRA, bound)))))
    c_bound = pc.take(bound, candidates)
    is_wait = pc.equal(pc.take(kind, candidates), WAIT)
    value = pc.take(node_column(graph.chain_lag, pa.int64()), candidates)
    value = pc.if_else(pc.equal(c_bound, EXTRA), pc.take(node_column(graph.extra_lag, pa.int64()), candidates), value)
    value = pc.if_else(pc.equal(c_bound, AFTER), pc.take(node_column(graph.after_lag, pa.int64()), candidates), value)
    edge = pc.if_else(pc.equal(c_bound, EXTRA), ON_EXTRA, pc.if_else(pc.equal(c_bound, AFTER), ON_AFTER, ON_CHAIN))
    unexplained = pc.if_else(pc.equal(pc.cast(edge, pa.int8()),
                                      pc.take(node_column(graph.unexplained_on, pa.int8()), candidates)),
                             pc.take(node_column(graph.unexplained, pa.int64()), candidates), 0)
    explained = pc.subtract(value, pc.min_element_wise(unexplained, pc.max_element_wise(value, 0)))
    has_lag = pc.greater(explained, 0)
    at = pc.if_else(is_wait, pc.take(end, candidates), pc.take(start, candidates))
    lag_lo = pc.filter(pc.subtract(at, value), has_lag)
    lag_hi = pc.add(lag_lo, pc.filter(explained, has_lag))
    lagged = pc.filter(candidates, has_lag)
    is_wait, lag_bound = pc.filter(is_wait, has_lag), pc.filter(c_bound, has_lag)
    somewhere = pc.greater(covered_spans(*everywhere, lag_lo, lag_hi), 0)
    lagged, lag_lo, lag_hi = (pc.filter(a, somewhere) for a in (lagged, lag_lo, lag_hi))
    is_wait, lag_bound = pc.filter(is_wait, somewhere), pc.filter(lag_bound, somewhere)
    return pc.cast(host, pa.int32()), pc.cast(lagged, pa.int64()), lag_lo, lag_hi, is_wait, lag_bound


def _idle_candidates_in_c(graph: DepGraph, bound_by: Sequence[int], everywhere: tuple[pa.Array, pa.Array],
                          ) -> Candidates | None:
    """:func:`_idle_candidates` in one pass in C (``_graph.idle_candidates``) where built; else None."""
    native = native_graph()
    if native is None or any(a.null_count for a in everywhere) or not isinstance(graph.end, Ends):
        return None
    spans = [values_view(combined(pc.cast(a, pa.int64())), "q") for a in everywhere]
    try:
        out = native.idle_candidates(graph.kind, graph.dur, graph.start, bound_by, *graph.links(), graph.end.nodes,
                                     graph.end.values, *spans)
    except (TypeError, ValueError):  # a graph not made by dependency_graph (other columns, other widths)
        return None
    if out is None:
        return None
    arrays = []
    for data, type_ in zip(out, (pa.int32(), *[pa.int64()] * 3, pa.uint8(), pa.int8()), strict=True):
        n = len(data) // (type_.bit_width // 8)
        arrays.append(pa.Array.from_buffers(type_, n, [None, pa.py_buffer(data)]))
    arrays[4] = pc.cast(arrays[4], pa.bool_())
    return tuple(arrays)


def _host_covered(graph: DepGraph, host: pa.Array, spans: dict[str, tuple[pa.Array, pa.Array]],
                  ) -> dict[str, tuple[pa.Array, pa.Array]]:
    """Per set of disjoint, time-ordered ``spans`` (by cause), the ``host`` nodes (int32, ascending) whose own time it
    covers by more than 0 ns, and by how much (int64 both): in C (``_graph.covered_nodes``) where built, one pass
    over the nodes for every set, each node's span read from the graph instead of columns of every candidate's
    (millions of host slices on a long trace); else per set by :func:`~opscope.analyses.intervals.covered_keys`."""
    native = native_graph()
    sets = {cause: tuple(combined(pc.cast(a, pa.int64())) for a in pair) for cause, pair in spans.items()}
    if native is not None and isinstance(graph.end, Ends) and not any(a.null_count for p in sets.values() for a in p):
        cuts = array("q", [0])
        for starts, _ in sets.values():
            cuts.append(cuts[-1] + len(starts))
        starts, ends = (pa.concat_arrays([p[k] for p in sets.values()]) if sets else pa.array([], pa.int64())
                        for k in (0, 1))
        try:
            out = native.covered_nodes(values_view(host, "i"), graph.dur, graph.start, graph.end.nodes,
                                       graph.end.values, values_view(starts, "q"), values_view(ends, "q"), cuts)
        except (TypeError, ValueError):  # a graph not made by dependency_graph (other columns, other widths)
            out = None
        if out is not None:
            return {cause: tuple(pa.Array.from_buffers(pa.int64(), len(b) // 8, [None, pa.py_buffer(b)])
                                 for b in pair) for cause, pair in zip(sets, out)}
    start, end = (node_column(v, pa.int64()) for v in (graph.start, graph.end))
    host_start, host_end = pc.take(start, host), pc.take(end, host)
    return {cause: covered_keys(starts, ends, host_start, host_end, host) for cause, (starts, ends) in sets.items()}


def _union_spans(parts: list[tuple[pa.Array, pa.Array]]) -> tuple[pa.Array, pa.Array]:
    """The union of disjoint, time-ordered spans of several devices, disjoint and in time order (spans that touch
    join)."""
    if len(parts) == 1:
        return parts[0]
    starts = pa.concat_arrays([combined(part[0]) for part in parts]) if parts else pa.array([], pa.int64())
    if not len(starts):
        return starts, starts
    ends = pa.concat_arrays([combined(part[1]) for part in parts])
    # in start order first (one key), then merged in one pass: the parts' runs are each in order already
    order = pc.sort_indices(starts)
    starts, ends = starts.take(order), ends.take(order)
    merged = merged_intervals(pa.repeat(pa.scalar(0, pa.int64()), len(starts)), starts, ends, presorted=True)
    return combined(merged["start"]), combined(merged["end"])


def lags_cut(trace: Trace, graph: DepGraph, changes: Sequence[Change]) -> DepGraph:
    """The graph with the explained lags inside each ``idle:CAUSE`` change's idle time cut by its factor (the
    graph itself when no change is one)."""
    kept: dict[str, float] = {}
    for change in changes:
        if change.selector == "idle" and change.pattern not in (None, "unexplained"):
            kept[change.pattern] = kept.get(change.pattern, 1.0) * change.factor
    if not kept:
        return graph
    parts = idle_parts(trace, graph)
    cut: dict[int, list] = {}
    for cause, factor in kept.items():
        rows = parts.lag.get(cause, NODE_EDGE_NS.empty_table())
        for node, edge, ns in zip(*(rows[c].to_pylist() for c in ("node", "edge", "ns"))):
            entry = cut.setdefault(node, [edge, 0.0])
            entry[1] += (1.0 - factor) * ns
    if not cut:
        return graph
    # a lag is its node's link row's (a node with a lag to cut has one of more than 0 ns: it is linked)
    columns = {CHAIN: array("q", graph.chain_lag.values), EXTRA: array("q", graph.extra_lag.values),
               AFTER: array("q", graph.after_lag.values)}
    for node, (edge, ns) in cut.items():
        at = graph.link[node]
        if at == NONE:
            raise RuntimeError(f"node {node} has a lag it does not have")
        columns[edge][at] -= round(ns)
    return replace(graph, chain_lag=graph.chain_lag.with_values(frozen_view(columns[CHAIN], "q")),
                   extra_lag=graph.extra_lag.with_values(frozen_view(columns[EXTRA], "q")),
                   after_lag=graph.after_lag.with_values(frozen_view(columns[AFTER], "q")))
