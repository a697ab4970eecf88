"""Where the time goes as one hierarchy: nn.Module path → op → kernel (the report's icicle chart).

On a trace with device work, every leaf is device time: the kernels, copies, memsets and collectives an op
launched, charged to the outermost op above the launch (what the model's code called: ``aten::linear`` owns
``addmm``'s GEMM) and to the innermost module around that op. On a host-only trace the leaves are ops' time
exclusive of the ops nested in them, as ``opscope scope`` counts it. Module levels appear when the trace has
``nn.Module`` Python events (``with_modules=True`` / ``with_stack=True``); otherwise the tree starts at ops.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from opscope.analyses.arrays import combined
from opscope.analyses.kernels import shown_names
from opscope.analyses.links import LINKED_KINDS, device_links
from opscope.analyses.views import FrameTree, module_tree
from opscope.model.schema import kind_mask
from opscope.model.trace import Trace

ROOT = "all"
NO_MODULE = "(outside modules)"
NO_OP = "(launched outside any op)"

SCHEMA = pa.schema([("id", pa.int64()), ("parent", pa.int64()), ("name", pa.string()), ("level", pa.string()),
                    ("value_ns", pa.int64())])


@dataclass(frozen=True)
class Hierarchy:
    """``table``: one row per node (``id``, ``parent`` (null for the root), ``name``, ``level``: root, module,
    op or kernel, ``value_ns``: the node's own time; a parent's total is the sum of its subtree).
    ``measure`` says what the values are."""

    table: pa.Table
    measure: str
    total_ns: int


def time_hierarchy(trace: Trace, min_share: float = 0.001) -> Hierarchy:
    """The module → op → kernel tree. Leaves under ``min_share`` of the total are folded into one
    "other" leaf per parent so that the chart stays readable and the file small (their time stays counted)."""
    tree = module_tree(trace)
    module_of = _module_lookup(tree)
    events = trace.select(["kind", "name", "dur_ns"])
    device = kind_mask(events, LINKED_KINDS)
    if pc.any(device).as_py():
        links = device_links(trace)
        rows = links["device_row"]
        op_rows = links["top_row"]
        names = events["name"]
        leaves = pa.table({
            "module": module_of(op_rows),
            "op": pc.fill_null(_take_names(names, op_rows), NO_OP),
            "kernel": shown_names(trace, combined(pc.take(names, rows)).cast(pa.string())),
            "value": pc.fill_null(combined(pc.take(events["dur_ns"], rows)), 0),
        })
        measure = ("device time (sum of kernel, copy, memset and collective durations, overlaps counted per event) "
                   "by the module and outermost op that launched it")
    else:
        ops = _host_ops(trace, tree)
        leaves = pa.table({"module": module_of(ops["row"]), "op": _take_names(events["name"], ops["row"]),
                           "kernel": pa.nulls(ops.num_rows, pa.string()), "value": ops["time"]})
        measure = "host op time, exclusive of the ops nested in them (as opscope scope counts it)"
    return _build(tree, leaves, measure, min_share)


def _host_ops(trace: Trace, tree: FrameTree) -> pa.Table:
    """The cpu ops with their exclusive time: the module tree's, when it computed them (the trace has Python
    events), else computed here the same way."""
    if tree.op_rows is not None and tree.op_times is not None:
        return pa.table({"row": tree.op_rows, "time": tree.op_times})
    from opscope.analyses.filters import EventFilter
    from opscope.analyses.views import op_times
    from opscope.model.derive import OP_LAYER

    events = trace.select(["kind", "name", "ts_ns", "dur_ns", "pid", "tid", "stream", "parent", "depth", "step",
                           "merged"])
    layer = pc.and_(kind_mask(events, OP_LAYER), pc.is_null(events["stream"]))
    ops = op_times(events, layer, EventFilter(kinds=("cpu_op",)))
    return ops.select(["row", "time"])


def _module_lookup(tree: FrameTree):
    """A function from event rows (ops) to their module node (null: none), through the module tree's ops."""
    if tree.op_rows is None or tree.op_nodes is None or not len(tree.op_rows):
        return lambda rows: pa.nulls(len(rows), pa.int64())
    known_rows, known_nodes = tree.op_rows, tree.op_nodes

    def lookup(rows: pa.Array | pa.ChunkedArray) -> pa.Array:
        where = pc.index_in(combined(rows), value_set=known_rows)
        return combined(pc.take(known_nodes, where)).cast(pa.int64())

    return lookup


def _take_names(names: pa.ChunkedArray, rows: pa.Array | pa.ChunkedArray) -> pa.Array:
    if not len(rows):
        return pa.array([], pa.string())
    return combined(pc.take(names, combined(rows))).cast(pa.string())


def _build(tree: FrameTree, leaves: pa.Table, measure: str, min_share: float) -> Hierarchy:
    grouped = leaves.group_by(["module", "op", "kernel"], use_threads=False).aggregate([("value", "sum")])
    total = pc.sum(grouped["value_sum"]).as_py() or 0
    ids: list[int] = [0]
    parents: list[int | None] = [None]
    names: list[str] = [ROOT]
    levels: list[str] = ["root"]
    values: list[int] = [0]

    def add(parent: int, name: str, level: str, value: int = 0) -> int:
        ids.append(len(ids))
        parents.append(parent)
        names.append(name)
        levels.append(level)
        values.append(value)
        return ids[-1]

    module_ids: dict[int | None, int] = {}

    def module_id(node: int | None) -> int:
        if node in module_ids:
            return module_ids[node]
        if node is None:
            module_ids[None] = add(0, NO_MODULE, "module") if tree.name else 0
            return module_ids[None]
        up = tree.parent[node]
        module_ids[node] = add(module_id(up) if up >= 0 else 0, tree.name[node], "module")
        return module_ids[node]

    small = total * min_share
    folded: dict[int, int] = {}
    op_ids: dict[tuple[int, str], int] = {}
    rows = sorted(zip(*(grouped[c].to_pylist() for c in ("module", "op", "kernel", "value_sum"))),
                  key=lambda r: -(r[3] or 0))
    for module, op, kernel, value in rows:
        parent = module_id(module)
        if kernel is None:  # host-only: ops are the leaves
            if value < small:
                folded[parent] = folded.get(parent, 0) + value
            else:
                add(parent, op, "op", value)
            continue
        key = (parent, op)
        if key not in op_ids:
            op_ids[key] = add(parent, op, "op")
        if value < small:
            folded[op_ids[key]] = folded.get(op_ids[key], 0) + value
        else:
            add(op_ids[key], kernel, "kernel", value)
    for parent, value in folded.items():
        add(parent, "(smaller entries)", "other", value)
    table = pa.table([ids, parents, names, levels, values], schema=SCHEMA)
    return Hierarchy(table, measure, total)
