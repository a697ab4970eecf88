"""An ONNX model's graph as plain data: its operators, the tensors between them, graph inputs and outputs.

Reading only: the model is parsed (protobuf) and its tensor shapes are taken from ``value_info`` or ONNX's static
shape inference; nothing in it is run, and external weight files are never opened (the weights are not needed to
draw the graph, and a path inside an untrusted model must not make opscope read other files).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opscope.errors import TraceError, UsageError

NEEDS_ONNX = "reading ONNX models needs the onnx package: pip install 'opscope[onnx]'"


@dataclass(frozen=True)
class OnnxNode:
    """One operator: its position in the file's (topological) order, name (may be empty), type and tensors."""

    index: int
    name: str
    op_type: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


@dataclass(frozen=True)
class OnnxEdge:
    """A tensor from the operator at ``src`` to the one at ``dst`` (node indexes); src -1 = a graph input,
    dst -1 = a graph output."""

    src: int
    dst: int
    tensor: str


@dataclass
class OnnxGraph:
    """The main graph of a model (subgraphs of If/Loop/Scan are counted in ``subgraphs``, not drawn)."""

    name: str
    nodes: list[OnnxNode] = field(default_factory=list)
    edges: list[OnnxEdge] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)  # graph inputs that are not weights (initializers)
    outputs: list[str] = field(default_factory=list)
    shapes: dict[str, str] = field(default_factory=dict)  # tensor -> "float[N,3,112,112]"
    subgraphs: int = 0


def read_onnx(path: Path) -> OnnxGraph:
    """The graph of the ONNX model at ``path``; TraceError (one line) when it is not one."""
    try:
        import onnx
    except ImportError:
        raise UsageError(NEEDS_ONNX) from None
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TraceError(path, f"cannot read it ({exc.strerror or exc})") from None
    try:
        model = onnx.ModelProto()
        model.ParseFromString(data)
    except Exception:  # protobuf's DecodeError and friends: any parse failure means "not a model"
        raise TraceError(path, "is not an ONNX model (not a ModelProto)") from None
    if not model.HasField("graph") or not model.ir_version or not model.graph.node:
        raise TraceError(path, "is not an ONNX model (no graph of operators)")
    return _graph(model, onnx)


def _graph(model: Any, onnx: Any) -> OnnxGraph:
    graph = model.graph
    out = OnnxGraph(name=graph.name)
    weights = {t.name for t in graph.initializer}
    out.inputs = [v.name for v in graph.input if v.name not in weights]
    out.outputs = [v.name for v in graph.output]
    producer: dict[str, int] = {}
    for i, node in enumerate(graph.node):
        out.nodes.append(OnnxNode(i, node.name, node.op_type, tuple(node.input), tuple(node.output)))
        out.subgraphs += sum(1 for a in node.attribute if a.type in (a.GRAPH, a.GRAPHS))
        for tensor in node.output:
            if tensor:
                producer[tensor] = i
    graph_inputs = set(out.inputs)
    for node in out.nodes:
        for tensor in dict.fromkeys(t for t in node.inputs if t):  # a tensor used twice is one edge
            if tensor in producer:
                out.edges.append(OnnxEdge(producer[tensor], node.index, tensor))
            elif tensor in graph_inputs:
                out.edges.append(OnnxEdge(-1, node.index, tensor))
    for tensor in out.outputs:
        if tensor in producer:
            out.edges.append(OnnxEdge(producer[tensor], -1, tensor))
    out.shapes = _shapes(model, onnx)
    return out


def _shapes(model: Any, onnx: Any) -> dict[str, str]:
    """Tensor shapes the model states, completed by static shape inference where it succeeds (it may not on
    models with custom operators: then only the stated ones)."""
    values = list(model.graph.value_info) + list(model.graph.input) + list(model.graph.output)
    with contextlib.suppress(Exception):  # a convenience: a model it cannot handle is drawn without those shapes
        values += list(onnx.shape_inference.infer_shapes(model, strict_mode=False).graph.value_info)
    shapes: dict[str, str] = {}
    for value in values:
        if value.name in shapes or not value.type.HasField("tensor_type"):
            continue
        tensor = value.type.tensor_type
        try:
            dtype = onnx.TensorProto.DataType.Name(tensor.elem_type).lower() if tensor.elem_type else "?"
        except ValueError:  # a type number this onnx does not know
            dtype = f"type{tensor.elem_type}"
        if not tensor.HasField("shape"):
            shapes[value.name] = dtype
            continue
        dims = [str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?") for d in tensor.shape.dim]
        shapes[value.name] = f"{dtype}[{','.join(dims)}]"
    return shapes
