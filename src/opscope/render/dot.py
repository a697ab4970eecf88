"""A :class:`~opscope.render.graph.Graph` as Graphviz: DOT text, or SVG/PNG/PDF through the ``dot`` program; one
renderer per format (picked by the output file's suffix).

Labels are plain quoted strings (never HTML-like labels), built from trace or model text that is untrusted:
control characters (newlines and ANSI escapes too) are spelled out, backslashes doubled (so ``\\N``, ``\\G``,
``\\l`` keep no meaning), ``&`` written as ``&amp;`` (Graphviz decodes entities in labels), quotes escaped by the
graphviz library; node ids are opscope's own (``m12``), never trace text.
"""

from __future__ import annotations

import math
import re
import shutil
import subprocess
from typing import Any, BinaryIO

from opscope.errors import UsageError
from opscope.render.base import FileRenderer
from opscope.render.graph import Graph, Node

NEEDS_GRAPHVIZ_PY = "drawing graphs needs the graphviz Python package: pip install 'opscope[view]'"
NEEDS_DOT = ("cannot draw {name}: the Graphviz 'dot' program is not installed (apt-get install graphviz, brew "
             "install graphviz); or write the graph as DOT text with -o graph.dot")
#: Output formats by file suffix; .dot/.gv are written without Graphviz's program.
FORMATS = {".svg": "svg", ".png": "png", ".pdf": "pdf", ".dot": "dot", ".gv": "dot"}
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
#: ColorBrewer's reds9, which Graphviz knows by name: 1 (near white) .. 9 (dark red).
SCHEME = "reds9"


def text(value: str) -> str:
    """One untrusted line as the content of a DOT escString."""
    value = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", value)
    return value.replace("\\", "\\\\").replace("&", "&amp;")


def label(lines: list[str]) -> str:
    return "\\n".join(text(line) for line in lines)


def shade(share: float | None) -> int:
    """Colour index 1..9 of a share (0-100) on a square-root scale: shares of a few percent are already
    tinted, so the hot path through a deep tree reads at a glance (10% -> 3, 25% -> 5, 50% -> 7)."""
    if share is None:
        return 1
    return 1 + min(8, int(math.sqrt(max(0.0, share) / 100.0) * 9))


def _graphviz() -> Any:
    try:
        import graphviz
    except ImportError:
        raise UsageError(NEEDS_GRAPHVIZ_PY) from None
    return graphviz


def digraph(graph: Graph) -> Any:
    """The graph as a ``graphviz.Digraph`` (its ``.source`` is the DOT text)."""
    gv = _graphviz()
    nohtml = gv.nohtml
    caption = [graph.title] + graph.legend + [f"note: {n}" for n in graph.notes]
    g = gv.Digraph("opscope", graph_attr={"label": nohtml(label(caption)), "labelloc": "t", "fontsize": "12",
                                          "fontname": "Helvetica", "rankdir": "TB"},
                   node_attr={"shape": "box", "style": "rounded,filled", "fontname": "Helvetica", "fontsize": "10",
                              "colorscheme": SCHEME},
                   edge_attr={"fontname": "Helvetica", "fontsize": "8", "color": "gray40"})
    for node in graph.nodes:
        g.node(node.id, nohtml(label(node.lines)), tooltip=nohtml(text(node.tooltip or node.lines[0])),
               **_style(node))
    for edge in graph.edges:
        g.edge(edge.src, edge.dst, label=nohtml(label(edge.lines)) if edge.lines else None)
    return g


def _style(node: Node) -> dict[str, str]:
    if node.kind in ("input", "output"):
        return {"shape": "ellipse", "style": "filled", "fillcolor": "/greys9/2"}
    if node.kind == "unmatched":
        return {"style": "rounded,filled,dashed", "fillcolor": str(shade(node.share))}
    level = shade(node.share)
    style = {"fillcolor": str(level)}
    if node.kind == "fold":
        style["style"] = "rounded,filled,dashed"
    if node.muted:
        style["fillcolor"] = "/greys9/3"
    if level >= 7:
        style["fontcolor"] = "white"
    return style


def output_format(suffix: str) -> str:
    fmt = FORMATS.get(suffix.lower())
    if fmt is None:
        raise UsageError(f"cannot tell the output format from {suffix or 'a name without suffix'!r}; name the "
                         f"file with one of {', '.join(FORMATS)}")
    return fmt


def check_program(fmt: str, name: str = "the graph") -> None:
    """Before any work: a drawing format needs the ``dot`` program (and the Python package in any case)."""
    _graphviz()
    if fmt != "dot" and shutil.which("dot") is None:
        raise UsageError(NEEDS_DOT.format(name=name))


def draw(graph: Graph, fmt: str, name: str = "the graph") -> bytes:
    """The graph as bytes in ``fmt`` (``dot`` = the DOT text)."""
    g = digraph(graph)
    if fmt == "dot":
        source = str(g.source)
        return (source if source.endswith("\n") else source + "\n").encode("utf-8")
    gv = _graphviz()
    try:
        return bytes(g.pipe(format=fmt, engine="dot", quiet=True))
    except gv.ExecutableNotFound:
        raise UsageError(NEEDS_DOT.format(name=name)) from None
    except (gv.CalledProcessError, subprocess.CalledProcessError) as exc:
        detail = (exc.stderr or b"").decode("utf-8", "replace").strip().splitlines()
        raise UsageError(f"Graphviz's dot failed ({detail[-1] if detail else exc.returncode}); try -o graph.dot "
                         "to see the DOT text") from None


class GraphRenderer(FileRenderer[Graph]):
    """A graph drawn by Graphviz in the format of the renderer's name; ``target`` names the drawing in errors."""

    kind = "graph"

    def __init__(self, target: str = "the graph") -> None:
        self.target = target

    def require(self) -> None:
        check_program(self.name, self.target)

    def render(self, graph: Graph, out: BinaryIO) -> None:
        out.write(draw(graph, self.name, self.target))


class DotRenderer(GraphRenderer):
    """The DOT text itself: needs the graphviz Python package, not its program."""

    name = "dot"
    extension = ".dot"
    binary = False


class SvgRenderer(GraphRenderer):
    name = "svg"
    extension = ".svg"
    binary = False


class PngRenderer(GraphRenderer):
    name = "png"
    extension = ".png"
    binary = True


class PdfRenderer(GraphRenderer):
    name = "pdf"
    extension = ".pdf"
    binary = True
