"""Replay a trace's dependency graph: every start derived from the edges and the durations, with durations changed
at will; the critical path of each step; the steps' measured, replayed and predicted times.

A node starts when the last of its dependencies allows (the end of the node before it on its thread or stream plus
that edge's lag; the end of its launch call, or of the work it waits for, plus that lag; for device work, the end of
other streams' work it waited for) and ends ``dur x factor``
later; a wait ends when the work it waits for has ended plus its lag, or after its own part if that is later. With
every factor 1 the replay gives back the measured times where the graph holds the trace's order: how close it comes
is the test of the graph (:func:`step_times`).

The replay's pass runs in C (``_graph.c``) where it is built and not turned off (``OPSCOPE_NATIVE=0``); the Python
below is its definition.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from opscope.analyses.depgraph import (
    NONE,
    ON_AFTER,
    ON_CHAIN,
    ON_EXTRA,
    WAIT,
    DepGraph,
    frozen_view,
    native_graph,
    node_column,
)
from opscope.model.buffers import values_view
from opscope.model.trace import Trace

CHAIN, EXTRA, ROOT, AFTER = 0, 1, 2, 3


@dataclass
class Replay:
    """Start and end of each node (ns since the trace's first instant), and which dependency bound each start."""

    start: Sequence[int]  #: int64 (read-only memoryviews)
    end: Sequence[int]
    bound_by: Sequence[int]  #: int8: CHAIN, EXTRA, AFTER (the other stream's work it waited for) or ROOT


def _floats(values: Sequence[float]) -> memoryview:
    """``values`` as a read-only memoryview of float64 (as it is when it is one)."""
    if isinstance(values, memoryview) and values.format == "d":
        return values.toreadonly()
    return memoryview(values if isinstance(values, array) and values.typecode == "d" else array("d", values)
                      ).toreadonly()


def replay(graph: DepGraph, factor: Sequence[float] | None = None, lag_factor: Sequence[float] | None = None,
           ) -> Replay:
    """The graph replayed with each node's duration times ``factor[node]`` (1 where None) and each node's
    unexplained lag times ``lag_factor[node]`` (1 where None)."""
    n = len(graph)
    factors = _floats(factor) if factor is not None else None  # None: every factor 1 (no array of n ones)
    lags = _floats(lag_factor) if lag_factor is not None else None
    native = native_graph()
    if native is not None:
        start_c, end_c, bound_c = bytearray(8 * n), bytearray(8 * n), bytearray(n)
        try:
            done = native.replay(graph.kind, graph.dur, graph.chain, *graph.links(), factors, lags, start_c, end_c,
                                 bound_c)
        except (TypeError, ValueError):  # a graph not made by dependency_graph (lists, other widths)
            done = False
        if done:
            return Replay(start=frozen_view(start_c, "q"), end=frozen_view(end_c, "q"),
                          bound_by=frozen_view(bound_c, "b"))
    return _replay(graph, factors if factors is not None else _floats(array("d", [1.0]) * n), lags)


def bounds(graph: DepGraph) -> Sequence[int]:
    """What bound each node's start in the graph replayed with no change (:attr:`Replay.bound_by`), in C without a
    column of starts (34 MiB less while it runs on a 1 GB trace's 4.26 M nodes)."""
    native = native_graph()
    if native is not None:
        n = len(graph)
        end_c, bound_c = bytearray(8 * n), bytearray(n)
        try:
            done = native.replay(graph.kind, graph.dur, graph.chain, *graph.links(), None, None, None, end_c, bound_c)
        except (TypeError, ValueError):  # a graph not made by dependency_graph (lists, other widths)
            done = False
        if done:
            return frozen_view(bound_c, "b")
    return replay(graph).bound_by


def _replay(graph: DepGraph, factors: Sequence[float], lag_factor: Sequence[float] | None) -> Replay:
    """:func:`replay`'s definition."""
    n = len(graph)
    start = [0] * n
    end = [0] * n
    bound = [ROOT] * n
    kind, dur, chain, chain_lag, extra, extra_lag = (graph.kind, graph.dur, graph.chain, graph.chain_lag,
                                                     graph.extra, graph.extra_lag)
    unexplained, unexplained_on = graph.unexplained, graph.unexplained_on
    after, after_lag = graph.after, graph.after_lag
    for node in range(n):
        cut_chain = cut_extra = cut_after = 0
        if lag_factor is not None and unexplained[node]:
            cut = round(unexplained[node] * (1.0 - lag_factor[node]))
            on = unexplained_on[node]
            cut_chain, cut_extra, cut_after = (cut if on == ON_CHAIN else 0, cut if on == ON_EXTRA else 0,
                                               cut if on == ON_AFTER else 0)
        c = chain[node]
        at = (end[c] if c != NONE else 0) + chain_lag[node] - cut_chain
        how = CHAIN if c != NONE else ROOT
        e = extra[node]
        own = round(dur[node] * factors[node])
        if kind[node] == WAIT:
            # a wait starts after the node before it and ends when its work has ended (plus its lag), or after its
            # own part when that is later; factor 0 removes the wait (it returns at once)
            start[node] = at
            bound[node] = how
            finish = at + own
            if e != NONE and factors[node] > 0:
                waited = end[e] + extra_lag[node] - cut_extra
                if waited > finish:
                    finish = waited
                    bound[node] = EXTRA
            end[node] = finish
            continue
        if e != NONE:
            via = end[e] + extra_lag[node] - cut_extra
            # a tie goes to the edge that bound the start as measured (its lag is the measured one)
            if via > at or (via == at and (how == ROOT or unexplained_on[node] == ON_EXTRA)):
                at, how = via, EXTRA
        a = after[node]
        if a != NONE:
            via = end[a] + after_lag[node] - cut_after
            if via >= at:
                at, how = via, AFTER
        start[node] = at
        bound[node] = how
        end[node] = at + own
    return Replay(start=frozen_view(array("q", start), "q"), end=frozen_view(array("q", end), "q"),
                  bound_by=frozen_view(array("b", bound), "b"))


# --- steps ---------------------------------------------------------------------------------------------------

STEP_TIMES = pa.schema([("step", pa.int64()), ("measured_ns", pa.int64()), ("replayed_ns", pa.int64()),
                        ("predicted_ns", pa.int64())])


@dataclass(frozen=True)
class StepNodes:
    """Per step (the trace's steps table, in order): the first and last node of its interval on its thread."""

    steps: list[int | None]
    measured: list[int]
    first: list[int]
    last: list[int]


def _int64(values: Sequence[int]) -> pa.Array:
    """A graph's int64 memoryview as an Arrow array, in place."""
    return pa.Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(values)])


def step_nodes(trace: Trace, graph: DepGraph, intervals: pa.Table | None = None) -> StepNodes:
    """The nodes that open and close each step: the first slice starting at or after its start and the last ending
    at or before its end on the step's own host thread where the steps table names one, else among all nodes. A
    trace without steps is one interval (step null): its busiest host thread's first slice to its last.
    ``intervals``: other intervals than the steps, with the steps table's ``step``, ``pid``, ``tid``, ``ts_ns`` and
    ``dur_ns`` columns (a region's instances: :func:`opscope.analyses.critical_path.region_intervals`)."""
    steps = trace.steps if intervals is None else intervals
    out = StepNodes([], [], [], [])
    if not steps.num_rows:
        if intervals is not None:
            return out
        busiest = max(graph.threads.values(), key=len, default=[])
        if busiest:
            out.steps.append(None)
            out.measured.append(graph.end[busiest[-1]] - graph.start[busiest[0]])
            out.first.append(busiest[0])
            out.last.append(busiest[-1])
        return out
    start, end = graph.start, graph.end
    everything: pa.Array | None = None  # every node by start (ties by number), made when a step needs it
    ends: pa.Array | None = None  # every node's end, the same
    for step, pid, tid, ts, dur in zip(*(steps[c].to_pylist() for c in ("step", "pid", "tid", "ts_ns", "dur_ns"))):
        nodes = graph.threads.get(f"{pid}/{tid}")
        if nodes is not None:  # a thread's slices are in time order: start and end both rise
            a = bisect.bisect_left(nodes, ts, key=start.__getitem__)
            b = bisect.bisect_right(nodes, ts + dur, key=end.__getitem__) - 1
            first, last = (nodes[a], nodes[b]) if a <= b < len(nodes) else (NONE, NONE)
        else:
            if everything is None or ends is None:
                everything = pc.sort_indices(_int64(start))  # stable
                ends = node_column(end, pa.int64())
            ordered = values_view(everything, "Q")
            lo = bisect.bisect_left(ordered, ts, key=start.__getitem__)
            hi = bisect.bisect_left(ordered, ts + dur, key=start.__getitem__)
            span = everything.slice(lo, hi - lo)
            inside = pc.filter(span, pc.less_equal(pc.take(ends, span), ts + dur))
            first, last = NONE, NONE
            if len(inside):
                inside_ends = pc.take(ends, inside)
                latest = pc.max(inside_ends)
                first = inside[0].as_py()
                last = pc.max(pc.filter(inside, pc.equal(inside_ends, latest))).as_py()
        if first == NONE:
            continue
        out.steps.append(step)
        out.measured.append(dur)
        out.first.append(first)
        out.last.append(last)
    return out


def step_times(trace: Trace, graph: DepGraph, changed: Replay | None = None) -> pa.Table:
    """Per step: measured, replayed with no change, and predicted with ``changed`` (the replay itself when None)."""
    nodes = step_nodes(trace, graph)
    replayed = step_lengths(replay(graph), nodes)
    return step_table(nodes, replayed, replayed if changed is None else step_lengths(changed, nodes))


def step_lengths(run: Replay, nodes: StepNodes) -> list[int]:
    """Each step's length in a replay: from its first node's start to its last node's end."""
    return [run.end[b] - run.start[a] for a, b in zip(nodes.first, nodes.last)]


def step_table(nodes: StepNodes, replayed: list[int], predicted: list[int]) -> pa.Table:
    """:data:`STEP_TIMES` from the steps' nodes (their measured lengths) and their replayed and predicted lengths."""
    return pa.table({"step": pa.array(nodes.steps, pa.int64()), "measured_ns": pa.array(nodes.measured, pa.int64()),
                     "replayed_ns": pa.array(replayed, pa.int64()), "predicted_ns": pa.array(predicted, pa.int64())},
                    schema=STEP_TIMES)


