"""`opscope graph`: a recording's nn.Module tree, or an ONNX model's operator graph, drawn with Graphviz."""

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from opscope.cli.app import app
from opscope.cli.common import event_filter, load, say, write_document
from opscope.cli.options import CaptureOpt, ForceOpt, NoCacheOpt
from opscope.errors import TraceError, UsageError

if TYPE_CHECKING:
    from opscope.render.graph import Graph

#: opscope.compose.graph's DEFAULT_MAX_NODES, spelled here so that --help does not import the graph builders (and
#: the ONNX reader below them); a test checks that the two agree
DEFAULT_MAX_NODES = 150


@app.command()
def graph(
    source: Annotated[Path, typer.Argument(help="A trace (.json or .json.gz) or an ONNX model (.onnx).",
                                           show_default=False)],
    output: Annotated[Path, typer.Option("--output", "-o", help="The drawing: .svg, .png, .pdf (need Graphviz's "
                                                                "dot program) or .dot/.gv (DOT text).",
                                         show_default=False)],
    max_nodes: Annotated[int, typer.Option("--max-nodes", help="Draw at most this many modules/operators (the "
                                                               "most expensive; the rest fold into '… more' "
                                                               "boxes).", min=1)] = DEFAULT_MAX_NODES,
    min_pct: Annotated[float | None, typer.Option("--min-pct", help="Leave out modules/operators under this share "
                                                                    "(%) of the time.", min=0)] = None,
    profile: Annotated[Path | None, typer.Option("--profile", help="ONNX model only: an ONNX Runtime profile "
                                                                   "(JSON) of it, for each operator's time.")] = None,
    force: ForceOpt = False,
    no_cache: NoCacheOpt = False, capture: CaptureOpt = None,
) -> None:
    """Draw a graph with each node's time and share, shaded by share so the hot path stands out.

    For a trace: the nn.Module tree (the numbers of `opscope scope`): each module's total op time (it
    and below) and self time, as shares of all op time. For an ONNX model (.onnx): its operators and the
    tensors between them (name and shape); with --profile, each operator's time from an ONNX Runtime
    profile of the model (share of all node time in it). Nodes ONNX Runtime rewrote (fused) count for
    the operator whose output they write. Big graphs: --max-nodes keeps the most expensive nodes (the
    first ones in graph order for a model without a profile); what is left out is said on stderr and
    in the drawing.
    """
    from opscope.outfile import check_target
    from opscope.render.dot import GraphRenderer, output_format

    drawer = GraphRenderer.named(output_format(output.suffix))(str(output))
    check_target(output, force)
    drawer.require()
    is_model = source.suffix.lower() == ".onnx"
    if profile is not None and not is_model:
        raise UsageError("--profile goes with an ONNX model (.onnx): it times the model's operators")
    if min_pct is not None and is_model and profile is None:
        raise UsageError("--min-pct needs times: give the model's ONNX Runtime profile with --profile")
    drawing = _model_graph(source, profile, max_nodes, min_pct, no_cache) if is_model else \
        _trace_graph(source, max_nodes, min_pct, no_cache)
    size = write_document(drawer, drawing, output, force)
    for note in drawing.notes:
        say(note)
    say(f"wrote {output} ({len(drawing.nodes)} nodes, {len(drawing.edges)} edges, {size} bytes)")


def _trace_graph(source: Path, max_nodes: int, min_pct: float | None, no_cache: bool) -> "Graph":
    from opscope.analyses.views import module_tree, tree_table
    from opscope.compose.graph.modules import module_graph

    tree = module_tree(load(source, no_cache), event_filter("cpu_op"))
    if tree.note:
        raise TraceError(source, tree.note)
    return module_graph(tree_table(tree, "total_ns", None, "module"), source.name, max_nodes, min_pct)


def _model_graph(source: Path, profile: Path | None, max_nodes: int, min_pct: float | None,
                 no_cache: bool) -> "Graph":
    from opscope.analyses.ort_nodes import node_times
    from opscope.compose.graph.onnx import onnx_graph
    from opscope.ingest.onnx_model import read_onnx

    model = read_onnx(source)
    times = None
    if profile is not None:
        times = node_times(load(profile, no_cache))
        if times.num_rows == 0:
            raise TraceError(profile, "holds no ONNX Runtime node events ('<node>_kernel_time')",
                             "profile the model with SessionOptions.enable_profiling = True")
    return onnx_graph(model, source.name, times, profile.name if profile else None, max_nodes, min_pct)
