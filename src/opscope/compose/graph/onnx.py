"""An ONNX model's operators and the tensors between them as a graph, with each operator's time from an ONNX
Runtime profile of it."""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from opscope.compose.graph import DEFAULT_MAX_NODES, share_of, short
from opscope.ingest.onnx_model import OnnxGraph
from opscope.render.graph import Edge, Graph, Node
from opscope.units import format_ns, format_pct


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
