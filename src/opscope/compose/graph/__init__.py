"""Graphs for ``opscope graph``, as :class:`~opscope.render.graph.Graph` data: a recording's nn.Module tree
(:mod:`.modules`) or an ONNX model's operators (:mod:`.onnx`), with time.

Pure: nodes (id, label lines, time, share) and edges, the node limit (pruning) and the notes that say what was
left out. Every number comes from an analysis (``tree_table`` for the module tree, ``ort_nodes.node_times`` for a
profile); only sums of them are formed here. What is shared by both: the limits and how a share and a label are
written.
"""

from __future__ import annotations

DEFAULT_MAX_NODES = 150
#: Longest piece of trace text shown in one label line; the full text stays in the tooltip.
LABEL_CHARS = 60


def share_of(part: int, whole: int) -> float:
    """``part`` as a percentage of ``whole``, rounded like the analyses' shares (2 digits)."""
    return round(100.0 * part / whole, 2) if whole else 0.0


def short(text: str) -> str:
    return text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 1] + "…"
