"""Graphs as data for ``opscope graph``: a recording's nn.Module tree, or an ONNX model's operators, with time.

Pure: nodes (id, label lines, time, share) and edges, the node limit (pruning) and the notes that say what was
left out. :mod:`opscope.render.dot` turns a :class:`Graph` into Graphviz. Every number comes from an analysis
(``tree_table`` for the module tree, ``ort_nodes.node_times`` for a profile); only sums of them are formed here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from opscope.ingest.onnx_model import OnnxGraph
from opscope.units import format_ns, format_pct

DEFAULT_MAX_NODES = 150
#: Longest piece of trace text shown in one label line; the full text stays in the tooltip.
LABEL_CHARS = 60


@dataclass
class Node:
    """One box. ``lines`` is plain (unescaped, untrusted) text; ``share`` (0-100) picks its shade, None = no
    time known. kind: root, module, fold, op, input, output, unmatched."""

    id: str
    kind: str
    lines: list[str]
    share: float | None = None
    time_ns: int | None = None
    self_ns: int | None = None
    tooltip: str = ""
    muted: bool = False  # drawn grey: an operator the profile has no time for


@dataclass
class Edge:
    src: str
    dst: str
    lines: list[str] = field(default_factory=list)


@dataclass
class Graph:
    title: str
    legend: list[str]
    nodes: list[Node] = field(default_factory=list)
    edges: list[Edge] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # also said on stderr

    def of_kind(self, kind: str) -> list[Node]:
        return [n for n in self.nodes if n.kind == kind]


def share_of(part: int, whole: int) -> float:
    """``part`` as a percentage of ``whole``, rounded like the analyses' shares (2 digits)."""
    return round(100.0 * part / whole, 2) if whole else 0.0


def short(text: str) -> str:
    return text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 1] + "…"


# --- module tree -------------------------------------------------------------------------------------------

def module_graph(table: pa.Table, source: str, max_nodes: int = DEFAULT_MAX_NODES,
                 min_pct: float | None = None) -> Graph:
    """The module tree of ``tree_table(module_tree(trace), column="module")`` (rows in tree order): one box per
    module with its total and self op time and their shares of all selected op time, under one root box.

    Keeps at most ``max_nodes`` modules, the most expensive (a module's total is never more than its parent's,
    so the kept set is a tree: whole smallest subtrees go), and those with total_pct >= ``min_pct``; the
    modules left out under a parent become one "… k more" box with their time."""
    rows = table.to_pylist()
    parent: list[int] = []
    stack: list[int] = []  # row index per depth: the rows come in tree order
    for i, r in enumerate(rows):
        del stack[r["depth"]:]
        parent.append(stack[-1] if stack else -1)
        stack.append(i)
    grand = sum(r["total_ns"] for r in rows if r["depth"] == 0)

    eligible = [min_pct is None or (r["total_pct"] or 0.0) >= min_pct for r in rows]
    kept: set[int] = set()
    for i in sorted(range(len(rows)), key=lambda i: (-rows[i]["total_ns"], i)):
        if len(kept) >= max_nodes:
            break
        if eligible[i] and (parent[i] < 0 or parent[i] in kept):
            kept.add(i)

    graph = Graph(title=f"Op time by nn.Module: {source}",
                  legend=[f"share = % of all selected op time ({format_ns(grand)}, as opscope scope counts it)",
                          "total: op time in the module and below; self: directly in it; "
                          "shade: total share (square-root scale)"])
    graph.nodes.append(Node("root", "root", ["all op time", format_ns(grand), "100%"], share=100.0, time_ns=grand,
                            tooltip=f"all selected op time: total_ns={grand}"))
    ids = {i: f"m{i}" for i in kept}
    for i in sorted(kept):
        r = rows[i]
        graph.nodes.append(Node(ids[i], "module", [
            short(r["module"]),
            f"total {format_ns(r['total_ns'])} ({format_pct(r['total_pct'])})",
            f"self {format_ns(r['self_ns'])} ({format_pct(r['self_pct'])})",
        ] + ([f"{r['calls']} call{'s' * (r['calls'] != 1)}"] if r["calls"] is not None else []), share=r["total_pct"],
            time_ns=r["total_ns"], self_ns=r["self_ns"],
            tooltip=f"{r['path']}: total_ns={r['total_ns']} ({r['total_pct']}%), self_ns={r['self_ns']} "
                    f"({r['self_pct']}%), ops={r['ops']}"))
        graph.edges.append(Edge(ids[parent[i]] if parent[i] >= 0 else "root", ids[i]))

    # What was left out: per kept parent (or the root), its dropped children's subtrees, folded into one box.
    size = [1] * len(rows)
    for i in range(len(rows) - 1, -1, -1):
        if parent[i] >= 0:
            size[parent[i]] += size[i]
    dropped: dict[int, list[int]] = {}
    for i in range(len(rows)):
        if i not in kept and (parent[i] < 0 or parent[i] in kept):
            dropped.setdefault(parent[i], []).append(i)
    for up, children in dropped.items():
        count = sum(size[c] for c in children)
        time = sum(rows[c]["total_ns"] for c in children)
        fold = Node(f"f{up + 1}", "fold", [f"… {count} more module{'s' * (count != 1)}",
                                           f"{format_ns(time)} ({format_pct(share_of(time, grand))})"],
                    share=share_of(time, grand), time_ns=time,
                    tooltip=f"{count} modules not drawn: total_ns={time}")
        graph.nodes.append(fold)
        graph.edges.append(Edge(ids[up] if up >= 0 else "root", fold.id))
    left = len(rows) - len(kept)
    if left:
        why = f"the {max_nodes} most expensive" if len(kept) >= max_nodes else ""
        if min_pct is not None:
            why = " and ".join(w for w in (why, f"those with total share >= {min_pct}%") if w)
        graph.notes.append(f"drew {len(kept)} of {len(rows)} modules ({why}); {left} folded into "
                           f"{len(dropped)} '… more' box{'es' * (len(dropped) != 1)}")
    return graph


# --- ONNX model --------------------------------------------------------------------------------------------

@dataclass
class _Timed:
    time_ns: int = 0
    runs: int = 0
    via: list[str] = field(default_factory=list)  # ORT node names that were not this node's own name


def onnx_graph(model: OnnxGraph, source: str, times: pa.Table | None = None, profile: str | None = None,
               max_nodes: int = DEFAULT_MAX_NODES, min_pct: float | None = None) -> Graph:
    """The operators of ``model`` and the tensors between them (labelled with name and shape), with each
    operator's time and share of all node time from ``times`` (``ort_nodes.node_times`` of a profile).

    A profiled node whose name is not in the model is ONNX Runtime's rewrite of it (fusion, layout
    transforms): when its name is ``<tensor>_<suffix>`` and a model operator produces ``<tensor>`` (ORT names
    rewritten nodes after their output), its time goes to that operator, marked as such; otherwise it is listed
    as not in the model. Keeps the first ``max_nodes`` operators in graph (topological) order, or with times the
    most expensive ones."""
    timed: dict[int, _Timed] = {}
    unmatched: list[tuple[str, int]] = []
    whole = 0
    if times is not None:
        by_name = {n.name: n.index for n in model.nodes if n.name}
        producer = {t: n.index for n in model.nodes for t in n.outputs if t}
        for name, runs, time in zip(*(times[c].to_pylist() for c in ("node", "runs", "time_ns"))):
            whole += time
            index = by_name.get(name)
            if index is None:
                index = _rewritten(name, producer)
                if index is None:
                    unmatched.append((name, time))
                    continue
                timed.setdefault(index, _Timed()).via.append(name)
            t = timed.setdefault(index, _Timed())
            t.time_ns += time
            t.runs = max(t.runs, runs)

    fused = any(t.via for t in timed.values())

    def pct(i: int) -> float | None:
        return share_of(timed[i].time_ns, whole) if i in timed else None

    ops = model.nodes
    eligible = [n.index for n in ops if min_pct is None or (pct(n.index) or 0.0) >= min_pct]
    if times is not None:
        ranked = sorted(eligible, key=lambda i: (-(timed[i].time_ns if i in timed else -1), i))
        kept = sorted(ranked[:max_nodes])
    else:
        kept = eligible[:max_nodes]
    keep = set(kept)

    legend = ([f"share = % of all node kernel time in {profile} ({format_ns(whole)}); shade: share (square-root scale)"]
              if times is not None else ["no profile: pass --profile ORT_PROFILE.json for time per node"])
    graph = Graph(title=f"ONNX model {model.name or '(unnamed graph)'}: {source}",
                  legend=legend + ["edges: tensors (name, type[shape] where known)"])
    for i in kept:
        n = ops[i]
        lines = [n.op_type] + ([short(n.name)] if n.name else [])
        tip = f"{n.op_type} {n.name}"
        if i in timed:
            t = timed[i]
            lines.append(f"{format_ns(t.time_ns)} ({format_pct(pct(i))}), {t.runs} runs")
            tip += f": time_ns={t.time_ns} ({pct(i)}%)"
            if t.via:
                lines.append(short("ran as ORT node " + ", ".join(t.via)))
                tip += f", ran as ORT node {', '.join(t.via)}"
        elif times is not None:
            lines.append("not in profile" + (" (ORT fused it?)" if fused else ""))
        graph.nodes.append(Node(f"n{i}", "op", lines, share=pct(i), time_ns=timed[i].time_ns if i in timed else None,
                                tooltip=tip, muted=times is not None and i not in timed))
    for j, tensor in enumerate(model.inputs):
        graph.nodes.append(Node(f"i{j}", "input", ["input " + short(tensor)] + _shape(model, tensor), tooltip=tensor))
    for j, tensor in enumerate(model.outputs):
        graph.nodes.append(Node(f"o{j}", "output", ["output " + short(tensor)] + _shape(model, tensor),
                                tooltip=tensor))
    inputs = {t: f"i{j}" for j, t in enumerate(model.inputs)}
    outputs = {t: f"o{j}" for j, t in enumerate(model.outputs)}
    for e in model.edges:
        src = inputs.get(e.tensor) if e.src < 0 else (f"n{e.src}" if e.src in keep else None)
        dst = outputs.get(e.tensor) if e.dst < 0 else (f"n{e.dst}" if e.dst in keep else None)
        if src and dst:
            graph.edges.append(Edge(src, dst, [short(e.tensor)] + _shape(model, e.tensor)))

    left = [n.index for n in ops if n.index not in keep]
    if left:
        time = sum(timed[i].time_ns for i in left if i in timed)
        lines = [f"… {len(left)} more operator{'s' * (len(left) != 1)} not drawn"]
        if times is not None:
            lines.append(f"{format_ns(time)} ({format_pct(share_of(time, whole))})")
        graph.nodes.append(Node("rest", "fold", lines, share=share_of(time, whole) if times is not None else None,
                                time_ns=time if times is not None else None))
        how = "most expensive" if times is not None else "first in graph order"
        why = f"the {max_nodes} {how}" if len(kept) >= max_nodes else ""
        if min_pct is not None:
            why = " and ".join(w for w in (why, f"those with share >= {min_pct}%") if w)
        graph.notes.append(f"drew {len(kept)} of {len(ops)} operators ({why}); {len(left)} folded into one box")
    if unmatched:
        time = sum(t for _, t in unmatched)
        names = ", ".join(n for n, _ in unmatched[:5]) + (", …" if len(unmatched) > 5 else "")
        graph.nodes.append(Node("unmatched", "unmatched", [
            f"{len(unmatched)} profiled node{'s' * (len(unmatched) != 1)} not in this model",
            short(names), f"{format_ns(time)} ({format_pct(share_of(time, whole))})"],
            share=share_of(time, whole), time_ns=time, tooltip=", ".join(n for n, _ in unmatched)))
        graph.notes.append(f"{len(unmatched)} profiled nodes ({format_pct(share_of(time, whole))} of node time) are "
                           "not in this model (ONNX Runtime added them)")
    rewritten = sum(len(t.via) for t in timed.values())
    if rewritten:
        graph.notes.append(f"{rewritten} profiled nodes are ONNX Runtime rewrites (fusions, layout changes) and count "
                           "for the operator that produces their output; for exact names, draw the model ORT ran "
                           "(SessionOptions.optimized_model_filepath) with this profile")
    if model.subgraphs:
        graph.notes.append(f"{model.subgraphs} subgraphs (If/Loop/Scan bodies) are not drawn")
    return graph


def _rewritten(name: str, producer: dict[str, int]) -> int | None:
    """The operator producing the longest tensor ``t`` with ``name == t + "_" + suffix`` (ORT's names for nodes it
    rewrote, such as ``r1_nchwc`` for the fused Conv+Relu that writes ``r1``)."""
    cut = len(name)
    while True:
        cut = name.rfind("_", 0, cut)
        if cut <= 0:
            return None
        index = producer.get(name[:cut])
        if index is not None:
            return index


def _shape(model: OnnxGraph, tensor: str) -> list[str]:
    shape = model.shapes.get(tensor)
    return [short(shape)] if shape else []
