"""Kernels replayed from a CUDA/HIP graph, given the ops that launched them when the graph was captured.

A graph replay is one runtime call (``cudaGraphLaunch``, ``hipGraphLaunch``) whose correlation id every kernel of
the graph shares, so in the execution trace those kernels have no op: the ops ran once, at capture. Inference
servers (vLLM, SGLang, xDiT) can write a second trace while they capture their graphs: there each kernel launch is
a runtime call with the kernel's name in its ``kernel`` argument, under the op, module and annotation that made it.

This module matches the two. A captured graph is the launches under one outermost user annotation of the capture
trace (vLLM's ``capture_32_FULL``: batch size and mode), in launch order; launches under no annotation are one graph.
A replay is matched to the captured graph whose kernel names, in order, agree with its kernels' best (a longest
matching subsequence, :class:`difflib.SequenceMatcher`), and each of its kernels that falls in a matching block gets
that launch's op, top-level op and annotation. The traces carry no graph or node ids to match on, so the match is by
kernel order, and :class:`CaptureMatch` says how many kernels and how much device time it covers.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from opscope.analyses.arrays import rows_where
from opscope.analyses.event_args import args_by_id
from opscope.analyses.links import climb, device_links, op_ancestors
from opscope.model.schema import kind_mask
from opscope.model.trace import Trace

#: Runtime calls that replay a whole graph.
GRAPH_LAUNCH = r"^(cuda|cu|hip)GraphLaunch"
_NO_GROUP = -1

ATTRIBUTION_SCHEMA = pa.schema([
    ("device_row", pa.int64()),
    ("source", pa.int64()),  # which capture trace (the position in the list the graphs came from)
    ("launch_row", pa.int64()),  # the kernel's launch in that capture trace (a row of its events)
    ("op_name", pa.string()),
    ("top_op_name", pa.string()),
    ("annotation", pa.string()),
    ("graph", pa.string()),
])


@dataclass(frozen=True)
class CapturedGraph:
    """The kernel launches of one graph capture, in launch order."""

    name: str  #: the outermost annotation around them ("" when none)
    kernels: tuple[str, ...]
    launch_rows: tuple[int, ...]  #: the launches' rows in the capture trace
    op_name: tuple[str | None, ...]
    top_op_name: tuple[str | None, ...]
    annotation: tuple[str | None, ...]
    source: int = 0  #: which capture trace it came from (see :func:`captured_graphs`)


@dataclass(frozen=True)
class CaptureMatch:
    """Replayed kernels of an execution trace and the capture attribution found for them."""

    attribution: pa.Table  #: one row per matched replayed kernel (:data:`ATTRIBUTION_SCHEMA`)
    replays: int  #: graph launches in the execution trace
    replayed_kernels: int  #: device events those launches ran
    replayed_ns: int  #: their device time
    matched_kernels: int
    matched_ns: int
    graphs: int  #: graphs in the capture trace(s)
    method: str = "kernel order within each graph"

    def facts(self) -> dict[str, int | str]:
        """The match's figures, JSON-able (kept in the merged trace's metadata, ``graph_capture``)."""
        return {"replays": self.replays, "replayed_kernels": self.replayed_kernels, "replayed_ns": self.replayed_ns,
                "matched_kernels": self.matched_kernels, "matched_ns": self.matched_ns,
                "captured_graphs": self.graphs, "method": self.method}

    def describe(self) -> str:
        if not self.replays:
            return "no graph launches in the trace: the capture trace is not used"
        share = 100.0 * self.matched_ns / self.replayed_ns if self.replayed_ns else 0.0
        return (f"graph capture: {self.matched_kernels:,} of {self.replayed_kernels:,} replayed kernels "
                f"({share:.1f}% of their device time, {self.replays:,} graph launches) have the op that launched "
                f"them at capture, matched by {self.method} against {self.graphs:,} captured graph(s)")


def captured_graphs(capture: Trace, source: int = 0) -> list[CapturedGraph]:
    """The graphs of a capture trace: its kernel launches (runtime calls with a ``kernel`` argument) grouped by their
    outermost user annotation, each in launch order, with the op, top-level op and innermost annotation of each.
    ``source`` numbers the capture trace among several."""
    events = capture.select(["kind", "name", "ts_ns", "parent"])
    runtime = rows_where(kind_mask(events, ("runtime",)))
    kernel_of = _kernel_args(capture, runtime)
    launches = pa.array(sorted(kernel_of), type=pa.int64())
    if not len(launches):
        return []
    launches = pc.take(launches, pc.sort_indices(pc.take(events["ts_ns"], launches)))
    op, top, annotation = climb(capture.select(["kind", "name", "parent"]), launches)
    group = _outermost_annotation(events, launches)
    names = events["name"]

    def name_at(rows: pa.Array) -> list[str | None]:
        return pc.take(names, rows).cast(pa.string()).to_pylist()

    by_group: dict[int, list[int]] = {}
    for i, g in enumerate(group):
        by_group.setdefault(_NO_GROUP if g is None else g, []).append(i)
    rows = launches.to_pylist()
    ops, tops, annotations = name_at(op), name_at(top), name_at(annotation)
    group_names = {g: ("" if g == _NO_GROUP else str(names[g].as_py())) for g in by_group}
    return [CapturedGraph(name=group_names[g], kernels=tuple(kernel_of[rows[i]] for i in members),
                          launch_rows=tuple(rows[i] for i in members), source=source,
                          op_name=tuple(ops[i] for i in members), top_op_name=tuple(tops[i] for i in members),
                          annotation=tuple(annotations[i] for i in members))
            for g, members in sorted(by_group.items(), key=lambda item: item[1][0])]


def match_replays(trace: Trace, graphs: list[CapturedGraph]) -> CaptureMatch:
    """Each graph launch of ``trace`` matched to the captured graph its kernels agree with best (see the module)."""
    events = trace.select(["kind", "name", "ts_ns", "dur_ns"])
    links = device_links(trace)
    launch_rows = links["launch_row"]
    is_replay = pc.fill_null(pc.take(pc.match_substring_regex(events["name"].cast(pa.string()), GRAPH_LAUNCH),
                                     launch_rows), False)
    device_rows = pc.filter(links["device_row"], is_replay)
    if not len(device_rows):
        return CaptureMatch(pa.table({f.name: [] for f in ATTRIBUTION_SCHEMA}, schema=ATTRIBUTION_SCHEMA),
                            0, 0, 0, 0, 0, len(graphs))
    replay_of = pc.filter(launch_rows, is_replay).to_pylist()
    starts = pc.take(events["ts_ns"], device_rows).to_pylist()
    durations = pc.take(events["dur_ns"], device_rows).to_pylist()
    names = pc.take(events["name"], device_rows).cast(pa.string()).to_pylist()
    per_replay: dict[int, list[int]] = {}
    for i, launch in enumerate(replay_of):
        per_replay.setdefault(launch, []).append(i)
    device_list = device_rows.to_pylist()
    out: dict[str, list] = {f.name: [] for f in ATTRIBUTION_SCHEMA}
    matched_ns = matched = 0
    found: dict[tuple[str, ...], tuple[CapturedGraph | None, list[difflib.Match]]] = {}
    for members in per_replay.values():
        members.sort(key=lambda i: starts[i])
        replayed = tuple(names[i] for i in members)
        if replayed not in found:  # the replays of one graph run the same kernels: matched once
            found[replayed] = _best_graph(list(replayed), graphs)
        best, blocks = found[replayed]
        if best is None:
            continue
        for block in blocks:
            for k in range(block.size):
                i, j = members[block.a + k], block.b + k
                out["device_row"].append(device_list[i])
                out["source"].append(best.source)
                out["launch_row"].append(best.launch_rows[j])
                out["op_name"].append(best.op_name[j])
                out["top_op_name"].append(best.top_op_name[j])
                out["annotation"].append(best.annotation[j])
                out["graph"].append(best.name)
                matched += 1
                matched_ns += durations[i] or 0
    return CaptureMatch(pa.table(out, schema=ATTRIBUTION_SCHEMA), len(per_replay), len(device_rows),
                        sum(d or 0 for d in durations), matched, matched_ns, len(graphs))


def _best_graph(replayed: list[str], graphs: list[CapturedGraph],
                ) -> tuple[CapturedGraph | None, list[difflib.Match]]:
    best, best_blocks, best_size = None, [], 0
    for graph in graphs:
        matcher = difflib.SequenceMatcher(a=replayed, b=list(graph.kernels), autojunk=False)
        blocks = [b for b in matcher.get_matching_blocks() if b.size]
        size = sum(b.size for b in blocks)
        if size > best_size:
            best, best_blocks, best_size = graph, blocks, size
    return best, best_blocks


def _kernel_args(trace: Trace, rows: pa.Array) -> dict[int, str]:
    """The ``kernel`` argument of each of these event rows that has one (row -> kernel name)."""
    parsed = args_by_id(trace, rows.to_pylist())
    return {row: args["kernel"] for row, args in parsed.items()
            if isinstance(args.get("kernel"), str) and args["kernel"]}


def _outermost_annotation(events: pa.Table, rows: pa.Array) -> list[int | None]:
    """The outermost ``user_annotation`` at or above each row (a row; None where there is none)."""
    outer: list[int | None] = [None] * len(rows)
    index, found = op_ancestors(events, rows, kinds=("user_annotation",))
    for i, row in zip(index.to_pylist(), found.to_pylist()):  # innermost first: the last one per row is outermost
        outer[i] = row
    return outer
