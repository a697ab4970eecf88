"""The critical path of each step: the chain of work and waits that set its length, by category and by the ops and
kernels on it.

From the step's last node, the path steps back to whichever dependency bound each node's start in the replay
(:mod:`opscope.analyses.replay`), until it reaches the step's start. Each node holds the path for its own time; the
lag before it counts as launch/runtime before device work (a launch's latency, a queue's gap) and as sync waits
after a wait (its wake-up), but for the part the trace does not explain
(:data:`opscope.analyses.depgraph.LATENCY_CAP_NS`), which counts as "unexplained". The parts tile the step: they add
up to its length.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from opscope.analyses.arrays import arange, key_label, like, name_codes, name_or_category
from opscope.analyses.depgraph import (
    DEVICE,
    LAUNCH,
    NONE,
    ON_AFTER,
    ON_CHAIN,
    ON_EXTRA,
    UNEXPLAINED,
    WAIT,
    DepGraph,
    dependency_graph,
    native_graph,
)
from opscope.analyses.replay import AFTER, EXTRA, Replay, replay, step_nodes
from opscope.model.memo import memoized
from opscope.model.trace import Trace

BREAKDOWN = pa.schema([("step", pa.int64()), ("category", pa.string()), ("ns", pa.int64()),
                       ("share", pa.float64())])
ON_PATH = pa.schema([("step", pa.int64()), ("name", pa.string()), ("category", pa.string()),
                     ("path_ns", pa.int64()), ("own_ns", pa.int64()), ("pieces", pa.int64())])


class NodeTimes(Mapping[int, int]):
    """Per node on a path, its ns, in the order the walk first charged them: kept as two arrays (int32 ``nodes``,
    int64 ``ns``), as the C walk gives them, instead of a dict of Python ints (a path can hold tens of thousands of
    nodes, a trace thousands of paths)."""

    __slots__ = ("_index", "nodes", "ns")

    def __init__(self, nodes: memoryview, ns: memoryview) -> None:
        self.nodes = nodes
        self.ns = ns
        self._index: dict[int, int] | None = None

    def __len__(self) -> int:
        return len(self.nodes)

    def __iter__(self) -> Iterator[int]:
        return iter(self.nodes)

    def __getitem__(self, node: int) -> int:
        if self._index is None:  # looked up by node rarely (tests, references): the index made on the first
            self._index = {n: i for i, n in enumerate(self.nodes)}
        return self.ns[self._index[node]]


def node_times(times: Mapping[int, int]) -> tuple[pa.Array, pa.Array]:
    """A path's nodes and their ns (:class:`NodeTimes` in place, a dict read) as int64 Arrow arrays, in order."""
    if isinstance(times, NodeTimes):
        n = len(times)
        return (pc.cast(pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(times.nodes)]), pa.int64()),
                pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(times.ns)]))
    return pa.array(times.keys(), pa.int64()), pa.array(times.values(), pa.int64())


@dataclass
class StepPath:
    """One step's critical path: time per category, and per node on it (node -> its time on the path)."""

    step: int | None
    length: int
    categories: dict[str, int] = field(default_factory=dict)
    #: per node, its time on the path: its own, and the lag before it charged to it
    nodes: Mapping[int, int] = field(default_factory=dict)
    #: per node, its own time on the path alone
    own: Mapping[int, int] = field(default_factory=dict)

    def add(self, category: str, ns: int, node: int | None = None, own: bool = False) -> None:
        """Charge ``ns`` to the category (and the node): the walk's definition, on dicts."""
        if ns <= 0:
            return
        self.categories[category] = self.categories.get(category, 0) + ns
        if node is not None and category != UNEXPLAINED:
            assert isinstance(self.nodes, dict) and isinstance(self.own, dict)  # the definition's own dicts
            self.nodes[node] = self.nodes.get(node, 0) + ns
            if own:
                self.own[node] = self.own.get(node, 0) + ns


def step_path(graph: DepGraph, run: Replay, step: int | None, first: int, last: int) -> StepPath:
    """The path from ``first``'s start to ``last``'s end, walked back from ``last`` (see the module)."""
    floor = run.start[first]
    path = StepPath(step, run.end[last] - floor)
    node, upto = last, run.end[last]
    while node != NONE and upto > floor:
        bound = run.bound_by[node]
        if graph.kind[node] == WAIT and bound == EXTRA:  # a wait that ended when its work did: back to that work
            prev = graph.extra[node]
            prev_end = max(min(run.end[prev], upto), floor)
            _lag(path, graph, node, upto - prev_end, ON_EXTRA)
            node, upto = prev, prev_end
            continue
        path.add(graph.category[node], upto - max(run.start[node], floor), node, own=True)
        if run.start[node] <= floor:
            break
        prev = graph.extra[node] if bound == EXTRA else graph.after[node] if bound == AFTER else graph.chain[node]
        if prev == NONE:  # nothing before it in the graph: the time from the interval's start is not explained
            path.add(UNEXPLAINED, run.start[node] - floor)
            break
        prev_end = max(min(run.end[prev], run.start[node]), floor)
        edge = ON_EXTRA if bound == EXTRA else ON_AFTER if bound == AFTER else ON_CHAIN
        _lag(path, graph, node, run.start[node] - prev_end, edge)
        node, upto = prev, prev_end
    return path


def _lag(path: StepPath, graph: DepGraph, node: int, lag: int, edge: int) -> None:
    """The lag before ``node`` on the edge the path came by: its unexplained part as such; the rest is launching
    and queueing before device work (launch/runtime), waking up after a wait (sync waits)."""
    unexplained = min(graph.unexplained[node], max(lag, 0)) if graph.unexplained_on[node] == edge else 0
    path.add(UNEXPLAINED, unexplained)
    path.add(LAUNCH if graph.kind[node] == DEVICE else graph.category[node], lag - unexplained, node)


def region_intervals(trace: Trace, pattern: str) -> pa.Table:
    """The instances of the host regions (annotations, ``record_function`` regions, ops) whose name matches
    ``pattern``, outermost where they nest, in start order and numbered from 1 in ``step``: intervals for
    :func:`opscope.analyses.replay.step_nodes`."""
    from opscope.analyses.arrays import name_match, rows_where
    from opscope.analyses.links import op_ancestors
    from opscope.model.schema import kind_mask

    ev = trace.select(["kind", "name", "ts_ns", "dur_ns", "pid", "tid", "parent"])
    kinds = ("user_annotation", "cpu_op")
    rows = rows_where(pc.and_(kind_mask(ev, kinds), name_match(ev["name"], pattern)))
    # an instance inside another (an ancestor that matches too) is part of it
    index, above = op_ancestors(ev, rows, kinds)
    row_list = rows.to_pylist()
    matched = set(row_list)
    nested = {row_list[i] for i, up in zip(index.to_pylist(), above.to_pylist()) if up != row_list[i] and up in matched}
    keep = [r for r in row_list if r not in nested]
    chosen = ev.take(pa.array(keep, pa.int64())).to_pylist() if keep else []
    chosen.sort(key=lambda e: e["ts_ns"])
    return pa.table({"step": pa.array(range(1, len(chosen) + 1), pa.int64()),
                     "pid": pa.array([str(e["pid"]) for e in chosen], pa.string()),
                     "tid": pa.array([str(e["tid"]) for e in chosen], pa.string()),
                     "ts_ns": pa.array([e["ts_ns"] for e in chosen], pa.int64()),
                     "dur_ns": pa.array([e["dur_ns"] for e in chosen], pa.int64())})


@memoized()
def step_paths(trace: Trace, region: str | None = None) -> list[StepPath]:
    """The critical path of every step (of the whole trace as one interval when it has no steps), or of every
    instance of the ``region`` (a regex on host region names: :func:`region_intervals`)."""
    graph = dependency_graph(trace)
    run = replay(graph)
    nodes = step_nodes(trace, graph, None if region is None else region_intervals(trace, region))
    walk = _walker(graph, run)
    return [walk(step, first, last) for step, first, last in zip(nodes.steps, nodes.first, nodes.last)]


def _walker(graph: DepGraph, run: Replay) -> Callable[[int | None, int, int], StepPath]:
    """:func:`step_path` on ``graph`` and ``run``: in C (``_graph.walk_path``) where built, else the definition."""
    native = native_graph()
    labels = list(graph.category.names)
    for name in (UNEXPLAINED, LAUNCH):  # what a lag is charged to, whether or not a node has that category
        if name not in labels:
            labels.append(name)
    if native is None or len(labels) > 256:
        return lambda step, first, last: step_path(graph, run, step, first, last)
    counts_node = bytes(label != UNEXPLAINED for label in labels)
    slot = array("i", [NONE]) * len(graph)  # the C walk's scratch: per node, its entry (all NONE between walks)

    def walk(step: int | None, first: int, last: int) -> StepPath:
        try:
            walked = native.walk_path(graph.kind, graph.chain, graph.category.codes, *graph.links(), run.start,
                                      run.end, run.bound_by, slot, first, last, labels.index(UNEXPLAINED),
                                      labels.index(LAUNCH), counts_node)
        except (TypeError, ValueError):  # a graph not made by dependency_graph (lists, other widths)
            walked = None
        if walked is None:
            return step_path(graph, run, step, first, last)
        codes, sums, nodes, ns, own_nodes, own_ns = walked
        path = StepPath(step, run.end[last] - run.start[first])
        for code, total in zip(codes, sums):  # two codes of one name (none made so) would add up, as in add()
            path.categories[labels[code]] = path.categories.get(labels[code], 0) + total
        path.nodes = NodeTimes(memoryview(nodes).cast("i"), memoryview(ns).cast("q"))
        path.own = NodeTimes(memoryview(own_nodes).cast("i"), memoryview(own_ns).cast("q"))
        return path

    return walk


def breakdown_table(trace: Trace, region: str | None = None) -> pa.Table:
    """One row per step (per instance of ``region``) and category: its time on the critical path and its share of
    the interval (:data:`BREAKDOWN`), largest first within each interval."""
    rows: dict[str, list] = {f.name: [] for f in BREAKDOWN}
    for path in step_paths(trace, region):
        for category, ns in sorted(path.categories.items(), key=lambda item: (-item[1], item[0])):
            rows["step"].append(path.step)
            rows["category"].append(category)
            rows["ns"].append(ns)
            rows["share"].append(round(ns / path.length, 4) if path.length > 0 else 0.0)
    return pa.table(rows, schema=BREAKDOWN)


def on_path_table(trace: Trace, top: int = 10, region: str | None = None) -> pa.Table:
    """Per step (per instance of ``region``), the ``top`` names (host events and device work, by name; gaps as their
    category) with the most time on the critical path (:data:`ON_PATH`): ``path_ns`` with the lags charged to them,
    ``own_ns`` their own time alone; on a tie, the name first met walking back from the step's end first."""
    graph = dependency_graph(trace)
    name_of, names = name_codes(trace.select(["name"])["name"], r"\A\Z")  # "" or none: the category's
    rows: dict[str, list] = {f.name: [] for f in ON_PATH}
    for paths in _batches(step_paths(trace, region)):
        for path, named in zip(paths, _on_path(graph, name_of, names, paths)):
            for (name, category), (ns, own, count, _) in named[:top]:
                rows["step"].append(path.step)
                rows["name"].append(name)
                rows["category"].append(category)
                rows["path_ns"].append(ns)
                rows["own_ns"].append(own)
                rows["pieces"].append(count)
    return pa.table(rows, schema=ON_PATH)


#: Nodes grouped at once by :func:`_on_path`: many short paths share a pass, a long one has its own (a pass holds
#: ~70 bytes per node: the 1 GB trace's 95 paths of 12 K nodes at once held 108 MiB more).
BATCH_NODES = 1 << 16


def _batches(paths: list[StepPath]) -> Iterator[list[StepPath]]:
    """The paths in order, in runs of at most :data:`BATCH_NODES` nodes (or one longer path)."""
    batch: list[StepPath] = []
    held = 0
    for path in paths:
        if batch and held + len(path.nodes) > BATCH_NODES:
            yield batch
            batch, held = [], 0
        batch.append(path)
        held += len(path.nodes)
    if batch:
        yield batch


def _on_path(graph: DepGraph, name_of: pa.Array, names: list, paths: list[StepPath],
             ) -> list[list[tuple[tuple[str, str], list[int]]]]:
    """Per path, its nodes grouped by (name, category), each with [path ns, own ns, nodes, first place among the
    path's nodes], most path ns first (then first met): every path's nodes grouped at once by path and by the names'
    and categories' codes (:func:`opscope.analyses.arrays.name_codes`) in Arrow (a trace can hold thousands of steps:
    one pass per :func:`_batches` run), the texts read per group (two codes of one text, or a name that reads like a
    gap's, add up)."""
    labels = graph.category.names
    parts = [(i, *node_times(path.nodes), *node_times(path.own)) for i, path in enumerate(paths) if path.nodes]
    out: list[dict[tuple[str, str], list[int]]] = [{} for _ in paths]
    if not parts:
        return [[] for _ in paths]
    # a node is on a path once, so (path, node) keys its own time; a path's places start at its offset
    offsets = array("q", [0])
    for _, nodes, *_ in parts:
        offsets.append(offsets[-1] + len(nodes))
    path = _repeat_each(parts, 1)
    nodes = pa.concat_arrays([p[1] for p in parts])
    own_at = pc.index_in(_path_node(path, nodes, len(graph)), value_set=_path_node(
        _repeat_each(parts, 3), pa.concat_arrays([p[3] for p in parts]), len(graph)))
    own = pc.fill_null(pc.take(pa.concat_arrays([p[4] for p in parts]), own_at), 0)
    row = pc.take(pa.Array.from_buffers(pa.int32(), len(graph), [None, pa.py_buffer(graph.row)]), nodes)
    code = pc.take(pa.Array.from_buffers(pa.int8(), len(graph), [None, pa.py_buffer(graph.category.codes)]), nodes)
    has_row = pc.not_equal(row, like(NONE, row))
    key = name_or_category(pc.if_else(has_row, pc.take(name_of, pc.if_else(has_row, row, 0)), -1), code)
    grouped = pa.table({"path": path, "key": key, "code": code, "ns": pa.concat_arrays([p[2] for p in parts]),
                        "own": own, "at": arange(offsets[-1])}).group_by(
        ["path", "key", "code"], use_threads=False).aggregate([("ns", "sum"), ("own", "sum"), ("at", "count"),
                                                               ("at", "min")])
    start = {i: offsets[n] for n, (i, *_) in enumerate(parts)}
    for i, k, c, ns, own_ns, count, at in zip(*(grouped[f].to_pylist() for f in (
            "path", "key", "code", "ns_sum", "own_sum", "at_count", "at_min"))):
        entry = out[i].setdefault((key_label(k, names, labels), labels[c]), [0, 0, 0, at - start[i]])
        entry[0] += ns
        entry[1] += own_ns
        entry[2] += count
        entry[3] = min(entry[3], at - start[i])
    return [sorted(named.items(), key=lambda item: (-item[1][0], item[1][3])) for named in out]


def _path_node(path: pa.Array, nodes: pa.Array, n_nodes: int) -> pa.Array:
    """One int64 key per (path index, node)."""
    return pc.add(pc.multiply(pc.cast(path, pa.int64()), n_nodes), nodes)


def _repeat_each(parts: list[tuple], column: int) -> pa.Array:
    """Each part's path index, once per element of its array at ``column``."""
    which = array("i")
    for part in parts:
        which.extend(array("i", [part[0]]) * len(part[column]))
    return pa.Array.from_buffers(pa.int32(), len(which), [None, pa.py_buffer(which)])
