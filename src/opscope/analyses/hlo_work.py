"""Work per call of an XLA HLO instruction, from its text: what :func:`opscope.analyses.work.op_work` gives an op
whose record is an HLO instruction (JAX, TensorFlow/XLA, PyTorch/XLA in an XSpace).

The record is the instruction in XLA's HLO text syntax, one line (``[%name =] RESULT opcode(OPERAND, ...),
attribute=value, ...``; operands as their shapes, names and layouts optional), and for a fusion the lines of the
matrix products and convolutions inside it, indented (what ``ingest/xplane/hlo.py`` writes from the program's HLO
proto). The text comes from the trace and is untrusted: it is cut into tokens by hand (brackets, braces and quotes
matched, never evaluated), bounded (:data:`MAX_TEXT`, 16 dimensions, 2^56 elements), and anything malformed or
inconsistent gives None.

Conventions are those of :mod:`opscope.analyses.work` (per call; a multiply-add counts 2; bytes are the minimum
traffic: each operand read once and the result written once, a custom-call's scratch buffer left out):

* ``dot``: flops 2 x result elements x the product of the contracting dimensions (= 2·M·N·K·batch); bytes lhs + rhs
  + result; dtype the lhs's. A cuBLAS/hipBLASLt gemm custom-call is the same product on its first two operands (its
  other operands, a bias or scales, read), the result the tuple's first member.
* ``convolution``: flops 2 x output elements x kernel input features (per group) x kernel window elements, every
  window position counted (padding included, as the framework formulas do); with base dilation (``lhs_dilate``, a
  gradient's transposed convolution) 2 x input elements x kernel output features per group x window elements (each
  input element scattered through the kernel, the inserted holes not counted). The dimensions come from
  ``dim_labels`` and the output size from the result's shape, never recomputed. cuDNN/MIOpen convolution
  custom-calls (``__cudnn$conv...``) are the convolution their window and ``dim_labels`` describe: forward (input =
  operand 0, kernel = operand 1, output = the result's first member), ``BackwardInput`` (output = operand 0, input =
  the result) and ``BackwardFilter`` (input = operand 0, output = operand 1, kernel = the result); bytes the
  operands read + the result written.
* ``fusion``: bytes its operands + its result; flops those of the matrix products and convolutions listed inside it
  (family ``matmul``/``conv``), else 0 (family ``fusion``): the elementwise arithmetic of a fusion is not counted, a
  memory-bound model whose roof is the bandwidth (at well under 1 FLOP per byte the memory roof applies anyway).
* elementwise opcodes (add, multiply, exponential, compare, select, ...): flops 1 per result element (as XLA's
  own cost analysis counts them, transcendentals included); bytes operands + result.
* ``reduce`` of one array: flops 1 per input element; ``reduce-window``: 1 per result element and window element;
  bytes operands + result.
* data movement (copy, transpose, convert, broadcast, concatenate, pad, reverse, slice, dynamic-slice, gather,
  dynamic-update-slice, iota): flops 0; bytes operands + result, except a slice or gather (the part read: 2 x the
  result, plus the indices) and dynamic-update-slice (the update read and written in place).
* anything else (while, call, sort, collectives, other custom-calls, a variadic reduce, scatter...): no model.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

#: Longest record parsed (characters); a longer one has no model.
MAX_TEXT = 1 << 16
#: Largest dimension and most elements one array may have; most operands and tuple members.
MAX_DIM = 1 << 40
MAX_NUMEL = 1 << 56
MAX_ITEMS = 4096

#: XLA element types -> (the canonical dtype of opscope.analyses.work, bytes per element).
XLA_DTYPES: dict[str, tuple[str, float]] = {
    "pred": ("bool", 1), "s8": ("int8", 1), "u8": ("uint8", 1), "s16": ("int16", 2), "u16": ("uint16", 2),
    "s32": ("int32", 4), "u32": ("uint32", 4), "s64": ("int64", 8), "u64": ("uint64", 8), "f16": ("fp16", 2),
    "bf16": ("bf16", 2), "f32": ("fp32", 4), "f64": ("fp64", 8), "c64": ("complex64", 8), "c128": ("complex128", 16),
    "s4": ("int4", 0.5), "u4": ("uint4", 0.5), "s2": ("int2", 0.25), "u2": ("uint2", 0.25), "s1": ("int1", 0.125),
    "u1": ("uint1", 0.125), "f4e2m1fn": ("fp4", 0.5), "token": ("token", 0), "opaque": ("opaque", 0),
    **dict.fromkeys(("f8e5m2", "f8e4m3", "f8e4m3fn", "f8e4m3b11fnuz", "f8e5m2fnuz", "f8e4m3fnuz", "f8e3m4",
                     "f8e8m0fnu"), ("fp8", 1)),
}

#: Elementwise opcodes: 1 FLOP per result element.
ELEMENTWISE = frozenset({
    "add", "subtract", "multiply", "divide", "remainder", "maximum", "minimum", "power", "atan2", "and", "or", "xor",
    "not", "negate", "abs", "sign", "exponential", "exponential-minus-one", "log", "log-plus-one", "sqrt", "rsqrt",
    "cbrt", "tanh", "logistic", "sine", "cosine", "tan", "floor", "ceil", "round-nearest-afz", "round-nearest-even",
    "compare", "select", "clamp", "is-finite", "erf", "shift-left", "shift-right-logical", "shift-right-arithmetic",
    "popcnt", "count-leading-zeros", "real", "imag", "complex", "stochastic-convert"})
#: Data movement: no FLOPs; bytes every operand read and the result written.
MOVES = frozenset({"copy", "transpose", "convert", "bitcast-convert", "broadcast", "concatenate", "pad", "reverse",
                   "reshape"})
#: Reads only the part of operand 0 that the result holds (2 x the result), the other operands (indices) whole.
SLICES = frozenset({"slice", "dynamic-slice", "gather"})
#: The opcodes with a model, per family of opscope.analyses.work (custom-call: the gemm and convolution targets).
MODELED: dict[str, frozenset[str]] = {
    "matmul": frozenset({"dot", "custom-call"}), "conv": frozenset({"convolution", "custom-call"}),
    "fusion": frozenset({"fusion"}), "elementwise": ELEMENTWISE, "reduction": frozenset({"reduce", "reduce-window"}),
    "copy": MOVES | SLICES | {"dynamic-update-slice", "iota"}}
_CONV_KINDS = re.compile(r"^__(?:cudnn|miopen)\$conv(Forward|BiasActivationForward|ForwardGraph|BackwardInput|"
                         r"BackwardFilter)$")
_GEMMS = re.compile(r"^__cublas\$(?:gemm|lt\$matmul(?:\$f8)?)$")

_HEAD = re.compile(r"\s*(?:ROOT\s+)?(?:%?[A-Za-z_][\w.\-]*\s*=\s*)?")
_ARRAY = re.compile(r"([a-z][a-z0-9]*)\[([^\]]*)\]")
_OPCODE = re.compile(r"\s*([a-z][a-z0-9\-]*)\(")
_NAME = re.compile(r"\s*%?[A-Za-z_][\w.\-]*\s*")
_INT_LIST = re.compile(r"^\{\s*(-?\d+(?:\s*,\s*-?\d+)*)?\s*\}$")
_LABELS = re.compile(r"^([0-9a-z]+)_([0-9a-z]+)->([0-9a-z]+)$")


class _BadRecordError(Exception):
    """Malformed, inconsistent or out of bounds: no model."""


@dataclass(frozen=True)
class Array:
    """An array shape: XLA element type and dimensions."""

    dtype: str
    dims: tuple[int, ...]

    @property
    def numel(self) -> int:
        return math.prod(self.dims)

    @property
    def nbytes(self) -> float:
        return self.numel * XLA_DTYPES[self.dtype][1]


#: A shape: an array, or a tuple of shapes.
Shape = Array | tuple


@dataclass(frozen=True)
class Instruction:
    """One parsed line: result shape, opcode, operand shapes (None where the text names an operand without its
    shape), attributes as their raw text."""

    result: Shape
    opcode: str
    operands: tuple[Shape | None, ...]
    attrs: dict[str, str]

    def operand(self, i: int) -> Array:
        """Operand ``i``, which must be an array whose shape is given."""
        if i >= len(self.operands) or not isinstance(self.operands[i], Array):
            raise _BadRecordError
        return self.operands[i]  # type: ignore[return-value]


# -- tokens -------------------------------------------------------------------------------------------------------

_CLOSE = {"(": ")", "[": "]", "{": "}"}


def _match(text: str, at: int) -> int:
    """The index just after the bracket that closes the one at ``at`` (quotes and nesting respected)."""
    stack = [_CLOSE[text[at]]]
    i = at + 1
    n = len(text)
    while i < n:
        c = text[i]
        if c == '"':
            i = _end_quote(text, i)
            continue
        if c in _CLOSE:
            stack.append(_CLOSE[c])
            if len(stack) > 64:
                raise _BadRecordError
        elif c in ")]}":
            if c != stack.pop():
                raise _BadRecordError
            if not stack:
                return i + 1
        i += 1
    raise _BadRecordError


def _end_quote(text: str, at: int) -> int:
    """The index just after the quote that closes the one at ``at`` (backslash escapes skipped)."""
    i = at + 1
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == '"':
            return i + 1
        i += 1
    raise _BadRecordError


def _split(text: str) -> list[str]:
    """``text`` cut at its top-level commas (not inside brackets, braces or quotes), each part stripped."""
    parts: list[str] = []
    start = i = 0
    while i < len(text):
        c = text[i]
        if c == '"':
            i = _end_quote(text, i)
            continue
        if c in _CLOSE:
            i = _match(text, i)
            continue
        if c in ")]}":
            raise _BadRecordError
        if c == ",":
            parts.append(text[start:i].strip())
            start = i + 1
            if len(parts) > MAX_ITEMS:
                raise _BadRecordError
        i += 1
    parts.append(text[start:].strip())
    return parts


def _shape(text: str, at: int, depth: int = 0) -> tuple[Shape, int]:
    """The shape starting at ``at`` (``f32[8,64]{1,0}``, ``(f32[8], u8[16])``, ``f32[<=8]``) and the index after it
    (its layout skipped)."""
    if depth > 8:
        raise _BadRecordError
    if text.startswith("(", at):
        end = _match(text, at)
        inner = text[at + 1:end - 1].strip()
        members = []
        for part in _split(inner) if inner else []:
            member, used = _shape(part, 0, depth + 1)
            if part[used:].strip():
                raise _BadRecordError
            members.append(member)
        return tuple(members), end
    m = _ARRAY.match(text, at)
    if m is None or m.group(1) not in XLA_DTYPES:
        raise _BadRecordError
    dims = []
    body = m.group(2).strip()
    for d in body.split(",") if body else []:
        d = d.strip().removeprefix("<=")
        if not d.isdigit() or len(d) > 15:
            raise _BadRecordError  # a dynamic "?" dimension, or not a size
        dims.append(int(d))
    if len(dims) > 16 or any(d >= MAX_DIM for d in dims) or math.prod(dims) > MAX_NUMEL:
        raise _BadRecordError
    end = m.end()
    if text.startswith("{", end):  # the layout
        end = _match(text, end)
    return Array(m.group(1), tuple(dims)), end


def parse_instruction(line: str) -> Instruction:
    """One line of HLO text; _BadRecordError when it does not parse."""
    at = _HEAD.match(line).end()  # type: ignore[union-attr]  # the pattern matches the empty string
    result, at = _shape(line, at)
    m = _OPCODE.match(line, at)
    if m is None:
        raise _BadRecordError
    open_at = m.end() - 1
    close = _match(line, open_at)
    inner = line[open_at + 1:close - 1].strip()
    operands: list[Shape | None] = []
    for part in _split(inner) if inner else []:
        if part[:1] == "(" or _ARRAY.match(part):
            shape, used = _shape(part, 0)
            if not _NAME.fullmatch(part[used:]) and part[used:].strip():
                raise _BadRecordError
            operands.append(shape)
        elif _NAME.fullmatch(part):
            operands.append(None)  # named without its shape
        else:
            raise _BadRecordError
    rest = line[close:].strip()
    attrs: dict[str, str] = {}
    if rest:
        if not rest.startswith(","):
            raise _BadRecordError
        for part in _split(rest[1:]):
            key, eq, value = part.partition("=")
            if not eq or not key.strip():
                raise _BadRecordError
            attrs[key.strip()] = value.strip()
    return Instruction(result, m.group(1), tuple(operands), attrs)


def _ints(text: str | None) -> tuple[int, ...]:
    """``{0,2}`` -> (0, 2); () when absent."""
    if text is None:
        return ()
    m = _INT_LIST.match(text)
    if m is None:
        raise _BadRecordError
    return tuple(int(v) for v in m.group(1).split(",")) if m.group(1) else ()


def _arrays(shape: Shape | None) -> list[Array]:
    """The arrays of a shape (a tuple's members, flattened); _BadRecordError where it is not given."""
    if isinstance(shape, Array):
        return [shape]
    if isinstance(shape, tuple):
        return [a for member in shape for a in _arrays(member)]
    raise _BadRecordError


def _first(shape: Shape) -> Array:
    """An array, or a tuple's first member (a custom-call's result; the rest is scratch)."""
    while isinstance(shape, tuple):
        if not shape:
            raise _BadRecordError
        shape = shape[0]
    return shape


def _operand_bytes(ins: Instruction) -> float:
    return sum(a.nbytes for o in ins.operands for a in _arrays(o))


def _canonical(dtype: str) -> str:
    return XLA_DTYPES[dtype][0]


# -- models -------------------------------------------------------------------------------------------------------

#: (flops, bytes, canonical compute dtype, family)
Result = tuple[float, float, str, str]


def _dot_flops(lhs: Array, rhs: Array, out: Array, attrs: dict[str, str]) -> float:
    """2 x output elements x contracted size, the dimension numbers checked against the shapes."""
    lc, rc = _ints(attrs.get("lhs_contracting_dims")), _ints(attrs.get("rhs_contracting_dims"))
    lb, rb = _ints(attrs.get("lhs_batch_dims")), _ints(attrs.get("rhs_batch_dims"))
    if len(lc) != len(rc) or len(lb) != len(rb) or not lc:
        raise _BadRecordError
    for dims, shape in ((lc + lb, lhs), (rc + rb, rhs)):
        if len(set(dims)) != len(dims) or any(not 0 <= d < len(shape.dims) for d in dims):
            raise _BadRecordError
    if any(lhs.dims[a] != rhs.dims[b] for a, b in zip(lc + lb, rc + rb)):
        raise _BadRecordError
    k = math.prod(lhs.dims[d] for d in lc)
    batch = math.prod(lhs.dims[d] for d in lb)
    m = lhs.numel // max(k * batch, 1)
    n = rhs.numel // max(k * batch, 1)
    if out.numel != batch * m * n:
        raise _BadRecordError
    return 2.0 * out.numel * k


def _dot(ins: Instruction) -> Result:
    lhs, rhs, out = ins.operand(0), ins.operand(1), _first(ins.result)
    flops = _dot_flops(lhs, rhs, out, ins.attrs)
    return flops, _operand_bytes(ins) + out.nbytes, _canonical(lhs.dtype), "matmul"


def _labels(text: str | None) -> tuple[str, str, str]:
    m = _LABELS.match(text or "")
    if m is None:
        raise _BadRecordError
    return m.group(1), m.group(2), m.group(3)


def _window(text: str | None, rank: int) -> dict[str, tuple[int, ...]]:
    """``{size=3x3 stride=2x2 pad=1_1x1_1 lhs_dilate=1x1 ...}`` -> per key the values (pad: low,high pairs flat)."""
    if text is None or not (text.startswith("{") and text.endswith("}")):
        raise _BadRecordError
    out: dict[str, tuple[int, ...]] = {}
    for item in text[1:-1].split():
        key, eq, value = item.partition("=")
        if not eq:
            raise _BadRecordError
        parts = value.split("x")
        if len(parts) != rank:
            raise _BadRecordError
        try:
            if key == "pad":
                pairs = [p.split("_") for p in parts]
                if any(len(p) != 2 for p in pairs):
                    raise _BadRecordError
                out[key] = tuple(int(v) for p in pairs for v in p)
            else:
                out[key] = tuple(int(v) for v in parts)
        except ValueError as exc:
            raise _BadRecordError from exc
    if "size" not in out or any(s <= 0 for s in out["size"]):
        raise _BadRecordError
    return out


def _conv_flops(lhs: Array, rhs: Array, out: Array, attrs: dict[str, str]) -> float:
    """The convolution ``lhs * rhs -> out`` as its window and dim_labels describe it (see the module)."""
    lhs_l, rhs_l, out_l = _labels(attrs.get("dim_labels"))
    if not (len(lhs_l) == len(lhs.dims) == len(rhs_l) == len(rhs.dims) == len(out_l) == len(out.dims)):
        raise _BadRecordError
    rank = len(lhs_l) - 2
    spatial = "".join(str(s) for s in range(rank))
    if rank > 10 or sorted(lhs_l) != sorted("bf" + spatial) or sorted(rhs_l) != sorted("io" + spatial) or \
            sorted(out_l) != sorted("bf" + spatial):
        raise _BadRecordError
    groups = int(attrs.get("feature_group_count", "1"))
    batch_groups = int(attrs.get("batch_group_count", "1"))
    lb, lf = lhs_l.index("b"), lhs_l.index("f")
    ki, ko = rhs_l.index("i"), rhs_l.index("o")
    ob, of = out_l.index("b"), out_l.index("f")
    kernel_sp = [rhs.dims[rhs_l.index(s)] for s in spatial]
    window = _window(attrs.get("window"), rank) if rank else {"size": ()}
    if list(window["size"]) != kernel_sp or groups < 1 or batch_groups < 1:
        raise _BadRecordError
    c_in, k_in, k_out = lhs.dims[lf], rhs.dims[ki], rhs.dims[ko]
    if k_in * groups != c_in or k_out % groups or out.dims[of] != k_out or k_out % batch_groups:
        raise _BadRecordError
    if out.dims[ob] * batch_groups != lhs.dims[lb]:
        raise _BadRecordError
    taps = math.prod(kernel_sp)
    if any(d > 1 for d in window.get("lhs_dilate", ())):
        return 2.0 * lhs.numel * (k_out // groups) * taps
    return 2.0 * out.numel * k_in * taps


def _convolution(ins: Instruction) -> Result:
    lhs, rhs, out = ins.operand(0), ins.operand(1), _first(ins.result)
    flops = _conv_flops(lhs, rhs, out, ins.attrs)
    return flops, _operand_bytes(ins) + out.nbytes, _canonical(lhs.dtype), "conv"


def _target(ins: Instruction) -> str:
    text = ins.attrs.get("custom_call_target", "")
    return text[1:-1] if len(text) >= 2 and text[0] == text[-1] == '"' else ""


def _custom_call(ins: Instruction) -> Result:
    target = _target(ins)
    first = _first(ins.result)
    if _GEMMS.match(target):
        lhs, rhs = ins.operand(0), ins.operand(1)
        flops = _dot_flops(lhs, rhs, first, ins.attrs)
        return flops, _operand_bytes(ins) + first.nbytes, _canonical(lhs.dtype), "matmul"
    kind = _CONV_KINDS.match(target)
    if kind is None:
        raise _BadRecordError
    a, b = ins.operand(0), ins.operand(1)
    if kind.group(1) == "BackwardInput":
        lhs, rhs, out = first, b, a
    elif kind.group(1) == "BackwardFilter":
        lhs, rhs, out = a, first, b
    else:
        lhs, rhs, out = a, b, first
    flops = _conv_flops(lhs, rhs, out, ins.attrs)
    return flops, _operand_bytes(ins) + first.nbytes, _canonical(lhs.dtype), "conv"


def _fusion(ins: Instruction, inner: list[Instruction]) -> Result:
    nbytes = _operand_bytes(ins) + sum(a.nbytes for a in _arrays(ins.result))
    if not inner:
        return 0.0, nbytes, _canonical(_first(ins.result).dtype), "fusion"
    flops, dtype, family = 0.0, "", ""
    for i in inner:
        f, _, d, fam = _compute(i)
        flops += f
        dtype, family = dtype or d, family or fam
    return flops, nbytes, dtype, family


def _compute(ins: Instruction) -> Result:
    if ins.opcode == "dot":
        return _dot(ins)
    if ins.opcode == "convolution":
        return _convolution(ins)
    if ins.opcode == "custom-call":
        return _custom_call(ins)
    raise _BadRecordError


def _simple(ins: Instruction) -> Result:
    op = ins.opcode
    out = _arrays(ins.result)
    out_bytes = sum(a.nbytes for a in out)
    if op in ELEMENTWISE:
        first = _first(ins.result)
        return float(first.numel), _operand_bytes(ins) + out_bytes, _canonical(first.dtype), "elementwise"
    if op in MOVES:
        return 0.0, _operand_bytes(ins) + out_bytes, _canonical(_first(ins.result).dtype), "copy"
    if op in SLICES:
        indices = sum(a.nbytes for o in ins.operands[1:] for a in _arrays(o))
        return 0.0, 2 * out_bytes + indices, _canonical(_first(ins.result).dtype), "copy"
    if op == "dynamic-update-slice":
        update = ins.operand(1)
        indices = sum(a.nbytes for o in ins.operands[2:] for a in _arrays(o))
        return 0.0, 2 * update.nbytes + indices, _canonical(update.dtype), "copy"
    if op == "iota":
        return 0.0, out_bytes, _canonical(_first(ins.result).dtype), "copy"
    if op == "reduce" and len(ins.operands) == 2:
        data = ins.operand(0)
        return float(data.numel), _operand_bytes(ins) + out_bytes, _canonical(data.dtype), "reduction"
    if op == "reduce-window" and len(ins.operands) == 2:
        first = _first(ins.result)
        size = _window(ins.attrs.get("window"), len(first.dims))["size"]
        return (float(first.numel * math.prod(size)), _operand_bytes(ins) + out_bytes, _canonical(first.dtype),
                "reduction")
    raise _BadRecordError


def is_record(text: str | None) -> bool:
    """Whether a ``concrete_inputs`` text is an HLO instruction record (a JSON list of one string that starts like
    an instruction: a shape then an opcode)."""
    if not isinstance(text, str) or not text.startswith('["') or len(text) > MAX_TEXT:
        return False
    head = text[2:66]
    return bool(re.match(r"(?:ROOT\s+)?(?:%?[A-Za-z_][\w.\-]*\s*=\s*)?\(?[a-z][a-z0-9]*\[", head))


def instruction_work(text: str) -> Result | None:
    """(flops, bytes, dtype, family) of one call of the instruction whose record is ``text`` (see the module);
    None when it has no model or the record does not resolve."""
    try:
        value = json.loads(text) if isinstance(text, str) and len(text) <= MAX_TEXT else None
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, list) or len(value) != 1 or not isinstance(value[0], str):
        return None
    lines = value[0].split("\n")
    try:
        ins = parse_instruction(lines[0])
        if ins.opcode == "fusion":
            inner = [parse_instruction(line) for line in lines[1:] if line.strip()]
            result = _fusion(ins, inner)
        elif len(lines) > 1:
            return None
        elif ins.opcode in ("dot", "convolution", "custom-call"):
            result = _compute(ins)
        else:
            result = _simple(ins)
    except (_BadRecordError, KeyError, IndexError, ValueError, TypeError, ZeroDivisionError, OverflowError):
        return None
    flops, nbytes = float(result[0]), float(result[1])
    if not (math.isfinite(flops) and math.isfinite(nbytes)) or flops < 0 or nbytes < 0:
        return None
    return flops, nbytes, result[2], result[3]
