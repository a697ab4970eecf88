"""The nn.Module tree of a recording as a graph: one box per module with its total and self op time."""

from __future__ import annotations

import pyarrow as pa

from opscope.compose.graph import DEFAULT_MAX_NODES, share_of, short
from opscope.render.graph import Edge, Graph, Node
from opscope.units import format_ns, format_pct


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


