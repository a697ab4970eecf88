"""Op time by nn.Module scope and by Python frame (tfprof's scope and code views).

Ops and Python frames nest in separate layers of the model, so an op's enclosing frame is found by
time: the innermost Python event on the same thread whose span holds the op's start
(:func:`opscope.analyses.intervals.innermost_enclosing`, which memory attribution uses too). Each op counts its
time exclusive of the selected ops nested in it, so a module's total is the time of the outermost ops
inside it, and nothing is counted twice.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from opscope.analyses.arrays import (
    arange,
    codes_in,
    combined,
    local_index,
    scatter,
    shares_pct,
    thread_keys,
    top_down,
    vocabulary,
)
from opscope.analyses.filters import EventFilter
from opscope.analyses.intervals import innermost_enclosing
from opscope.errors import UsageError
from opscope.model.buffers import true_positions
from opscope.model.derive import OP_LAYER
from opscope.model.schema import kind_mask
from opscope.model.trace import Trace

MODULE_PREFIX = "nn.Module: "
#: Python frames of a module's forward in traces without ``nn.Module:`` events (older torch).
_FORWARD_FRAME = re.compile(r"\(\d+\): forward$")
_FRAME = re.compile(r"^(.*)\((\d+)\): (.*)$")
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_PYBIND = re.compile(r"pybind11_builtins\.pybind11_detail_function_record\w*")
OUTSIDE_MODULES = "(no module)"
OUTSIDE_FRAMES = "(no python frame)"
SORTS = ("order", "name", "calls", "wall_ns", "total_ns", "self_ns", "ops", "total_pct", "self_pct")
NO_PYTHON = ("no Python events in this trace: record with torch.profiler.profile(with_stack=True, "
             "with_modules=True), or opscope record --stack")


# --- frame trees ---------------------------------------------------------------------------------------

def frame_name(name: str) -> str:
    """``train.py(42): forward`` -> ``train.py:42 forward``; object addresses dropped from built-ins."""
    m = _FRAME.match(name)
    if m:
        return f"{m.group(1)}:{m.group(2)} {m.group(3)}"
    return _PYBIND.sub("pybind11 function", _ADDRESS.sub("", name))


def module_name(name: str) -> str:
    """``nn.Module: Conv2d_0`` -> ``Conv2d_0`` (torch numbers the instances of each class in call order)."""
    return name[len(MODULE_PREFIX):] if name.startswith(MODULE_PREFIX) else frame_name(name)


@dataclass
class FrameTree:
    """Op time aggregated over a tree of Python frames: node 0.. with parent (-1 at roots) and name."""

    parent: list[int] = field(default_factory=list)
    name: list[str] = field(default_factory=list)
    first_ts: list[int | None] = field(default_factory=list)
    calls: list[int] = field(default_factory=list)
    wall_ns: list[int] = field(default_factory=list)
    self_ns: list[int] = field(default_factory=list)
    self_ops: list[int] = field(default_factory=list)
    outside_ns: int = 0
    outside_ops: int = 0
    outside_label: str = OUTSIDE_FRAMES
    separator: str = ";"
    note: str | None = None
    #: each selected op (its event row), the node it counts for (null: outside every kept frame) and its time
    #: exclusive of the selected ops nested in it
    op_rows: pa.Array | None = None
    op_nodes: pa.Array | None = None
    op_times: pa.Array | None = None


def module_tree(trace: Trace, filt: EventFilter | None = None) -> FrameTree:
    """Op time by nn.Module path (``Net_0/Sequential_1/Conv2d_5``), from the ``nn.Module:`` Python events.

    Traces from torch versions without those events fall back on the ``...(N): forward`` frames.
    """
    def kept(names: list[str]) -> list[bool]:
        modules = [n.startswith(MODULE_PREFIX) for n in names]
        if any(modules):
            return modules
        return [bool(_FORWARD_FRAME.search(n)) for n in names]

    tree = frame_tree(trace, filt, kept, module_name, separator="/", outside=OUTSIDE_MODULES)
    if tree.note is None and not tree.name:
        tree.note = ("no nn.Module scopes among the Python events: record with torch.profiler.profile("
                     "with_stack=True, with_modules=True) and call the model's modules")
    return tree


def code_tree(trace: Trace, filt: EventFilter | None = None, frames: str | None = None) -> FrameTree:
    """Op time by Python call path; with ``frames`` (a regex) only the frames whose name matches are kept
    (ops count for their nearest kept frame)."""
    pattern = None
    if frames:
        try:
            pattern = re.compile(frames)
        except re.error as exc:
            raise UsageError(f"invalid regular expression {frames!r}: {exc}") from None

    def kept(names: list[str]) -> list[bool]:
        return [True] * len(names) if pattern is None else [bool(pattern.search(frame_name(n))) for n in names]

    tree = frame_tree(trace, filt, kept, frame_name, separator=";", outside=OUTSIDE_FRAMES)
    if tree.note is None and not tree.name and frames:
        tree.note = f"no Python frame matches {frames!r}"
    return tree


def frame_tree(trace: Trace, filt: EventFilter | None, kept: Callable[[list[str]], list[bool]],
               label: Callable[[str], str], separator: str, outside: str) -> FrameTree:
    """The tree of kept Python frames (by call path) with the time of the selected ops under each."""
    filt = filt or EventFilter(kinds=("cpu_op",))
    tree = FrameTree(separator=separator, outside_label=outside)
    kinds = trace.select(["kind"])
    is_python = kind_mask(kinds, ("python",))
    if not pc.any(is_python).as_py():
        tree.note = NO_PYTHON
        return tree
    events = trace.select(["kind", "name", "ts_ns", "dur_ns", "pid", "tid", "stream", "parent", "depth", "step",
                           "merged"])
    host = pc.is_null(events["stream"])
    py_mask = pc.and_(kind_mask(events, ("python",)), host)
    layer = pc.and_(kind_mask(events, OP_LAYER), host)
    pid_vocab, tid_vocab = vocabulary(events["pid"]), vocabulary(events["tid"])

    # Python layer: node of the nearest kept frame (itself or an ancestor) for every python event. (The columns this
    # reads only: a copy of every column of millions of Python events would be held through the ops' part.)
    py = events.select(["name", "ts_ns", "dur_ns", "pid", "tid", "parent", "depth"]
                       + (["step"] if filt.steps else [])).filter(py_mask)
    py_local = local_index(py_mask)
    py_parent = _parent_local(py["parent"], py_local)
    raw_vocab = vocabulary(py["name"])
    raw_codes = codes_in(py["name"], raw_vocab)
    raw_names = raw_vocab.to_pylist()
    labels = [label(n) for n in raw_names]
    label_index: dict[str, int] = {}
    label_code = [label_index.setdefault(t, len(label_index)) for t in labels]
    code = pc.take(pa.array(label_code, pa.int64()), raw_codes)
    keep_raw = pa.array(kept(raw_names), pa.bool_())
    keep = pc.fill_null(pc.take(keep_raw, raw_codes), False)
    n_labels = max(len(label_index), 1)
    label_names = list(label_index)
    nodes: dict[int, int] = {}

    def intern(rows: pa.Array, parents: pa.Array | None, parent_nodes: pa.Array | None) -> pa.Array:
        up = pa.nulls(len(rows), pa.int64()) if parent_nodes is None else parent_nodes
        k = pc.take(keep, rows)
        if not pc.any(k).as_py():
            return up
        labels_here = pc.take(code, rows)  # noqa: F821 (``code`` goes once the walk is done)
        key = pc.add(pc.multiply(pc.add(pc.fill_null(up, -1), 1), n_labels), labels_here)
        uniq = pc.unique(pc.filter(key, k))
        ids = []
        for value in uniq.to_pylist():
            node = nodes.get(value)
            if node is None:
                node = nodes[value] = len(tree.name)
                tree.parent.append(value // n_labels - 1)
                tree.name.append(label_names[value % n_labels])
            ids.append(node)
        mine = pc.take(pa.array(ids, pa.int64()), pc.index_in(key, value_set=uniq))
        return pc.if_else(k, mine, up)

    node_of = top_down(py_parent, py["depth"], intern)
    del intern, code, raw_codes, py_local  # per event and per Python event: not held through the ops' part
    n_nodes = len(tree.name)
    tree.calls, tree.wall_ns, tree.first_ts = [0] * n_nodes, [0] * n_nodes, [None] * n_nodes
    tree.self_ns, tree.self_ops = [0] * n_nodes, [0] * n_nodes

    # Calls and wall time of each node: its kept events (in the selected steps).
    own = pc.and_(keep, pc.is_valid(node_of))
    if filt.steps:
        own = pc.and_(own, pc.fill_null(pc.is_in(py["step"], pa.array(list(filt.steps), pa.int64())), False))
    calls = pa.table({"node": pc.filter(node_of, own), "dur": pc.filter(py["dur_ns"], own),
                      "ts": pc.filter(py["ts_ns"], own)}).group_by("node", use_threads=False).aggregate(
        [("dur", "count"), ("dur", "sum"), ("ts", "min")])
    for node, count, total, first in zip(*(calls[c].to_pylist() for c in ("node", "dur_count", "dur_sum",
                                                                            "ts_min"))):
        tree.calls[node], tree.wall_ns[node], tree.first_ts[node] = count, total, first

    # The selected ops, their time exclusive of the selected ops nested in them, and their innermost frame.
    py = py.select(["pid", "tid", "ts_ns", "dur_ns"])  # what the frames' spans read: the rest let go of first
    ops = op_times(events, layer, filt)
    if ops.num_rows == 0:
        return tree
    py_thread = thread_keys(py["pid"], py["tid"], pid_vocab, tid_vocab)
    spans = pa.table({"thread": py_thread, "ts": py["ts_ns"], "end": pc.add(py["ts_ns"], py["dur_ns"]),
                      "parent": py_parent})
    del py
    queries = pa.table({"thread": thread_keys(ops["pid"], ops["tid"], pid_vocab, tid_vocab), "ts": ops["ts_ns"]})
    frame = innermost_enclosing(spans, queries)
    op_node = pc.take(node_of, frame)
    tree.op_rows, tree.op_nodes, tree.op_times = combined(ops["row"]), combined(op_node), combined(ops["time"])
    inside = pc.is_valid(op_node)
    per_node = pa.table({"node": pc.filter(op_node, inside), "t": pc.filter(ops["time"], inside)}).group_by(
        "node", use_threads=False).aggregate([("t", "sum"), ("t", "count")])
    for node, total, count in zip(*(per_node[c].to_pylist() for c in ("node", "t_sum", "t_count"))):
        tree.self_ns[node], tree.self_ops[node] = total, count
    outside = pc.invert(inside)
    tree.outside_ns = pc.sum(pc.filter(ops["time"], outside)).as_py() or 0
    tree.outside_ops = pc.sum(pc.cast(outside, pa.int64())).as_py() or 0
    return tree


def _parent_local(parent: pa.ChunkedArray | pa.Array, local: pa.Array) -> pa.Array:
    """Event-row parents mapped to positions in a subset (``local`` = each event row's subset position)."""
    parent = pc.cast(combined(parent), pa.int64())
    return pc.take(local, parent)  # null parents stay null


def op_times(events: pa.Table, layer: pa.Array | pa.ChunkedArray, filt: EventFilter) -> pa.Table:
    """The ops ``filt`` selects (same-name only children folded away, as ``opscope ops`` counts them) with
    ``time``: their duration less the durations of the selected ops directly nested in them."""
    sub = events.filter(layer)
    selected = pc.invert(pc.fill_null(sub["merged"], False))
    chosen = filt.apply(pa.table({"kind": sub["kind"], "name": sub["name"], "step": sub["step"],
                                  "row": arange(sub.num_rows)}))["row"]
    selected = pc.and_(selected, pc.is_in(arange(sub.num_rows), value_set=combined(chosen)))
    selected = combined(selected)
    if not pc.any(selected).as_py():
        return pa.table({"ts_ns": pa.array([], pa.int64()), "pid": pa.array([], pa.string()),
                         "tid": pa.array([], pa.string()), "time": pa.array([], pa.int64()),
                         "row": pa.array([], pa.int64())})
    parent = _parent_local(sub["parent"], local_index(layer))

    def nearest(rows, parents, values):
        if parents is None:
            return pa.nulls(len(rows), pa.int64())
        return pc.if_else(pc.fill_null(pc.take(selected, parents), False), parents, values)

    near = top_down(parent, sub["depth"], nearest)
    dur = combined(sub["dur_ns"])
    nested = pa.table({"up": pc.filter(near, selected), "dur": pc.filter(dur, selected)}).filter(
        pc.is_valid(pc.filter(near, selected))).group_by("up", use_threads=False).aggregate([("dur", "sum")])
    inner = pc.fill_null(scatter(sub.num_rows, nested["up"], nested["dur_sum"]), 0)
    time = pc.max_element_wise(pc.subtract(dur, inner), 0)
    rows = pc.cast(true_positions(combined(layer)), pa.int64())
    return pa.table({"ts_ns": pc.filter(sub["ts_ns"], selected), "pid": pc.filter(sub["pid"], selected),
                     "tid": pc.filter(sub["tid"], selected), "time": pc.filter(time, selected),
                     "row": pc.filter(rows, selected)})


# --- tables --------------------------------------------------------------------------------------------



def _totals(tree: FrameTree) -> tuple[list[int], list[int], list[list[int]]]:
    """Subtree op time and op count per node, and each node's children: only the nodes that were called
    (in the selected steps) or hold selected ops, so that a filter leaves no rows of zeros behind."""
    total, ops, calls = list(tree.self_ns), list(tree.self_ops), list(tree.calls)
    children: list[list[int]] = [[] for _ in tree.name]
    for node in range(len(tree.name) - 1, -1, -1):  # a parent is created before its children
        up = tree.parent[node]
        if up >= 0:
            total[up] += total[node]
            ops[up] += ops[node]
            calls[up] += calls[node]
            if calls[node] or ops[node]:
                children[up].append(node)
    return total, ops, children


def _roots(tree: FrameTree, ops: list[int]) -> list[int]:
    return [i for i, p in enumerate(tree.parent) if p < 0 and (tree.calls[i] or ops[i])]


def _sort_key(sort: str) -> tuple[str, bool]:
    """(column, descending): numbers sort largest first, ``order`` and ``name`` ascending; ``-`` reverses."""
    reverse = sort.startswith("-")
    key = sort[1:] if reverse else sort
    if key not in SORTS:
        raise UsageError(f"cannot sort by {key!r}; choose one of {', '.join(SORTS)} (prefix - to reverse)")
    descending = key not in ("order", "name")
    return key, descending != reverse


def _with_outside(tree: FrameTree) -> tuple[FrameTree, int]:
    """The tree plus one root node for the ops outside every kept frame (-1 when there are none)."""
    if not tree.outside_ops:
        return tree, -1
    t = FrameTree(parent=tree.parent + [-1], name=tree.name + [tree.outside_label], first_ts=tree.first_ts + [None],
                  calls=tree.calls + [0], wall_ns=tree.wall_ns + [0], self_ns=tree.self_ns + [tree.outside_ns],
                  self_ops=tree.self_ops + [tree.outside_ops], separator=tree.separator)
    return t, len(t.name) - 1


def _ordered(nodes: list[int], key: str, descending: bool, tree: FrameTree, values: dict[str, list]) -> list[int]:
    nodes = sorted(nodes, key=lambda i: tree.name[i])
    if key == "order":
        return sorted(nodes, key=lambda i: (tree.first_ts[i] is None, tree.first_ts[i] or 0), reverse=descending)
    if key == "name":
        return nodes[::-1] if descending else nodes
    column = values[key]
    return sorted(nodes, key=lambda i: column[i] or 0, reverse=descending)  # stable: ties stay by name


def tree_table(tree: FrameTree, sort: str = "total_ns", max_depth: int | None = None, column: str = "frame",
               indent: bool = False) -> pa.Table:
    """One row per node in tree order (siblings ordered by ``sort``) with ``path``, ``depth``, calls, wall
    time of the calls, ``total_ns`` (op time under the node), ``self_ns`` (op time whose innermost kept frame
    is the node), ``ops`` under it and the shares of all selected op time. The ops outside every kept frame
    form one more root row. ``max_depth`` leaves out deeper rows (their time stays in their ancestors)."""
    key, descending = _sort_key(sort)
    grand = sum(tree.self_ns) + tree.outside_ns
    tree, outside = _with_outside(tree)
    total, ops, children = _totals(tree)
    values = {"calls": tree.calls, "wall_ns": tree.wall_ns, "total_ns": total, "self_ns": tree.self_ns,
              "ops": ops, "total_pct": total, "self_pct": tree.self_ns}
    roots = _roots(tree, ops)
    rows: list[tuple] = []
    paths: dict[int, str] = {}
    stack = [(i, 0) for i in reversed(_ordered(roots, key, descending, tree, values))]
    while stack:
        node, depth = stack.pop()
        up = tree.parent[node]
        paths[node] = tree.name[node] if up < 0 else paths[up] + tree.separator + tree.name[node]
        called = node != outside
        rows.append((paths[node], tree.name[node], depth, tree.calls[node] if called else None,
                     tree.wall_ns[node] if called else None, total[node], tree.self_ns[node], ops[node]))
        if max_depth is None or depth < max_depth:
            stack.extend((c, depth + 1) for c in reversed(_ordered(children[node], key, descending, tree, values)))
    return _rows_table(rows, grand, column, indent)


def flat_table(tree: FrameTree, sort: str = "self_ns", column: str = "frame") -> pa.Table:
    """One row per frame name: calls, wall time and op time under any of its calls (a frame that recurses counts
    once per stack), op time whose innermost kept frame it is, and the shares of all selected op time."""
    key, descending = _sort_key(sort)
    grand = sum(tree.self_ns) + tree.outside_ns
    tree, outside = _with_outside(tree)
    total, ops, children = _totals(tree)
    per: dict[str, list] = {}
    on_path: dict[str, int] = {}
    stack: list[tuple[int, bool]] = [(i, False) for i in _roots(tree, ops)]
    while stack:  # depth first, so that a frame already on the stack is not counted again
        node, leaving = stack.pop()
        name = tree.name[node]
        if leaving:
            on_path[name] -= 1
            continue
        row = per.setdefault(name, [0, 0, 0, 0, 0, None])  # calls, wall, total, self, ops, first ts
        row[0] += tree.calls[node]
        row[3] += tree.self_ns[node]
        if not on_path.get(name):
            row[1] += tree.wall_ns[node]
            row[2] += total[node]
            row[4] += ops[node]
        ts = tree.first_ts[node]
        if ts is not None and (row[5] is None or ts < row[5]):
            row[5] = ts
        on_path[name] = on_path.get(name, 0) + 1
        stack.append((node, True))
        stack.extend((c, False) for c in children[node])
    names = list(per)
    flat = FrameTree(parent=[-1] * len(names), name=names, first_ts=[per[n][5] for n in names],
                     calls=[per[n][0] for n in names], wall_ns=[per[n][1] for n in names],
                     self_ns=[per[n][3] for n in names], self_ops=[per[n][4] for n in names])
    totals = [per[n][2] for n in names]
    values = {"calls": flat.calls, "wall_ns": flat.wall_ns, "total_ns": totals, "self_ns": flat.self_ns,
              "ops": flat.self_ops, "total_pct": totals, "self_pct": flat.self_ns}
    rows = []
    for i in _ordered(list(range(len(names))), key, descending, flat, values):
        called = outside < 0 or names[i] != tree.outside_label
        rows.append((names[i], names[i], 0, flat.calls[i] if called else None, flat.wall_ns[i] if called else None,
                     totals[i], flat.self_ns[i], flat.self_ops[i]))
    return _rows_table(rows, grand, column, False).drop_columns(["path", "depth"])


def _rows_table(rows: list[tuple], grand: int, column: str, indent: bool) -> pa.Table:
    cols: list[Sequence[Any]] = list(zip(*rows)) if rows else [[] for _ in range(8)]
    total = pa.array(cols[5], pa.int64())
    self_ns = pa.array(cols[6], pa.int64())
    names = [("  " * d) + n for n, d in zip(cols[1], cols[2])] if indent else list(cols[1])
    return pa.table({
        column: pa.array(names, pa.string()),
        "path": pa.array(cols[0], pa.string()),
        "depth": pa.array(cols[2], pa.int64()),
        "calls": pa.array(cols[3], pa.int64()),
        "wall_ns": pa.array(cols[4], pa.int64()),
        "total_ns": total,
        "self_ns": self_ns,
        "ops": pa.array(cols[7], pa.int64()),
        "total_pct": shares_pct(total, grand),
        "self_pct": shares_pct(self_ns, grand),
    })
