"""A graph as data for ``opscope graph``: boxes (id, label lines, time, share) and the edges between them, the
title, the legend and the notes that say what was left out. ``opscope.compose.graph`` builds one (a recording's
nn.Module tree, an ONNX model's operators); :mod:`opscope.render.dot` draws it with Graphviz."""

from __future__ import annotations

from dataclasses import dataclass, field


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
