"""XLA's HLO modules as XProf keeps them, read into each launched instruction's record.

XProf writes the compiled programs into the ``/host:metadata`` plane: one event metadata per program (its id the
program id, its name ``module(id)``), whose ``Hlo Proto`` stat is the serialized ``xla.HloProto``. An XLA op's launch
names its instruction (``hlo_op``) and module (``hlo_module``, ``program_id``); :meth:`HloModules.record` gives that
instruction's record in the text the model reads (``analyses/work.py``):

* ``shapes``/``dtypes``: its operands' dimensions and element types as JSON, as Kineto writes an op's inputs
  (``[[8,32,16,16,16],[64,32,3,3,3]]``, ``["f32","f32"]``; a tuple operand is the list of its members' dimensions);
* ``output_shapes``: its result's dimensions, one entry per output (a tuple result's members: ``[[8,64,14,14,14],
  [7150336]]``, a convolution custom-call's output and its scratch buffer);
* ``concrete_inputs``: a JSON list of one string, the instruction in XLA's HLO text syntax without operand names,
  layouts and metadata (``f32[8,64,14,14,14] convolution(f32[8,32,16,16,16], f32[64,32,3,3,3]), window={size=3x3x3},
  dim_labels=bf012_oi012->bf012``). A fusion's line is followed by the lines of the matrix products and
  convolutions inside its fused computations (indented), the only work inside a fusion that the model counts. A
  cuBLAS gemm custom-call's dimension numbers (in its backend config) are written as a ``dot``'s
  (``lhs_contracting_dims={1}``...).

The message and field names and numbers below are those of the published ``xla/service/hlo.proto`` and
``xla/xla_data.proto`` (openxla/xla, Copyright The OpenXLA Authors, Apache License 2.0; ``package xla``), the part of
them the records need; everything else in the bytes is skipped by the parser. The bytes come from the trace and are
untrusted: a module that does not decode, or that is larger than :data:`MAX_MODULE_BYTES`, is left out (counted by
the reader), and a record that would be deeper or longer than its bounds is not written (the op has no record).
"""

from __future__ import annotations

import functools
import json
import re
from collections import deque
from typing import Any

from opscope.ingest.xplane.schema import add_message, message_classes, protobuf

#: The stat of a ``/host:metadata`` event metadata that holds a program's HloProto.
HLO_PROTO_STAT = "Hlo Proto"
#: Largest HloProto decoded (bytes); a larger one is left out and counted.
MAX_MODULE_BYTES = 256 << 20
#: Longest record text written (characters); a longer one is not written.
MAX_RECORD = 1 << 14
#: Most matrix products and convolutions listed under one fusion, and how deep nested fusions are searched.
MAX_INNER = 16
MAX_NESTING = 4
#: Tuple shapes: most members, deepest nesting rendered.
MAX_TUPLE = 64
MAX_TUPLE_DEPTH = 4

#: XLA's PrimitiveType numbers -> the names its HLO text uses.
PRIMITIVE_TYPES = {
    1: "pred", 2: "s8", 3: "s16", 4: "s32", 5: "s64", 6: "u8", 7: "u16", 8: "u32", 9: "u64", 10: "f16", 11: "f32",
    12: "f64", 14: "opaque", 15: "c64", 16: "bf16", 17: "token", 18: "c128", 19: "f8e5m2", 20: "f8e4m3fn", 21: "s4",
    22: "u4", 23: "f8e4m3b11fnuz", 24: "f8e5m2fnuz", 25: "f8e4m3fnuz", 26: "s2", 27: "u2", 28: "f8e4m3",
    29: "f8e3m4", 30: "s1", 31: "u1", 32: "f4e2m1fn", 33: "f8e8m0fnu"}
_TUPLE = 13
#: Custom-call targets whose dimension numbers are in a ``gemm_backend_config`` (cuBLAS, cuBLASLt, hipBLASLt).
GEMM_TARGETS = re.compile(r"^__cublas\$(?:gemm|lt\$matmul(?:\$f8)?)$")
#: Custom-call targets of the DNN library's convolutions (cuDNN, and MIOpen under the same names on ROCm).
CONV_TARGETS = re.compile(r"^__(?:cudnn|miopen)\$conv[A-Za-z]*$")
_COMPUTE = frozenset({"dot", "convolution"})
_TARGET_TEXT = re.compile(r"^[\w$.\-]{1,128}$")


def _file() -> Any:
    descriptor_pb2 = protobuf("descriptor_pb2")
    f = descriptor_pb2.FileDescriptorProto(name="opscope_hlo.proto", package="xla", syntax="proto3")
    pkg = ".xla."
    add_message(f, "HloProto", [("hlo_module", 1, "message", pkg + "HloModuleProto")])
    add_message(f, "HloModuleProto", [
        ("name", 1, "string"), ("entry_computation_name", 2, "string"),
        ("computations", 3, "message", "repeated", pkg + "HloComputationProto"), ("id", 5, "int64"),
        ("entry_computation_id", 6, "int64")])
    add_message(f, "HloComputationProto", [
        ("name", 1, "string"), ("instructions", 2, "message", "repeated", pkg + "HloInstructionProto"),
        ("id", 5, "int64"), ("root_id", 6, "int64"), ("is_fusion_computation", 7, "bool")])
    add_message(f, "HloInstructionProto", [
        ("name", 1, "string"), ("opcode", 2, "string"), ("shape", 3, "message", pkg + "ShapeProto"),
        ("parameter_number", 9, "int64"), ("fusion_kind", 11, "string"), ("tuple_index", 13, "int64"),
        ("dimensions", 14, "int64", "repeated"), ("window", 15, "message", pkg + "Window"),
        ("convolution_dimension_numbers", 16, "message", pkg + "ConvolutionDimensionNumbers"),
        ("custom_call_target", 28, "string"), ("dot_dimension_numbers", 30, "message", pkg + "DotDimensionNumbers"),
        ("id", 35, "int64"), ("operand_ids", 36, "int64", "repeated"),
        ("called_computation_ids", 38, "int64", "repeated"), ("backend_config", 43, "bytes"),
        ("feature_group_count", 50, "int64"), ("batch_group_count", 58, "int64")])
    add_message(f, "ShapeProto", [
        ("element_type", 2, "int64"), ("dimensions", 3, "int64", "repeated"),
        ("tuple_shapes", 4, "message", "repeated", pkg + "ShapeProto")])
    add_message(f, "Window", [("dimensions", 1, "message", "repeated", pkg + "WindowDimension")])
    add_message(f, "WindowDimension", [
        ("size", 1, "int64"), ("stride", 2, "int64"), ("padding_low", 3, "int64"), ("padding_high", 4, "int64"),
        ("window_dilation", 5, "int64"), ("base_dilation", 6, "int64"), ("window_reversal", 7, "bool")])
    add_message(f, "ConvolutionDimensionNumbers", [
        ("kernel_input_feature_dimension", 3, "int64"), ("kernel_output_feature_dimension", 4, "int64"),
        ("kernel_spatial_dimensions", 6, "int64", "repeated"), ("input_batch_dimension", 7, "int64"),
        ("input_feature_dimension", 8, "int64"), ("output_batch_dimension", 9, "int64"),
        ("output_feature_dimension", 10, "int64"), ("input_spatial_dimensions", 11, "int64", "repeated"),
        ("output_spatial_dimensions", 12, "int64", "repeated")])
    add_message(f, "DotDimensionNumbers", [
        ("lhs_contracting_dimensions", 1, "int64", "repeated"), ("rhs_contracting_dimensions", 2, "int64", "repeated"),
        ("lhs_batch_dimensions", 3, "int64", "repeated"), ("rhs_batch_dimensions", 4, "int64", "repeated")])
    return f


@functools.cache
def classes() -> dict[str, type]:
    """The message classes by short name (``HloProto``, ``HloModuleProto``, ``HloInstructionProto``, ...)."""
    return message_classes(_file(), "xla", (
        "HloProto", "HloModuleProto", "HloComputationProto", "HloInstructionProto", "ShapeProto", "Window",
        "WindowDimension", "ConvolutionDimensionNumbers", "DotDimensionNumbers"))


#: An op's record: (shapes, dtypes, concrete_inputs, output_shapes) text, each None where absent.
Record = tuple[str | None, str | None, str | None, str | None]
NO_RECORD: Record = (None, None, None, None)


class _TooLargeError(Exception):
    """A shape or record past its bounds: no record is written."""


# -- text ---------------------------------------------------------------------------------------------------------


def shape_text(shape, depth: int = 0) -> str:
    """``f32[8,64]``, ``(f32[8,64], u8[1024])``, ``f32[]``, ``token[]``; _TooLargeError past the bounds."""
    if shape.element_type == _TUPLE:
        members = shape.tuple_shapes
        if depth >= MAX_TUPLE_DEPTH or len(members) > MAX_TUPLE:
            raise _TooLargeError
        return "(" + ", ".join(shape_text(m, depth + 1) for m in members) + ")"
    name = PRIMITIVE_TYPES.get(shape.element_type)
    if name is None or len(shape.dimensions) > 16:
        raise _TooLargeError
    return f"{name}[{','.join(str(d) for d in shape.dimensions)}]"


def _braces(values) -> str:
    return "{" + ",".join(str(v) for v in values) + "}"


def _window_text(window) -> str:
    dims = window.dimensions
    parts = ["size=" + "x".join(str(d.size) for d in dims)]
    if any(d.stride not in (0, 1) for d in dims):
        parts.append("stride=" + "x".join(str(d.stride or 1) for d in dims))
    if any(d.padding_low or d.padding_high for d in dims):
        parts.append("pad=" + "x".join(f"{d.padding_low}_{d.padding_high}" for d in dims))
    if any(d.base_dilation not in (0, 1) for d in dims):
        parts.append("lhs_dilate=" + "x".join(str(d.base_dilation or 1) for d in dims))
    if any(d.window_dilation not in (0, 1) for d in dims):
        parts.append("rhs_dilate=" + "x".join(str(d.window_dilation or 1) for d in dims))
    if any(d.window_reversal for d in dims):
        parts.append("rhs_reversal=" + "x".join("1" if d.window_reversal else "0" for d in dims))
    return "window={" + " ".join(parts) + "}"


def _labels(rank: int, marks: dict[int, str], spatial) -> str | None:
    """One operand's part of ``dim_labels``: a letter or spatial index per dimension; None where they clash."""
    labels = [""] * rank
    for at, mark in [*marks.items(), *((d, str(i)) for i, d in enumerate(spatial))]:
        if not 0 <= at < rank or labels[at] or len(spatial) > 10:
            return None
        labels[at] = mark
    return "".join(labels) if all(labels) else None


def _dim_labels_text(d) -> str | None:
    """``dim_labels=bf012_oi012->bf012`` from ConvolutionDimensionNumbers (None: inconsistent numbers)."""
    rank = len(d.input_spatial_dimensions) + 2
    if len(d.kernel_spatial_dimensions) + 2 != rank or len(d.output_spatial_dimensions) + 2 != rank:
        return None
    lhs = _labels(rank, {d.input_batch_dimension: "b", d.input_feature_dimension: "f"}, d.input_spatial_dimensions)
    rhs = _labels(rank, {d.kernel_input_feature_dimension: "i", d.kernel_output_feature_dimension: "o"},
                  d.kernel_spatial_dimensions)
    out = _labels(rank, {d.output_batch_dimension: "b", d.output_feature_dimension: "f"},
                  d.output_spatial_dimensions)
    if lhs is None or rhs is None or out is None:
        return None
    return f"dim_labels={lhs}_{rhs}->{out}"


def _dot_text(lhs_batch, lhs_contracting, rhs_batch, rhs_contracting) -> list[str]:
    parts = []
    for key, values in (("lhs_batch_dims", lhs_batch), ("lhs_contracting_dims", lhs_contracting),
                        ("rhs_batch_dims", rhs_batch), ("rhs_contracting_dims", rhs_contracting)):
        if values:
            parts.append(f"{key}={_braces(values)}")
    return parts


def _gemm_dims(config: bytes) -> list[str]:
    """The dot attributes from a gemm custom-call's backend config (JSON: ``gemm_backend_config.
    dot_dimension_numbers``, int64s as strings); none when it does not say them."""
    if not config or len(config) > MAX_RECORD * 4:
        return []
    try:
        doc = json.loads(config)
        numbers = doc["gemm_backend_config"]["dot_dimension_numbers"]
        dims = [[int(v) for v in numbers.get(key, [])] for key in (
            "lhs_batch_dimensions", "lhs_contracting_dimensions", "rhs_batch_dimensions",
            "rhs_contracting_dimensions")]
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
        return []
    if any(len(d) > 16 or any(not 0 <= v < 64 for v in d) for d in dims) or not dims[1]:
        return []
    return _dot_text(*dims)


# -- modules ------------------------------------------------------------------------------------------------------


class _Module:
    """One decoded HloModuleProto: its computations by id, each computation's instructions by id, and the
    instructions by name (names are unique within a module)."""

    def __init__(self, module) -> None:
        self.name: str = module.name
        self.computations = {c.id: c for c in module.computations}
        self.ids: dict[int, dict[int, Any]] = {c.id: {i.id: i for i in c.instructions} for c in module.computations}
        self.by_name: dict[str, tuple[Any, int]] = {}
        for c in module.computations:
            for i in c.instructions:
                self.by_name.setdefault(i.name, (i, c.id))
        self.records: dict[str, Record] = {}

    def record(self, op: str) -> Record:
        hit = self.records.get(op)
        if hit is None:
            found = self.by_name.get(op)
            hit = self.records[op] = _record(self, *found) if found else NO_RECORD
        return hit

    def operands(self, ins, computation: int) -> list:
        """The instruction's operands (instruction protos), in order; [] where one is not found."""
        known = self.ids.get(computation, {})
        out = [known.get(i) for i in ins.operand_ids]
        return [] if any(o is None for o in out) else out

    def inner(self, ins) -> list[tuple[Any, int]]:
        """The matrix products and convolutions inside a fusion's called computations (nested fusions searched
        up to MAX_NESTING deep, each computation once), at most MAX_INNER; _TooLargeError past the bounds."""
        found: list[tuple[Any, int]] = []
        seen: set[int] = set()
        todo = deque((cid, 0) for cid in ins.called_computation_ids)
        while todo:
            cid, depth = todo.popleft()
            computation = self.computations.get(cid)
            if computation is None or cid in seen:
                continue
            seen.add(cid)
            if len(seen) > MAX_INNER * MAX_NESTING:
                raise _TooLargeError
            for i in computation.instructions:
                if _is_compute(i):
                    found.append((i, cid))
                elif i.opcode == "fusion" and depth + 1 < MAX_NESTING:
                    todo.extend((c, depth + 1) for c in i.called_computation_ids)
                if len(found) > MAX_INNER:
                    raise _TooLargeError
        return found


def _is_compute(ins) -> bool:
    return ins.opcode in _COMPUTE or (ins.opcode == "custom-call" and bool(
        GEMM_TARGETS.match(ins.custom_call_target) or CONV_TARGETS.match(ins.custom_call_target)))


def instruction_text(module: _Module, ins, computation: int) -> str | None:
    """One instruction's line: ``RESULT opcode(OPERAND, ...), attributes``; None where an operand is not found."""
    operands = module.operands(ins, computation)
    if len(operands) != len(ins.operand_ids):
        return None
    parts = [f"{shape_text(ins.shape)} {ins.opcode}({', '.join(shape_text(o.shape) for o in operands)})"]
    op = ins.opcode
    if op == "fusion" and ins.fusion_kind:
        parts.append(f"kind={ins.fusion_kind}")
    if ins.HasField("window") and ins.window.dimensions:
        parts.append(_window_text(ins.window))
    if ins.HasField("convolution_dimension_numbers"):
        labels = _dim_labels_text(ins.convolution_dimension_numbers)
        if labels:
            parts.append(labels)
    if ins.feature_group_count > 1:
        parts.append(f"feature_group_count={ins.feature_group_count}")
    if ins.batch_group_count > 1:
        parts.append(f"batch_group_count={ins.batch_group_count}")
    if ins.HasField("dot_dimension_numbers"):
        d = ins.dot_dimension_numbers
        parts.extend(_dot_text(d.lhs_batch_dimensions, d.lhs_contracting_dimensions, d.rhs_batch_dimensions,
                               d.rhs_contracting_dimensions))
    if op in ("reduce", "reduce-window", "transpose", "broadcast") and ins.dimensions:
        parts.append(f"dimensions={_braces(ins.dimensions)}")
    if op == "custom-call" and _TARGET_TEXT.match(ins.custom_call_target):
        parts.append(f'custom_call_target="{ins.custom_call_target}"')
        if GEMM_TARGETS.match(ins.custom_call_target):
            parts.extend(_gemm_dims(ins.backend_config))
    return ", ".join(parts)


def _record(module: _Module, ins, computation: int) -> Record:
    """(shapes, dtypes, concrete_inputs, output_shapes) of one instruction; NO_RECORD where it does not render."""
    try:
        line = instruction_text(module, ins, computation)
        if line is None:
            return NO_RECORD
        lines = [line]
        if ins.opcode == "fusion":
            for inner, cid in module.inner(ins):
                text = instruction_text(module, inner, cid)
                if text is None:
                    return NO_RECORD
                lines.append("  " + text)
        text = "\n".join(lines)
        if len(text) > MAX_RECORD:
            return NO_RECORD
        operands = module.operands(ins, computation)
        dims = [_operand_dims(o.shape) for o in operands]
        types = [PRIMITIVE_TYPES.get(o.shape.element_type, "") for o in operands]
        result = ins.shape
        outputs = _operand_dims(result) if result.element_type == _TUPLE else [list(result.dimensions)]
    except _TooLargeError:
        return NO_RECORD
    compact = (",", ":")
    return json.dumps(dims, separators=compact), json.dumps(types), json.dumps([text]), json.dumps(outputs,
                                                                                                     separators=compact)


def _operand_dims(shape) -> list:
    if shape.element_type == _TUPLE:
        return [list(m.dimensions) for m in shape.tuple_shapes if m.element_type != _TUPLE]
    return list(shape.dimensions)


class HloModules:
    """The programs of one XSpace, by program id and by module name (a name two programs share finds neither)."""

    def __init__(self) -> None:
        self.by_program: dict[int, _Module] = {}
        self.by_name: dict[str, _Module | None] = {}

    def __len__(self) -> int:
        return len(self.by_program)

    def instruction_names(self) -> set[str]:
        """Every instruction name of every program."""
        return {name for module in self.by_program.values() for name in module.by_name}

    def add(self, program_id: int, data: bytes) -> bool:
        """Decode one program's HloProto; False when it does not decode or is larger than MAX_MODULE_BYTES."""
        if not isinstance(data, bytes) or not data or len(data) > MAX_MODULE_BYTES:
            return False
        proto = classes()["HloProto"]()
        try:
            proto.ParseFromString(data)
        except (protobuf("message").DecodeError, RuntimeError, ValueError):
            return False
        if not proto.HasField("hlo_module"):
            return False
        module = _Module(proto.hlo_module)
        self.by_program[program_id] = module
        self.by_name[module.name] = None if module.name in self.by_name else module
        return True

    def record(self, op: Any, module: Any = None, program_id: Any = None) -> Record:
        """(shapes, dtypes, concrete_inputs, output_shapes) of instruction ``op`` of the program ``program_id``
        (else of the one module named ``module``); NO_RECORD when the program or the instruction is not known."""
        found = self.by_program.get(program_id) if isinstance(program_id, int) else None
        if found is None and isinstance(module, str):
            found = self.by_name.get(module)
        if found is None or not isinstance(op, str):
            return NO_RECORD
        return found.record(op)
