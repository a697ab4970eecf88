"""Work per op call from its recorded shapes: the FLOPs and bytes a roofline places the op against.

Pure functions over the text the model stores per event (``shapes``, ``dtypes``, ``concrete_inputs``,
``output_shapes``, ``strides``): Kineto's ``Input Dims``/``Input type``/``Concrete Inputs``
(``[[16,559,1024],[1024,1024],[1024]]``, ``["c10::BFloat16", ...]``, ``["", "", "1"]``), and the same JSON that the
ONNX Runtime, TensorFlow (xplane) and MIGraphX readers write (MIGraphX's records also hold the output, last, and the
``strides`` of each entry: see "MIGraphX" below). That text comes from the trace and is untrusted: it is parsed as
bounded JSON, never evaluated, and anything malformed, too large or inconsistent (a matmul whose inner dimensions
disagree) gives None, never an exception.

ONNX Runtime records no attributes (strides, pads, group, transA, kernel_shape) but each node's outputs' shapes,
and lists only the inputs a kernel still holds (a weight it prepacked is left out, an optional input not given is
not marked). The ONNX models therefore read the output's shape where they need it (a Conv's output size, a Gemm's
N), tell optional inputs apart by shape rather than position, and have no model where neither settles the work.
``Reshape``/``Flatten``/``Squeeze``/``Unsqueeze`` have none on purpose: ORT's kernels for them let the output share
the input's memory (no data moves when it does, a copy when it cannot), and which happened is not recorded; their
time stays in the "no model" count.

An op whose ``concrete_inputs`` is an XLA HLO instruction record (what the xplane reader writes for JAX and XLA ops)
is modeled by :mod:`opscope.analyses.hlo_work` from that text, whatever its name.

Conventions, the same for every family:

* ``flops`` are per call; a multiply-add counts 2. ``bytes`` are the *minimum* traffic of one call: each input read
  once and each output written once at its dtype's size (caches, re-reads and workspaces left out), so a measured
  time against them is a lower bound on the op's efficiency, never an overstatement.
* ``dtype`` is the compute dtype whose peak applies. fp32 matmuls count as ``fp32`` (PyTorch's default
  ``allow_tf32=False`` for matmul); a convolution counts as ``tf32`` only where its record says ``allow_tf32=True``
  (``aten::_convolution``, ``aten::cudnn_convolution``; cuDNN's default), else fp32.
* Composite ops are modeled at every level that records shapes (``aten::linear`` and the ``aten::addmm`` under it,
  ``aten::conv2d`` ... ``aten::cudnn_convolution``): the same work appears at each level, so a caller that sums
  must count each device kernel once (at the op that owns its device time), never the nested levels together.
* An op without a model (or whose shapes do not resolve) gives None: it is counted and listed by the caller
  ("no model for X: N% of device time"), never guessed.

Each family's formula is in one function below (``_matmul``, ``_conv``, ``_attention``, ``_elementwise``,
``_norm``, ``_reduction``, ``_embedding``, ``_copy``; for ONNX's records ``_onnx_product``, ``_onnx_conv``,
``_onnx_norm``, ``_pool``, ``_onnx_reduce``), with its constants stated there. Pooling belongs to the ``reduction``
family (a windowed reduction). MIGraphX's ops and compiled kernels, named by the ops they join
(``gpu::code_object::mlir_convolution_add_relu``), have theirs in ``_mgx_work``.
TensorFlow ops are named by type and record their input shapes only (``OpKernel::TraceString``: no attributes, no
outputs): those whose inputs pin their work map onto these models (``_ALIASES``, ``_TRANSPOSABLE``, ``_add_n``,
``_bias_add_grad``, ``_tf_batch_norm``); a TF op whose work depends on an attribute the record leaves out
(``Conv2D``'s and pooling's strides and padding, a reduction's axes, ``Cast``'s output type) has no model.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from opscope.analyses import hlo_work

#: The families of :attr:`Work.family`.
FAMILIES: tuple[str, ...] = ("matmul", "conv", "attention", "elementwise", "norm", "reduction", "embedding", "copy",
                             "fusion")


@dataclass(frozen=True)
class Work:
    """The work of one call. ``bytes`` is minimum traffic: each input read once and each output written once."""

    flops: float   # per call; a multiply-add counts 2
    bytes: float   # per call: minimum traffic, each input read once and each output written once
    dtype: str     # the compute dtype whose peak applies: fp64, fp32, tf32, fp16, bf16, fp8, int8 (or int32, ...)
    family: str    # one of FAMILIES


# ---------------------------------------------------------------------------------------------------------------
# dtypes

#: Canonical dtype -> bytes per element.
DTYPE_BYTES: dict[str, float] = {
    "fp64": 8, "fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "fp4": 0.5, "int8": 1, "uint8": 1,
    "int16": 2, "int32": 4, "int64": 8, "uint16": 2, "uint32": 4, "uint64": 8, "bool": 1, "complex64": 8,
    "complex128": 16, "complex32": 4,
}

_DTYPE_NAMES: dict[str, str] = {}
for _canon, _names in {
    "fp64": ("double", "float64", "f64", "double_type", "c10::double", "torch.float64", "dt_double"),
    "fp32": ("float", "float32", "f32", "float_type", "c10::float", "torch.float32", "dt_float", "single"),
    "fp16": ("c10::half", "half", "float16", "f16", "half_type", "torch.float16", "dt_half"),
    "bf16": ("c10::bfloat16", "bfloat16", "bf16", "bf16_type", "torch.bfloat16", "dt_bfloat16"),
    "int8": ("signed char", "int8", "s8", "int8_type", "c10::qint8", "qint8", "torch.int8", "dt_int8"),
    "uint8": ("unsigned char", "uint8", "u8", "uint8_type", "c10::quint8", "quint8", "torch.uint8", "dt_uint8"),
    "int16": ("short", "short int", "int16", "s16", "int16_type", "torch.int16", "dt_int16"),
    "int32": ("int", "int32", "s32", "int32_type", "c10::qint32", "qint32", "torch.int32", "dt_int32"),
    "int64": ("long int", "long", "long long", "long long int", "int64", "s64", "int64_type", "torch.int64",
              "dt_int64"),
    "uint16": ("uint16", "u16", "uint16_type", "torch.uint16", "dt_uint16"),
    "uint32": ("uint32", "u32", "uint32_type", "torch.uint32", "dt_uint32"),
    "uint64": ("uint64", "u64", "uint64_type", "torch.uint64", "dt_uint64"),
    "bool": ("bool", "pred", "bool_type", "torch.bool", "dt_bool"),
    "complex64": ("c10::complex<float>", "complex64", "c64"),
    "complex128": ("c10::complex<double>", "complex128", "c128"),
    "complex32": ("c10::complex<c10::half>", "complex32"),
}.items():
    for _n in _names:
        _DTYPE_NAMES[_n] = _canon
#: fp8 formats, however they are spelled (``c10::Float8_e4m3fn``, XLA ``f8e4m3fn``, MIGraphX ``fp8e4m3fnuz_type``).
_FP8 = re.compile(r"^(?:c10::|torch\.)?(?:float8|fp8|f8)_?e[45]m[23](?:fn|fnuz|b11fnuz)?(?:_type)?$")
#: PyTorch ScalarType codes as Kineto records a ``dtype`` argument (``aten::to(..., 15, ...)`` = bfloat16).
_SCALAR_TYPES = {0: "uint8", 1: "int8", 2: "int16", 3: "int32", 4: "int64", 5: "fp16", 6: "fp32", 7: "fp64",
                 8: "complex32", 9: "complex64", 10: "complex128", 11: "bool", 12: "int8", 13: "uint8", 14: "int32",
                 15: "bf16", 23: "fp8", 24: "fp8", 25: "fp8", 26: "fp8"}


def canonical_dtype(text: str) -> str | None:
    """The canonical name of a dtype as a trace writes it (Kineto ``c10::BFloat16``/``float``/``long int``, XLA
    ``bf16``/``f32``, ONNX ``tensor(float)``, MIGraphX ``half_type``, TF ``half``), None when it is not a tensor
    dtype (``Scalar``, ``ScalarList``, ``TensorList``, ``""``) or unknown."""
    if not isinstance(text, str) or len(text) > 64:
        return None
    t = text.strip().lower()
    if t.startswith("tensor(") and t.endswith(")"):  # ONNX type strings
        t = t[7:-1].strip()
    hit = _DTYPE_NAMES.get(t)
    if hit is not None:
        return hit
    if _FP8.match(t):
        return "fp8"
    return None


# ---------------------------------------------------------------------------------------------------------------
# parsing untrusted text

#: Longest text parsed (characters); a record longer than this is refused (no model).
MAX_TEXT = 1 << 16
#: Most tensors (list entries, TensorList members included) one record may hold.
MAX_TENSORS = 4096
#: Largest dimension accepted, and most elements one tensor may have.
MAX_DIM = 1 << 40
MAX_NUMEL = 1 << 56

Shape = tuple[int, ...]


class _BadRecordError(Exception):
    """Malformed record: the op gets no model."""


def _loads(text: str | None) -> list[Any] | None:
    """A JSON list from bounded text; None when absent; _BadRecordError when malformed."""
    if text is None:
        return None
    if not isinstance(text, str) or len(text) > MAX_TEXT:
        raise _BadRecordError
    if not text.strip():
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise _BadRecordError from exc
    if not isinstance(value, list):
        raise _BadRecordError
    return value


def _dims(value: Any) -> Shape:
    if len(value) > 16:
        raise _BadRecordError
    n = 1
    for d in value:
        if type(d) is not int or not 0 <= d < MAX_DIM:
            raise _BadRecordError
        n *= d
    if n > MAX_NUMEL:
        raise _BadRecordError
    return tuple(value)


def _shapes(text: str | None) -> list[Shape | list[Shape]]:
    """``[[16,559,1024],[],[[1,2],[3,4]]]`` -> one entry per argument: a shape (``()`` for a scalar or a
    non-tensor argument) or, for a TensorList, a list of shapes."""
    value = _loads(text)
    if value is None:
        raise _BadRecordError
    out: list[Shape | list[Shape]] = []
    count = 0
    for entry in value:
        if not isinstance(entry, list):
            raise _BadRecordError
        if entry and all(isinstance(x, list) for x in entry):
            out.append([_dims(x) for x in entry])
            count += len(entry)
        else:
            out.append(_dims(entry))
            count += 1
        if count > MAX_TENSORS:
            raise _BadRecordError
    return out


def _strings(text: str | None, n: int) -> list[str]:
    """A JSON list of strings padded to ``n`` with ``""`` (Kineto's blank for an argument it did not record)."""
    value = _loads(text)
    if value is None:
        return [""] * n
    if len(value) > MAX_TENSORS:
        raise _BadRecordError
    out = [v if isinstance(v, str) and len(v) <= 256 else "" for v in value]
    return (out + [""] * n)[:max(n, len(out))]


def _output_shapes(text: str | None) -> list[Shape] | None:
    """The outputs' shapes (``[[8,32,56,56]]``), None when not recorded; _BadRecordError when malformed."""
    if text is None or not text.strip():
        return None
    out = _shapes(text)
    if any(isinstance(s, list) for s in out):
        raise _BadRecordError
    return [s for s in out if not isinstance(s, list)]


@dataclass(frozen=True)
class _Args:
    """One call's arguments: per position its shape, canonical dtype (None for non-tensors) and concrete text; the
    outputs' shapes where the record has them (None where it does not)."""

    shapes: list[Shape | list[Shape]]
    dtypes: list[str | None]
    concrete: list[str]
    outputs: list[Shape] | None = None

    def output(self, i: int) -> Shape | None:
        """Output ``i``'s shape where recorded."""
        return self.outputs[i] if self.outputs is not None and i < len(self.outputs) else None

    def tensor(self, i: int) -> tuple[Shape, str] | None:
        """Argument ``i`` when it is a tensor with a known dtype."""
        if i >= len(self.shapes) or i >= len(self.dtypes):
            return None
        shape, dtype = self.shapes[i], self.dtypes[i]
        if isinstance(shape, list) or dtype is None:
            return None
        return shape, dtype

    def tensors(self) -> list[tuple[Shape, str]]:
        """Every tensor argument (position order), TensorLists left out."""
        return [t for t in (self.tensor(i) for i in range(len(self.shapes))) if t is not None]

    def ints(self, i: int) -> list[int] | None:
        """Concrete argument ``i`` as a list of ints: ``"[2, 2]"`` -> [2, 2], ``"1"`` -> [1]."""
        text = self.concrete[i].strip() if i < len(self.concrete) else ""
        if not text or len(text) > 256:
            return None
        try:
            value = json.loads(text)
        except ValueError:
            return None
        if type(value) is int:
            value = [value]
        if not isinstance(value, list) or len(value) > 16 or any(type(v) is not int for v in value):
            return None
        return value

    def flag(self, i: int) -> bool | None:
        text = self.concrete[i].strip() if i < len(self.concrete) else ""
        return {"true": True, "false": False, "1": True, "0": False}.get(text.lower())

    def number(self, i: int) -> float | None:
        text = self.concrete[i].strip() if i < len(self.concrete) else ""
        if not text or len(text) > 64:
            return None
        try:
            value = float(text)
        except ValueError:
            return None
        return value if math.isfinite(value) else None


def _numel(shape: Sequence[int]) -> int:
    return math.prod(shape)


def _nbytes(shape: Sequence[int], dtype: str) -> float:
    return _numel(shape) * DTYPE_BYTES.get(dtype, 0)


def _broadcast(*shapes: Shape) -> Shape:
    """NumPy/PyTorch broadcasting; _BadRecordError when the shapes do not broadcast."""
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for k in range(rank):
        sizes = {s[len(s) - rank + k] for s in shapes if len(s) - rank + k >= 0} - {1}
        if len(sizes) > 1:
            raise _BadRecordError
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def _need(value: Any) -> Any:
    if value is None:
        raise _BadRecordError
    return value


# ---------------------------------------------------------------------------------------------------------------
# matmul: 2·M·N·K·batch


def _mm_work(a: Shape, b: Shape, dtype: str, extra_bytes: float = 0.0, out_dtype: str | None = None,
             compute: str | None = None) -> Work:
    """``a [..., M, K] @ b [..., K, N]`` with the batch dims broadcast: flops 2·M·N·K·batch; bytes a + b + out (+
    ``extra_bytes``: a bias or scales read). 1-D operands as torch.matmul: ``[K]`` is a row (left) or column (right)."""
    a2 = (1, *a) if len(a) == 1 else a
    b2 = (*b, 1) if len(b) == 1 else b
    if len(a2) < 2 or len(b2) < 2 or a2[-1] != b2[-2]:
        raise _BadRecordError
    m, k, n = a2[-2], a2[-1], b2[-1]
    batch = _broadcast(a2[:-2], b2[:-2])
    out: list[int] = [*batch, m, n]
    if len(a) == 1:
        out.pop(-2)
    if len(b) == 1:
        out.pop()
    flops = 2.0 * m * n * k * _numel(batch)
    bytes_ = _nbytes(a, dtype) + _nbytes(b, dtype) + _nbytes(out, out_dtype or dtype) + extra_bytes
    return Work(flops, bytes_, compute or dtype, "matmul")


def _matmul(name: str, x: _Args) -> Work:
    """The matrix products. mm/bmm/matmul: ``self @ other``; addmm/baddbmm/addbmm: ``beta·self + alpha·(m1 @ m2)``,
    the bias read unless beta is 0 (its add is not counted as flops: the rows' FLOPs stay 2·M·N·K·batch);
    linear: ``input [..., K] @ weight[N, K]ᵀ (+ bias)``; _scaled_mm: fp8 inputs, scales read, output at
    ``out_dtype``; _int_mm: int8 in, int32 out."""
    if name in ("mm", "bmm", "matmul", "mv", "dot", "vdot"):
        a, b = _need(x.tensor(0)), _need(x.tensor(1))
        if (name == "mm" and (len(a[0]) != 2 or len(b[0]) != 2)) or (name == "bmm" and (
                len(a[0]) != 3 or len(b[0]) != 3 or a[0][0] != b[0][0])):
            raise _BadRecordError
        return _mm_work(a[0], b[0], a[1])
    if name in ("addmm", "baddbmm", "addbmm", "_addmm_activation"):
        bias, a, b = x.tensor(0), _need(x.tensor(1)), _need(x.tensor(2))
        beta = x.number(3)
        extra = _nbytes(*bias) if bias is not None and beta != 0 else 0.0
        if name == "addbmm":  # sum over the batch: out [M, N]
            if len(a[0]) != 3 or len(b[0]) != 3 or a[0][0] != b[0][0] or a[0][2] != b[0][1]:
                raise _BadRecordError
            bt, m, k = a[0]
            n = b[0][2]
            return Work(2.0 * bt * m * n * k, _nbytes(a[0], a[1]) + _nbytes(b[0], a[1]) + m * n *
                        DTYPE_BYTES[a[1]] + extra, a[1], "matmul")
        return _mm_work(a[0], b[0], a[1], extra)
    if name == "linear":
        a, w, bias = _need(x.tensor(0)), _need(x.tensor(1)), x.tensor(2)
        if len(w[0]) not in (1, 2):
            raise _BadRecordError
        wt = w[0] if len(w[0]) == 1 else (w[0][1], w[0][0])
        return _mm_work(a[0], wt, a[1], _nbytes(*bias) if bias is not None else 0.0)
    if name in ("_scaled_mm", "_scaled_grouped_mm"):
        if name != "_scaled_mm":
            raise _BadRecordError
        a, b = _need(x.tensor(0)), _need(x.tensor(1))
        extra = sum(_nbytes(*t) for t in (x.tensor(i) for i in (2, 3, 4, 5)) if t is not None)
        code = x.ints(6)
        out_dtype = _SCALAR_TYPES.get(code[0]) if code and len(code) == 1 else None
        return _mm_work(a[0], b[0], a[1], extra, out_dtype or a[1], a[1])
    if name == "_int_mm":
        a, b = _need(x.tensor(0)), _need(x.tensor(1))
        return _mm_work(a[0], b[0], a[1], out_dtype="int32")
    if name == "einsum":
        return _einsum(x)
    raise _BadRecordError


def _transposable(a: Shape, b: Shape, dtype: str, extra: float = 0.0, out: Shape | None = None) -> Work:
    """A product whose transpose flags the record does not carry (ONNX ``Gemm`` transA/transB, TF ``MatMul``
    transpose_a/b, ``BatchMatMul`` adj_x/adj_y): every reading whose inner dimensions agree (and, where the record
    has the output's shape ``out``, whose product has that shape) is tried, and the op is modeled only when all of
    them give the same work (always so when the operand shapes pin the transposes)."""
    if len(a) < 2 or len(b) < 2:
        raise _BadRecordError
    found = set()
    for ta in (False, True):
        for tb in (False, True):
            a2 = (*a[:-2], a[-1], a[-2]) if ta else a
            b2 = (*b[:-2], b[-1], b[-2]) if tb else b
            try:
                if out is not None and (*_broadcast(a2[:-2], b2[:-2]), a2[-2], b2[-1]) != out:
                    continue
                found.add(_mm_work(a2, b2, dtype, extra))
            except _BadRecordError:
                continue
    if len(found) != 1:
        raise _BadRecordError
    return found.pop()


def _onnx_product(name: str, x: _Args) -> Work:
    """ONNX ``Gemm``/``MatMul`` (and ORT's ``FusedMatMul``, TF's ``MatMul``/``BatchMatMul*``/``_FusedMatMul``, whose
    further inputs, the bias and the fused ops' arguments, are read), whose transposes are attributes the record
    does not carry (see :func:`_transposable`). Without the output's shape the operands decide alone. With it (ONNX
    Runtime's records) the readings must also give that output, and a prepacked operand is understood: ORT leaves
    out of its record the constant B that a kernel packed ahead (``input_type_shape`` lists only the inputs still
    held), so

    * ``Gemm(A, [B], [C]) -> Y [M, N]``: A is ``[M, K]`` or ``[K, M]``; a second tensor is B (``[K, N]``/``[N, K]``)
      or, when it cannot be or B is missing, the bias C (broadcast to ``[M, N]``); a missing B is read once as
      ``K x N`` at A's dtype. Every reading that fits is tried; the op is modeled only when they all agree;
    * ``MatMul(A) -> Y [..., M, N]`` with B missing: A ``[..., M, K]``, B the packed 2-D ``[K, N]``.

    flops 2·M·N·K·batch; bytes A + B + C + Y (the bias add and Gemm's alpha/beta not counted as flops)."""
    tensors = x.tensors()
    y = x.output(0)
    if not tensors or (name == "Gemm" and len(tensors) > 3):
        raise _BadRecordError
    (a, dtype) = tensors[0]
    extra = sum(_nbytes(*t) for t in tensors[2:]) if name in _WITH_EXTRA else 0.0
    if y is None:
        if len(tensors) < 2:
            raise _BadRecordError
        return _transposable(a, tensors[1][0], dtype, extra)
    if name != "Gemm":
        if len(tensors) >= 2:
            return _transposable(a, tensors[1][0], dtype, out=y)
        if len(a) < 2 or len(y) != len(a) or y[:-1] != a[:-1]:  # the packed B is [K, N]
            raise _BadRecordError
        k, n = a[-1], y[-1]
        return Work(2.0 * _numel(a[:-1]) * n * k, _nbytes(a, dtype) + (k * n + _numel(y)) * DTYPE_BYTES[dtype], dtype,
                    "matmul")
    if len(a) != 2 or len(y) != 2:
        raise _BadRecordError
    m, n = y
    ks = {k for k, rows in ((a[1], a[0]), (a[0], a[1])) if rows == m}
    found = set()
    readings = [(tensors[1] if len(tensors) > 1 else None, tensors[2] if len(tensors) > 2 else None)]
    if len(tensors) == 2:
        readings.append((None, tensors[1]))  # B packed: the second tensor is the bias
    for b, c in readings:
        for k in ks:
            if b is not None and b[0] not in ((k, n), (n, k)):
                continue
            if c is not None and (len(c[0]) > 2 or any(d not in (1, t) for d, t in zip(c[0][::-1], (n, m)))):
                continue
            b_bytes = _nbytes(*b) if b is not None else k * n * DTYPE_BYTES[dtype]
            c_bytes = _nbytes(*c) if c is not None else 0.0
            found.add(Work(2.0 * m * n * k, _nbytes(a, dtype) + b_bytes + c_bytes + m * n * DTYPE_BYTES[dtype],
                           dtype, "matmul"))
    if len(found) != 1:
        raise _BadRecordError
    return found.pop()


_EINSUM = re.compile(r"^\s*([a-zA-Z]+)\s*,\s*([a-zA-Z]+)\s*->\s*([a-zA-Z]*)\s*$")


def _einsum(x: _Args) -> Work:
    """``einsum(equation, [a, b])`` where Kineto recorded the equation (often it does not: no model): flops 2·(the
    product of every index's size) when some index is contracted; two operands, no ellipsis."""
    eq = x.concrete[0] if x.concrete else ""
    m = _EINSUM.match(eq)
    operands = x.shapes[1] if len(x.shapes) > 1 else None
    dtype = x.dtypes[1] if len(x.dtypes) > 1 else None
    if m is None or not isinstance(operands, list) or len(operands) != 2 or dtype is None:
        raise _BadRecordError
    sizes: dict[str, int] = {}
    for letters, shape in zip(m.group(1, 2), operands, strict=True):
        if len(letters) != len(shape):
            raise _BadRecordError
        for c, d in zip(letters, shape, strict=True):
            if sizes.setdefault(c, d) != d and d != 1 and sizes[c] != 1:
                raise _BadRecordError
            sizes[c] = max(sizes[c], d)
    out = m.group(3)
    if any(c not in sizes for c in out) or not set(sizes) - set(out):
        raise _BadRecordError
    flops = 2.0 * math.prod(sizes.values())
    bytes_ = sum(_nbytes(s, dtype) for s in operands) + _nbytes([sizes[c] for c in out], dtype)
    return Work(flops, bytes_, dtype, "matmul")


# ---------------------------------------------------------------------------------------------------------------
# convolution: 2·N·(C_in/groups)·prod(kernel)·C_out·prod(out spatial)

#: Where each convolution op keeps (stride, padding, dilation, groups, transposed, output_padding, allow_tf32):
#: positions in its argument list (None: the op has no such argument).
_CONV_ARGS: dict[str, tuple[int | None, ...]] = {
    #                           stride pad dil groups transposed out_pad tf32
    "conv1d": (3, 4, 5, 6, None, None, None),
    "conv2d": (3, 4, 5, 6, None, None, None),
    "conv3d": (3, 4, 5, 6, None, None, None),
    "convolution": (3, 4, 5, 8, 6, 7, None),
    "_convolution": (3, 4, 5, 8, 6, 7, 12),
    "cudnn_convolution": (3, 2, 4, 5, None, None, 8),
    "miopen_convolution": (4, 3, 5, 6, None, None, None),
    "miopen_depthwise_convolution": (4, 3, 5, 6, None, None, None),
    "mkldnn_convolution": (4, 3, 5, 6, None, None, None),
    "cudnn_convolution_relu": (3, 4, 5, 6, None, None, None),
    "_conv_depthwise2d": (4, 5, 6, None, None, None, None),
    "conv_transpose1d": (3, 4, 7, 6, True, 5, None),
    "conv_transpose2d": (3, 4, 7, 6, True, 5, None),
    "conv_transpose3d": (3, 4, 7, 6, True, 5, None),
    "cudnn_convolution_transpose": (4, 2, 5, 6, True, 3, 9),
    "miopen_convolution_transpose": (5, 3, 6, 7, True, 4, None),
}


def _spatial(x: _Args, at: int | None, rank: int, default: int | None) -> tuple[int, ...]:
    """A per-dimension conv parameter (``"[2, 2]"``; one value for every dimension), the default where the op has
    no such argument; _BadRecordError where it has one that was not recorded (stride 1, padding 0 is not assumed)."""
    if at is None:
        return (_need(default),) * rank
    text = x.concrete[at].strip().strip('"').lower() if at < len(x.concrete) else ""
    if text == "valid" and default == 0:
        return (0,) * rank
    values = _need(x.ints(at))
    if len(values) == 1:
        values = values * rank
    if len(values) != rank:
        raise _BadRecordError
    return tuple(values)


def _conv_flops(n: int, c_out: int, c_in_per_group: int, kernel: Shape, out: Shape) -> float:
    return 2.0 * n * c_out * c_in_per_group * _numel(kernel) * _numel(out)


def _conv(name: str, x: _Args) -> Work:
    """Forward convolution, grouped/depthwise (groups = C_in) and transposed:

    * forward: flops 2·N·C_out·(C_in/groups)·prod(kernel)·prod(out), out = ⌊(in + 2·pad - dil·(k-1) - 1)/stride⌋ + 1
      from the recorded stride/padding/dilation (an op that did not record them has no model: stride 1, padding 0
      is not assumed); padding ``"same"`` keeps the input size;
    * transposed (weight [C_in, C_out/groups, k...]): flops 2·N·C_in·(C_out/groups)·prod(kernel)·prod(in) (each
      input element scattered through the kernel), out = (in-1)·stride - 2·pad + dil·(k-1) + output_padding + 1;
    * bytes: input + weight + bias + output; the bias add is not counted as flops.
    """
    stride_at, pad_at, dil_at, groups_at, transposed_at, out_pad_at, tf32_at = _CONV_ARGS[name]
    inp, w = _need(x.tensor(0)), _need(x.tensor(1))
    (ishape, dtype), (wshape, _) = inp, w
    rank = len(wshape) - 2
    if rank < 1 or len(ishape) not in (rank + 1, rank + 2):
        raise _BadRecordError
    if len(ishape) == rank + 1:  # unbatched input [C, spatial...]
        ishape = (1, *ishape)
    n, c_in, in_sp = ishape[0], ishape[1], ishape[2:]
    if transposed_at is True:
        transposed = True
    elif transposed_at is None:
        transposed = False
    else:
        transposed = _need(x.flag(transposed_at))
    kernel = wshape[2:]
    if name == "_conv_depthwise2d":  # kernel_size at 2, stride 4, padding 5, dilation 6; groups = C_in
        groups = c_in
    elif groups_at is None:
        groups = 1
    else:
        groups_list = x.ints(groups_at)
        groups = groups_list[0] if groups_list and len(groups_list) == 1 else (
            0 if transposed else c_in // wshape[1] if wshape[1] else 0)
    if groups <= 0:
        raise _BadRecordError
    stride = _spatial(x, stride_at, rank, None)
    text = x.concrete[pad_at].strip().strip('"').lower() if pad_at is not None and pad_at < len(x.concrete) else ""
    dilation = _spatial(x, dil_at, rank, 1)
    if any(s <= 0 for s in stride) or any(d <= 0 for d in dilation):
        raise _BadRecordError
    if text == "same":
        out_sp = in_sp
    else:
        pad = _spatial(x, pad_at, rank, 0)
        if transposed:
            out_pad = _spatial(x, out_pad_at, rank, 0)
            out_sp = tuple((i - 1) * s - 2 * p + d * (k - 1) + o + 1
                           for i, s, p, d, k, o in zip(in_sp, stride, pad, dilation, kernel, out_pad, strict=True))
        else:
            out_sp = tuple((i + 2 * p - d * (k - 1) - 1) // s + 1
                           for i, s, p, d, k in zip(in_sp, stride, pad, dilation, kernel, strict=True))
    if any(o <= 0 for o in out_sp):
        raise _BadRecordError
    if transposed:
        if wshape[0] != c_in:
            raise _BadRecordError
        c_out = wshape[1] * groups
        flops = _conv_flops(n, c_in, wshape[1], kernel, in_sp)
    else:
        if wshape[1] * groups != c_in or wshape[0] % groups:
            raise _BadRecordError
        c_out = wshape[0]
        flops = _conv_flops(n, c_out, wshape[1], kernel, out_sp)
    bias = x.tensor(2) if name not in ("cudnn_convolution", "cudnn_convolution_transpose") else None
    if name == "_conv_depthwise2d":
        bias = x.tensor(3)
    bytes_ = (_nbytes(*inp) + _nbytes(*w) + (_nbytes(*bias) if bias is not None else 0.0)
              + _nbytes((n, c_out, *out_sp), dtype))
    compute = "tf32" if dtype == "fp32" and tf32_at is not None and x.flag(tf32_at) else dtype
    return Work(flops, bytes_, compute, "conv")


def _conv_backward(name: str, x: _Args) -> Work:
    """``convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
    output_padding, groups, output_mask)`` (and the older ``cudnn_convolution_backward(input, grad_output, weight,
    padding, stride, dilation, groups, ..., output_mask[2])``, ``miopen_convolution_backward``): grad input and
    grad weight each cost the forward's flops, grad bias one
    add per grad_output element, each counted when ``output_mask`` asks for it (all three when not recorded). The
    output sizes come from grad_output itself. Bytes: grad_output and the tensors each gradient reads (weight for
    grad input, input for grad weight) read once, each asked gradient written once."""
    legacy = name != "convolution_backward"  # cudnn_/miopen_convolution_backward(self, grad_output, weight, ...)
    go, inp, w = _need(x.tensor(1 if legacy else 0)), _need(x.tensor(0 if legacy else 1)), _need(x.tensor(2))
    (gshape, dtype), (ishape, _), (wshape, _) = go, inp, w
    rank = len(wshape) - 2
    if rank < 1 or len(ishape) != rank + 2 or len(gshape) != rank + 2 or gshape[0] != ishape[0]:
        raise _BadRecordError
    transposed = False if legacy else x.flag(7) or False
    groups_list = x.ints(6 if legacy else 9)
    mask_at = {"convolution_backward": 10, "cudnn_convolution_backward": 10}.get(name, 9)
    mask_text = x.concrete[mask_at] if len(x.concrete) > mask_at else ""
    mask = [m.strip().lower() == "true" for m in mask_text.strip("[] ").split(",")] if mask_text.strip() else []
    if legacy and len(mask) == 2:
        mask.append(False)  # the legacy ops have no grad bias
    if len(mask) != 3:
        mask = [True, True, not legacy]
    n, kernel = ishape[0], wshape[2:]
    if transposed:  # forward was input [N, C_in, in...] -> grad_output [N, C_out, out...], weight [C_in, C_out/g, k]
        groups = _need(groups_list)[0] if groups_list and len(groups_list) == 1 else 0
        if groups <= 0 or wshape[0] != ishape[1] or wshape[1] * groups != gshape[1]:
            raise _BadRecordError
        fwd = _conv_flops(n, ishape[1], wshape[1], kernel, ishape[2:])
    else:
        groups = groups_list[0] if groups_list and len(groups_list) == 1 else (
            ishape[1] // wshape[1] if wshape[1] else 0)
        if groups <= 0 or wshape[1] * groups != ishape[1] or wshape[0] != gshape[1]:
            raise _BadRecordError
        fwd = _conv_flops(n, gshape[1], wshape[1], kernel, gshape[2:])
    flops = fwd * (mask[0] + mask[1]) + (_numel(gshape) if mask[2] else 0)
    bytes_ = _nbytes(gshape, dtype)
    if mask[0]:
        bytes_ += _nbytes(wshape, dtype) + _nbytes(ishape, dtype)
    if mask[1]:
        bytes_ += _nbytes(ishape, dtype) + _nbytes(wshape, dtype)
    if mask[2]:
        bytes_ += gshape[1] * DTYPE_BYTES[dtype]
    return Work(flops, bytes_, dtype, "conv")


#: ONNX convolutions (ONNX Runtime's ``FusedConv``: a Conv with its activation and an optional added input Z).
_ONNX_CONV = frozenset({"Conv", "FusedConv", "ConvTranspose"})


def _onnx_conv(name: str, x: _Args) -> Work:
    """ONNX ``Conv(X [N, C, in...], W [M, C/group, k...], [B])`` and ``ConvTranspose(X, W [C, M/group, k...], [B])``
    -> ``Y [N, M, out...]``. The record has no attributes (strides, pads, dilations, group): the output's shape
    does the work of stride and padding, and the group count follows from the shapes, C / W[1] for Conv and
    M / W[1] for ConvTranspose. So there is a model only where the output's shape is recorded (ONNX Runtime's
    ``output_type_shape``):

    * Conv: flops 2·N·M·(C/group)·prod(k)·prod(out) (depthwise: group = C, C/group = 1);
    * ConvTranspose: flops 2·N·C·(M/group)·prod(k)·prod(in) (each input element scattered through the kernel);
    * bytes: every input tensor (X, W, B, FusedConv's Z) read + Y written; the bias add and a fused activation are
      not counted as flops.
    """
    y = _need(x.output(0))
    tensors = x.tensors()
    inp, w = _need(x.tensor(0)), _need(x.tensor(1))
    (xs, dtype), (ws, _) = inp, w
    rank = len(ws) - 2
    if rank < 1 or len(xs) != rank + 2 or len(y) != rank + 2 or y[0] != xs[0]:
        raise _BadRecordError
    n, c, m, kernel = xs[0], xs[1], y[1], ws[2:]
    if name == "ConvTranspose":
        if ws[0] != c or ws[1] <= 0 or m % ws[1] or c % (m // ws[1] or 1) or m == 0:
            raise _BadRecordError
        flops = _conv_flops(n, c, ws[1], kernel, xs[2:])
    else:
        if ws[0] != m or ws[1] <= 0 or c % ws[1] or m % (c // ws[1] or 1) or c == 0:
            raise _BadRecordError
        flops = _conv_flops(n, m, ws[1], kernel, y[2:])
    return Work(flops, sum(_nbytes(*t) for t in tensors) + _nbytes(y, dtype), dtype, "conv")


# ---------------------------------------------------------------------------------------------------------------
# attention: 4·B·H·Lq·Lk·D forward (QKᵀ and PV), 2.5x that backward

#: op -> (positions of q, k, v, out, grad_out, layout "bhld"/"blhd", position of is_causal (or, negative,
#: -1-position of xformers' custom_mask_type), backward?)
_ATTENTION: dict[str, tuple[int, int, int, int | None, int | None, str, int | None, bool]] = {
    "scaled_dot_product_attention": (0, 1, 2, None, None, "bhld", 5, False),
    "_scaled_dot_product_flash_attention": (0, 1, 2, None, None, "bhld", 4, False),
    "_scaled_dot_product_flash_attention_for_cpu": (0, 1, 2, None, None, "bhld", 4, False),
    "_scaled_dot_product_efficient_attention": (0, 1, 2, None, None, "bhld", 6, False),
    "_scaled_dot_product_cudnn_attention": (0, 1, 2, None, None, "bhld", 6, False),
    "_flash_attention_forward": (0, 1, 2, None, None, "blhd", 8, False),
    "_efficient_attention_forward": (0, 1, 2, None, None, "blhd", -1 - 9, False),
    "_scaled_dot_product_flash_attention_backward": (1, 2, 3, 4, 0, "bhld", 11, True),
    "_scaled_dot_product_efficient_attention_backward": (1, 2, 3, 5, 0, "bhld", 11, True),
    "_scaled_dot_product_cudnn_attention_backward": (1, 2, 3, 4, 0, "bhld", 14, True),
    "_flash_attention_backward": (1, 2, 3, 4, 0, "blhd", 11, True),
    "_efficient_attention_backward": (1, 2, 3, 5, 0, "blhd", -1 - 14, True),
}
#: Backward FLOPs over forward FLOPs: five matmuls (recomputed QKᵀ, dV, dP, dQ, dK) against the forward's two.
ATTENTION_BACKWARD_RATIO = 2.5


def _causal_pairs(lq: int, lk: int) -> int:
    """Query/key pairs a causal mask keeps, aligned at the top left (PyTorch's ``is_causal``): Σᵢ min(i+1, Lk)."""
    full = min(lq, lk)  # rows i < lk keep i+1 keys; rows at or past lk keep all lk
    return full * (full + 1) // 2 + max(lq - lk, 0) * lk


def _attention(name: str, x: _Args) -> Work:
    """Scaled-dot-product attention, q [B, H, Lq, D], k [B, Hk, Lk, D], v [B, Hk, Lk, Dv] (flash/xformers ops:
    [B, L, H, D]); grouped-query k/v (Hk < H) cost the query heads' work.

    * forward flops 2·B·H·Lq·Lk·(D + Dv) (= 4·B·H·Lq·Lk·D), softmax and scaling not counted;
    * causal: the pairs the mask keeps, Lq·(Lq+1)/2 for Lq = Lk (about half), aligned at the top left otherwise;
    * backward flops = 2.5 x forward (see ATTENTION_BACKWARD_RATIO);
    * bytes forward: q, k, v (and a mask/bias) read, out written; backward: q, k, v, out, grad_out read, grad q/k/v
      written (the per-row logsumexp left out);
    * variable-length calls (3-D packed q with cu_seqlens) have no model: their work depends on each sequence.
    """
    qi, ki, vi, _oi, _gi, layout, causal_at, backward = _ATTENTION[name]
    q, k, v = _need(x.tensor(qi)), _need(x.tensor(ki)), _need(x.tensor(vi))
    if len(q[0]) != 4 or len(k[0]) != 4 or len(v[0]) != 4:
        raise _BadRecordError
    if layout == "bhld":
        (b, h, lq, d), (bk, hk, lk, dk), (bv, hv, lv, dv) = q[0], k[0], v[0]
    else:
        (b, lq, h, d), (bk, lk, hk, dk), (bv, lv, hv, dv) = q[0], k[0], v[0]
    if b != bk or b != bv or d != dk or lk != lv or hk != hv or hk == 0 or h % hk:
        raise _BadRecordError
    causal: bool
    if causal_at is None:
        causal = False
    elif causal_at >= 0:
        causal = _need(x.flag(causal_at))
    else:
        mask_type = _need(x.ints(-1 - causal_at))
        causal = mask_type[0] != 0
    pairs = _causal_pairs(lq, lk) if causal else lq * lk
    flops = 2.0 * b * h * pairs * (d + dv)
    out_bytes = b * h * lq * dv * DTYPE_BYTES[q[1]]
    qkv = _nbytes(*q) + _nbytes(*k) + _nbytes(*v)
    if not backward:
        mask = x.tensor(3) if name in ("scaled_dot_product_attention", "_scaled_dot_product_efficient_attention",
                                       "_scaled_dot_product_cudnn_attention", "_efficient_attention_forward") else None
        return Work(flops, qkv + out_bytes + (_nbytes(*mask) if mask is not None else 0.0), q[1], "attention")
    # reads q, k, v, out, grad_out; writes grad q, k, v
    return Work(flops * ATTENTION_BACKWARD_RATIO, 2 * qkv + 2 * out_bytes, q[1], "attention")


# ---------------------------------------------------------------------------------------------------------------
# elementwise: elements x ops per element

#: FLOPs per output element. 1 for arithmetic, comparisons, selects and the unary math functions (exp, tanh, ...
#: count one each, as FLOP counters do); composite activations count their arithmetic:
#: sigmoid 1/(1+e^-x) = 4 (neg, exp, add, div), silu x·sigmoid(x) = 5, gelu 8 (tanh form: x³, ·0.0447, +x,
#: ·√(2/π), tanh, +1, ·x, ·0.5; the erf form is 5), softplus 3, elu 3, mish 7, hardswish 4, hardsigmoid 3,
#: addcmul/addcdiv/lerp 3; backwards: threshold/relu 1, hardtanh 2, sigmoid/tanh 3, silu 7, gelu 13, elu 3.
#: fill/zero/masked_fill/where write without arithmetic: counted 1 (selects).
ELEMENTWISE_FLOPS: dict[str, float] = {
    **dict.fromkeys((
        "add", "sub", "mul", "div", "rsub", "neg", "abs", "relu", "relu6", "threshold", "maximum", "minimum",
        "clamp", "clamp_min", "clamp_max", "clip", "hardtanh", "eq", "ne", "lt", "le", "gt", "ge", "where",
        "masked_fill", "pow", "sqrt", "rsqrt", "exp", "exp2", "expm1", "log", "log2", "log1p", "sin", "cos", "tanh",
        "erf", "erfinv", "reciprocal", "square", "sign", "floor", "ceil", "round", "trunc", "bitwise_and",
        "bitwise_or", "bitwise_not", "logical_and", "logical_or", "logical_not", "fmod", "remainder", "floor_divide",
        "leaky_relu", "fill", "zero", "threshold_backward", "isnan", "isinf", "nan_to_num", "dropout",
        "native_dropout", "_masked_scale", "bernoulli", "uniform", "normal", "add_relu", "xlogy", "atan", "atan2",
    ), 1.0),
    "sigmoid": 4.0, "silu": 5.0, "gelu": 8.0, "softplus": 3.0, "elu": 3.0, "celu": 3.0, "selu": 3.0, "mish": 7.0,
    "hardswish": 4.0, "hardsigmoid": 3.0, "addcmul": 3.0, "addcdiv": 3.0, "lerp": 3.0, "logit": 3.0,
    "hardtanh_backward": 2.0, "sigmoid_backward": 3.0, "tanh_backward": 3.0, "silu_backward": 7.0,
    "gelu_backward": 13.0, "elu_backward": 3.0, "leaky_relu_backward": 2.0, "hardswish_backward": 4.0,
    "hardsigmoid_backward": 2.0, "softplus_backward": 5.0, "mish_backward": 10.0,
}
#: Ops whose result is bool.
_COMPARISONS = frozenset({"eq", "ne", "lt", "le", "gt", "ge", "isnan", "isinf", "logical_and", "logical_or",
                          "logical_not"})
_RANK = {"bool": 0, "uint8": 1, "int8": 1, "int16": 2, "uint16": 2, "int32": 3, "uint32": 3, "int64": 4,
         "uint64": 4, "fp8": 5, "fp16": 6, "bf16": 6, "fp32": 7, "tf32": 7, "fp64": 8, "complex32": 9, "complex64": 10,
         "complex128": 11}


def _elementwise(name: str, x: _Args) -> Work:
    """Pointwise ops: the output has the broadcast shape of the tensor arguments; flops = output elements x
    ELEMENTWISE_FLOPS[op]; bytes = every tensor argument read once + the output written once (an in-place op's
    output is its first argument, written back). The output dtype is the widest input's (bool for comparisons);
    scalar arguments (``aten::mul(x, 2.0)``) cost nothing."""
    tensors = x.tensors()
    if not tensors:
        raise _BadRecordError
    out_shape = _broadcast(*(s for s, _ in tensors))
    # PyTorch's promotion: a 0-dim argument (how Kineto records a Python number: ``[]``, ``"double"``) does not
    # widen the dtype of the dimensioned ones; a where/masked_fill condition is bool, its values are not
    ranked = [d for s, d in tensors if s and not (name in ("where", "masked_fill") and d == "bool")] or [
        d for _, d in tensors]
    dtype = max(ranked, key=lambda d: _RANK.get(d, 0))
    out_dtype = "bool" if name in _COMPARISONS else dtype
    n = _numel(out_shape)
    read = sum(_nbytes(s, d) for s, d in tensors)
    if name in ("fill", "zero", "uniform", "normal", "bernoulli") and len(tensors) == 1:
        read = 0.0  # overwrites its argument without reading it
    return Work(n * ELEMENTWISE_FLOPS[name], read + _nbytes(out_shape, out_dtype), dtype, "elementwise")


def _add_n(name: str, x: _Args) -> Work:
    """TF ``AddN(t_1, ..., t_n)``, tensors of one shape: flops (n - 1) adds per element; bytes the n tensors read and
    the sum written."""
    tensors = x.tensors()
    if not tensors or any(s != tensors[0][0] for s, _ in tensors):
        raise _BadRecordError
    shape, dtype = tensors[0]
    return Work(float((len(tensors) - 1) * _numel(shape)), (len(tensors) + 1) * _nbytes(shape, dtype), dtype,
                "elementwise")


# ---------------------------------------------------------------------------------------------------------------
# normalisations

#: FLOPs per element: statistics 4 (mean: add; variance: sub, square, add), normalise 2 (sub mean, x rstd),
#: affine 2 (x weight, + bias) = 8 with weight and bias; RMS norm: square, add, x rrms, x weight = 4; batch norm in
#: inference (running statistics, no statistics pass) 4. Backwards: twice their forward.
NORM_FLOPS = {"layer_norm": 8.0, "group_norm": 8.0, "batch_norm_train": 8.0, "batch_norm_eval": 4.0,
              "rms_norm": 4.0, "instance_norm": 8.0}
NORM_BACKWARD_RATIO = 2.0

#: op -> (kind, position of the weight, position of bias, position of the training flag (batch norm), backward?)
_NORMS: dict[str, tuple[str, int | None, int | None, int | None, bool]] = {
    "layer_norm": ("layer_norm", 2, 3, None, False),
    "native_layer_norm": ("layer_norm", 2, 3, None, False),
    "group_norm": ("group_norm", 2, 3, None, False),
    "native_group_norm": ("group_norm", 1, 2, None, False),
    "batch_norm": ("batch_norm", 1, 2, 5, False),
    "_batch_norm_impl_index": ("batch_norm", 1, 2, 5, False),
    "native_batch_norm": ("batch_norm", 1, 2, 5, False),
    "_native_batch_norm_legit": ("batch_norm", 1, 2, 5, False),
    "_native_batch_norm_legit_no_training": ("batch_norm_eval", 1, 2, None, False),
    "cudnn_batch_norm": ("batch_norm", 1, 2, 5, False),
    "miopen_batch_norm": ("batch_norm", 1, 2, 5, False),
    "instance_norm": ("instance_norm", 1, 2, None, False),
    "rms_norm": ("rms_norm", 2, None, None, False),
    "_fused_rms_norm": ("rms_norm", 2, None, None, False),
    "native_layer_norm_backward": ("layer_norm", 5, 6, None, True),
    "native_group_norm_backward": ("group_norm", 4, None, None, True),
    "native_batch_norm_backward": ("batch_norm_train", 2, None, None, True),
    "cudnn_batch_norm_backward": ("batch_norm_train", 2, None, None, True),
    "miopen_batch_norm_backward": ("batch_norm_train", 2, None, None, True),
}


def _norm(name: str, x: _Args) -> Work:
    """Normalisations: flops = elements x NORM_FLOPS (the affine part only where a weight is given); bytes = input
    read + output written + weight and bias read (the per-row statistics, at most 1/D of it, left out). Backward
    (input at position 1 after grad_out): 2x the forward's flops; reads grad_out, input, weight, writes grad input
    and, with a weight, grad weight and grad bias."""
    kind, wi, bi, train_at, backward = _NORMS[name]
    src = _need(x.tensor(1 if backward else 0))
    shape, dtype = src
    weight = x.tensor(wi) if wi is not None else None
    bias = x.tensor(bi) if bi is not None else None
    if kind == "batch_norm":
        training = x.flag(train_at) if train_at is not None else None
        kind = "batch_norm_eval" if training is False else "batch_norm_train"
    per = NORM_FLOPS[kind] - (2.0 if weight is None and kind not in ("rms_norm", "batch_norm_eval") else 0.0)
    if kind == "rms_norm" and weight is None:
        per -= 1.0
    n = _numel(shape)
    params = (_nbytes(*weight) if weight else 0.0) + (_nbytes(*bias) if bias else 0.0)
    if not backward:
        return Work(n * per, 2 * _nbytes(shape, dtype) + params, dtype, "norm")
    grad = _need(x.tensor(0))
    if grad[0] != shape:
        raise _BadRecordError
    grads_of_params = 2 * _nbytes(*weight) if weight else 0.0  # grad weight and grad bias written
    return Work(n * per * NORM_BACKWARD_RATIO, 3 * _nbytes(shape, dtype) + params + grads_of_params, dtype, "norm")


#: ONNX normalisations (and ONNX Runtime's fused ones): op -> (FLOPs per element before the learned parameters,
#: how many inputs of X's shape are added to X first, the most parameter tensors the op takes). Layer norm:
#: statistics 4 + normalise 2; RMS norm (``SimplifiedLayerNormalization``): square, add, x rrms = 3; instance norm:
#: as layer norm; batch norm in inference: sub the running mean, x rstd = 2 (in training 6: the statistics first).
#: Each learned parameter tensor (scale, bias) then counts 1 per element, and the ``Skip*`` ops' skip and bias adds
#: 1 each.
_ONNX_NORMS: dict[str, tuple[float, int, int]] = {
    "LayerNormalization": (6.0, 0, 2), "InstanceNormalization": (6.0, 0, 2),
    "SimplifiedLayerNormalization": (3.0, 0, 1), "BatchNormalization": (2.0, 0, 4),
    "SkipLayerNormalization": (6.0, 1, 3), "SkipSimplifiedLayerNormalization": (3.0, 1, 2),
}


def _onnx_norm(name: str, x: _Args) -> Work:
    """ONNX normalisations, whose optional inputs the record leaves out rather than marking (ONNX Runtime lists only
    the tensors given), so they are told apart by shape, not position: the input X comes first, then (``Skip*``)
    the skip of X's shape, then the parameters (any further tensor smaller than X: scale, bias, for batch norm the
    running mean and variance too).

    * flops per element of X: the op's base (see :data:`_ONNX_NORMS`) + 1 per parameter tensor beyond batch norm's
      statistics (scale x, bias +), + 1 for the skip add and + 1 for each further tensor of a ``Skip*`` op past
      gamma and beta (its bias): ``LayerNormalization(X, scale, bias)`` = 8, as ``aten::layer_norm``;
      ``BatchNormalization`` in inference (one output) 4, in training (three outputs: Y, running mean, running
      variance; ``training_mode=1``) 8 (the ONNX default, inference, where the outputs are not recorded);
    * bytes: every input tensor read + Y written (+ a ``Skip*`` op's recorded fourth output, the sum X + skip (+
      bias), written; batch norm's recorded running statistics written); the per-row mean and inverse deviation
      outputs (at most 1/D of Y) left out, as for the aten norms.
    """
    base, skips, most = _ONNX_NORMS[name]
    tensors = x.tensors()
    shape, dtype = _need(x.tensor(0))
    n = _numel(shape)
    params = tensors[1 + skips:]
    if not 1 <= len(params) <= most or any(t[0] != shape for t in tensors[1:1 + skips]):
        raise _BadRecordError
    if any(_numel(p[0]) > n or len(p[0]) > len(shape) for p in params):
        raise _BadRecordError
    read = sum(_nbytes(*t) for t in tensors)
    written = _nbytes(shape, dtype)
    outs = x.outputs or []
    if name == "BatchNormalization":
        if len(params) != 4:  # scale, bias, mean, var: all required
            raise _BadRecordError
        training = len(outs) == 3
        per = base + 2 + (4.0 if training else 0.0)
        if training:
            written += sum(_numel(o) for o in outs[1:]) * DTYPE_BYTES[params[2][1]]
    else:
        per = base + min(len(params), 2) + skips + max(len(params) - 2, 0)
        if skips and len(outs) >= 4 and outs[3] == shape:
            written += _nbytes(shape, dtype)
    return Work(n * per, read + written, dtype, "norm")


def _tf_batch_norm(name: str, x: _Args) -> Work:
    """TF ``FusedBatchNorm``/``V2``/``V3(x, scale, offset, mean, variance)``: in training with empty ``mean`` and
    ``variance`` (``[0]``) it computes the batch statistics: NORM_FLOPS["batch_norm_train"] per element; bytes x read,
    y written, scale and offset read. With ``[C]`` statistics the record is either mode (``is_training`` is an
    attribute TF does not record) and the op has no model."""
    src, scale, offset = _need(x.tensor(0)), _need(x.tensor(1)), _need(x.tensor(2))
    mean, var = _need(x.tensor(3)), _need(x.tensor(4))
    if mean[0] != (0,) or var[0] != (0,) or len(scale[0]) != 1 or scale[0] != offset[0]:
        raise _BadRecordError
    shape, dtype = src
    if scale[0][0] not in (shape[-1:] + shape[1:2]):
        raise _BadRecordError
    return Work(_numel(shape) * NORM_FLOPS["batch_norm_train"], 2 * _nbytes(shape, dtype) + _nbytes(*scale)
                + _nbytes(*offset), dtype, "norm")


# ---------------------------------------------------------------------------------------------------------------
# reductions and softmax

#: FLOPs per input element: sum/mean/max/min/argmax/all/any 1, vector norm 2 (square, add), var/std 3, logsumexp 4,
#: softmax/log_softmax 5 (max, sub, exp, sum, div), their backwards 3, cumsum 1.
REDUCTION_FLOPS: dict[str, float] = {
    **dict.fromkeys(("sum", "mean", "amax", "amin", "max", "min", "argmax", "argmin", "all", "any", "prod",
                     "cumsum", "cumprod", "nansum"), 1.0),
    "linalg_vector_norm": 2.0, "norm": 2.0, "var": 3.0, "std": 3.0, "var_mean": 3.0, "std_mean": 3.0,
    "logsumexp": 4.0, "softmax": 5.0, "_softmax": 5.0, "log_softmax": 5.0, "_log_softmax": 5.0,
    "_softmax_backward_data": 3.0, "_log_softmax_backward_data": 3.0, "_safe_softmax": 5.0,
}
_SAME_SIZE = frozenset({"softmax", "_softmax", "log_softmax", "_log_softmax", "_safe_softmax", "cumsum", "cumprod"})
#: Position of the ``dim`` argument where it is not 1.
_DIM_AT = {"linalg_vector_norm": 2, "norm": 2}


def _reduction(name: str, x: _Args) -> Work:
    """Reductions and softmax: flops = input elements x REDUCTION_FLOPS; bytes = input read + output written.
    Softmax and cumulative ops write an output of the input's size; a reduction over ``dim`` (recorded as a concrete
    input) writes numel/prod(reduced sizes), one element without ``dim``; max/min/argmax over a dim also write int64
    indices. ``max(a, b)`` of two tensors is elementwise (see ELEMENTWISE_FLOPS: maximum)."""
    src = _need(x.tensor(0))
    shape, dtype = src
    n = _numel(shape)
    if name in ("max", "min") and x.tensor(1) is not None:  # max(a, b): elementwise
        return _elementwise("maximum", x)
    if name in ("_softmax_backward_data", "_log_softmax_backward_data"):
        out = _need(x.tensor(1))
        if out[0] != shape:
            raise _BadRecordError
        return Work(n * REDUCTION_FLOPS[name], 3 * _nbytes(shape, dtype), dtype, "reduction")
    if name in _SAME_SIZE:
        return Work(n * REDUCTION_FLOPS[name], 2 * _nbytes(shape, dtype), dtype, "reduction")
    dim_at = _DIM_AT.get(name, 1)
    dims = x.ints(dim_at)
    given = dim_at < len(x.concrete) and x.concrete[dim_at].strip() not in ("", "None", "[]")
    if given and dims is None:
        raise _BadRecordError
    rank = len(shape)
    if dims and rank:
        if any(not -rank <= d < rank for d in dims):
            raise _BadRecordError
        reduced = math.prod(shape[d] for d in {d % rank for d in dims})
        out_n = n // reduced if reduced else 0
    elif dims and dims not in ([0], [-1]):
        raise _BadRecordError
    else:
        out_n = 1
    out_bytes = out_n * DTYPE_BYTES[dtype]
    if (name in ("max", "min") and dims) or name in ("argmax", "argmin"):
        out_bytes = out_n * (8 + (DTYPE_BYTES[dtype] if name in ("max", "min") else 0))
    if name in ("all", "any"):
        out_bytes = out_n
    return Work(n * REDUCTION_FLOPS[name], _nbytes(shape, dtype) + out_bytes, dtype, "reduction")


#: ONNX pooling; global pools take the whole spatial extent as their window.
_POOLS = frozenset({"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"})


def _pool(name: str, x: _Args) -> Work:
    """ONNX pooling, ``X [N, C, in...] -> Y [N, C, out...]``: a compare (max) or an add (average; its final divide
    in place of the first add) per window element, bytes = X read + Y written (+ MaxPool's recorded second output,
    the int64 indices).

    * global pools: the window is the whole of ``in``: flops = X's elements; Y is ``[N, C, 1...]`` (recorded or
      not);
    * MaxPool/AveragePool: the record carries neither ``kernel_shape`` nor strides, so the windows' elements are
      counted as X's elements: exact for windows that tile X (kernel = stride, no padding: the usual 2x2 stride 2),
      fewer than overlapping windows compare (3x3 stride 2 does about 2.25x as many), so the op's rate is not
      overstated. Y's shape must be recorded (ONNX Runtime's ``output_type_shape``); no model without it.
    """
    xs, dtype = _need(x.tensor(0))
    if len(xs) < 3:
        raise _BadRecordError
    y = x.output(0)
    if name.startswith("Global"):
        y = y if y is not None else (*xs[:2], *(1,) * (len(xs) - 2))
        if y != (*xs[:2], *(1,) * (len(xs) - 2)):
            raise _BadRecordError
    elif y is None or len(y) != len(xs) or y[:2] != xs[:2]:
        raise _BadRecordError
    indices = x.output(1) if name == "MaxPool" else None
    if indices is not None and indices != y:
        raise _BadRecordError
    written = _nbytes(y, dtype) + (_numel(indices) * DTYPE_BYTES["int64"] if indices is not None else 0.0)
    return Work(float(_numel(xs)), _nbytes(xs, dtype) + written, dtype, "reduction")


#: ONNX reductions (axes an attribute or, from opset 18, an input tensor): the output's shape says what was reduced.
_ONNX_REDUCE = frozenset({"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin"})


def _onnx_reduce(name: str, x: _Args) -> Work:
    """``ReduceSum/Mean/Max/Min(X, [axes]) -> Y``: one add or compare per element of X (as ``aten::sum``...);
    bytes = the input tensors (X, the axes) read + Y written. The axes come from the recorded output's shape, which
    must hold no more elements than X (keepdims either way); no model without it."""
    xs, dtype = _need(x.tensor(0))
    y = _need(x.output(0))
    if _numel(y) > _numel(xs) or (_numel(xs) and not _numel(y)):
        raise _BadRecordError
    return Work(float(_numel(xs)), sum(_nbytes(*t) for t in x.tensors()) + _nbytes(y, dtype), dtype, "reduction")


def _bias_add_grad(name: str, x: _Args) -> Work:
    """TF ``BiasAddGrad(out_backprop)``: the sum over every dimension but the channels, one add per element; bytes
    the input read and the [C] gradient written. The channels are the last dimension (NHWC) or the second (NCHW, an
    attribute the record leaves out): the op is modeled where both give the same C (always so for a 2-D input)."""
    shape, dtype = _need(x.tensor(0))
    if len(shape) < 2 or shape[1] != shape[-1]:
        raise _BadRecordError
    return Work(float(_numel(shape)), _nbytes(shape, dtype) + shape[-1] * DTYPE_BYTES[dtype], dtype, "reduction")


# ---------------------------------------------------------------------------------------------------------------
# embedding and copies


def _embedding(name: str, x: _Args) -> Work:
    """Gathers: ``embedding(weight [V, D], indices)`` / ``index_select(weight, 0, indices)``: bytes = the gathered
    rows read (n·D, not the whole table) + the indices + the output (n·D) written; no flops.
    ``embedding_dense_backward(grad [..., D], indices, num_weights, ...)``: grad and indices read, the
    [num_weights, D] gradient written, one add per grad element."""
    if name == "embedding_dense_backward":
        grad, idx = _need(x.tensor(0)), _need(x.tensor(1))
        num = _need(x.ints(2))
        if len(num) != 1 or not grad[0]:
            raise _BadRecordError
        d = grad[0][-1]
        return Work(float(_numel(grad[0])), _nbytes(*grad) + _nbytes(*idx) + num[0] * d * DTYPE_BYTES[grad[1]],
                    grad[1], "embedding")
    if name == "index_select":
        weight, idx = _need(x.tensor(0)), _need(x.tensor(2))
        if x.ints(1) != [0]:
            raise _BadRecordError
    else:
        weight, idx = _need(x.tensor(0)), _need(x.tensor(1))
    if len(weight[0]) != 2:
        raise _BadRecordError
    rows = _numel(idx[0]) * weight[0][1]
    return Work(0.0, 2 * rows * DTYPE_BYTES[weight[1]] + _nbytes(*idx), weight[1], "embedding")


_COPY_OPS = frozenset({"copy_", "copy", "to", "_to_copy", "clone", "contiguous", "cat", "stack", "_copy_from",
                       "_copy_from_and_resize", "Concat"})


def _copy(name: str, x: _Args) -> Work:
    """Copies move data without arithmetic: flops 0, bytes = read + write (2 x size at one dtype). ``copy_(self,
    src)``: src read, self written (each at its dtype: a cast); ``to``/``_to_copy`` with a dtype code write at that
    dtype; ``cat``/``stack``: each member read, their sum written (a member list without its dtype, as Kineto
    records ``TensorList``, has no model)."""
    if name in ("cat", "stack", "Concat"):
        if name == "Concat":
            members = x.tensors()
        else:
            first = x.shapes[0] if x.shapes else None
            dtype = x.dtypes[0] if x.dtypes else None
            if not isinstance(first, list) or dtype is None:
                raise _BadRecordError
            members = [(s, dtype) for s in first]
        if not members:
            raise _BadRecordError
        total = sum(_nbytes(s, d) for s, d in members)
        return Work(0.0, 2 * total, members[0][1], "copy")
    if name == "copy_":
        dst, src = _need(x.tensor(0)), _need(x.tensor(1))
        _broadcast(dst[0], src[0])
        return Work(0.0, _nbytes(*src) + _nbytes(*dst), src[1], "copy")
    src = _need(x.tensor(0))
    out_dtype = src[1]
    if name in ("to", "_to_copy"):
        for i in range(1, min(len(x.concrete), 4)):
            code = x.ints(i)
            if code and len(code) == 1 and x.dtypes and i < len(x.dtypes) and x.dtypes[i] is None:
                out_dtype = _SCALAR_TYPES.get(code[0], out_dtype)
                break
    return Work(0.0, _nbytes(*src) + _nbytes(src[0], out_dtype), src[1], "copy")


# ---------------------------------------------------------------------------------------------------------------
# MIGraphX: the ops of its targets (``gpu::``, ``hip::``, ``ref::``, ``cpu::``, ``dnnl::``) and compiled kernels
# (``gpu::code_object::<symbol>``). The record (``ingest/migraphx/operands.py``): the input operands in printed
# order, then the output, then (pooling) the window as a non-tensor entry; ``strides`` per entry. A fused kernel's
# operands come in the order of its module's parameters, so the product's and convolution's operands are found by
# their shapes against the output's, in any order.

#: Where MIGraphX's op names start (a name without one of these is another framework's).
MIGRAPHX_NAMESPACES = ("gpu::", "hip::", "ref::", "cpu::", "dnnl::")

#: FLOPs per output element of the MIGraphX ops a pointwise kernel's symbol joins (``add_relu_kernel``,
#: ``mlir_convolution_add_clip``): 1 for arithmetic, comparisons, selects and unary math (as ELEMENTWISE_FLOPS);
#: sigmoid 4, elu 3, prelu 2 (compare, multiply), sqdiff 2 (subtract, square), gelu/gelu_new 8, triadd 2 (three
#: inputs added), quantizelinear 4 (divide, round, add the zero point, clip), dequantizelinear 2 (subtract the zero
#: point, multiply); type conversions, layouts and views move data without arithmetic: 0.
MIGRAPHX_POINTWISE_FLOPS: dict[str, float] = {
    **dict.fromkeys((
        "add", "sub", "mul", "div", "neg", "abs", "relu", "max", "min", "clip", "pow", "sqrt", "rsqrt", "exp", "log",
        "log2", "erf", "tanh", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh",
        "atanh", "recip", "floor", "ceil", "round", "nearbyint", "sign", "fmod", "mod", "equal", "greater", "less",
        "not", "logical_and", "logical_or", "logical_xor", "bitwise_and", "where", "leaky_relu", "isnan", "isinf",
    ), 1.0),
    "sigmoid": 4.0, "elu": 3.0, "prelu": 2.0, "sqdiff": 2.0, "gelu": 8.0, "gelu_new": 8.0, "triadd": 2.0,
    "quantizelinear": 4.0, "dequantizelinear": 2.0,
    **dict.fromkeys(("convert", "identity", "bit_cast", "unpack_int4", "unpack_fp4", "pack_int4", "pack_fp4",
                     "broadcast", "multibroadcast", "slice", "step", "reshape", "reshape_lazy", "transpose", "squeeze",
                     "unsqueeze", "flatten"), 0.0),
}
#: Views that keep the element count (a product fused with them is found by element counts, see _mgx_matmul).
_MGX_VIEWS = frozenset({"reshape", "reshape_lazy", "transpose", "squeeze", "unsqueeze", "flatten"})
_MGX_MATMUL = frozenset({"dot", "quant_dot", "gemm", "quant_gemm", "hip_gemm", "hip_quant_gemm", "ck_gemm"})
#: Convolutions; MIOpen's fused ones: ``gpu::conv_bias`` (its bias add counted, 1 per output element),
#: ``gpu::conv_bias_relu`` and ``gpu::miopen_fusion`` (a convolution, then the bias add and relu its ``ops`` attribute
#: lists, which its name does not: those not counted).
_MGX_CONV = frozenset({"convolution", "quant_convolution", "miopen_convolution", "channelwise_conv", "conv_bias",
                       "miopen_fusion"})
_MGX_DECONV = frozenset({"convolution_backwards", "deconvolution"})
#: Reductions: 1 FLOP per input element (REDUCTION_FLOPS' sum/max/argmax).
_MGX_REDUCE = frozenset({"reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod", "reduce_any",
                         "reduce_all", "argmax", "argmin"})
#: Normalisations: FLOPs per element of the input. MIGraphX's layernorm kernel computes the statistics (4) and
#: normalises (2); its scale and shift are fused pointwise ops named after it (``layernorm_mul_add_kernel``).
#: Batch norm in inference 4 (NORM_FLOPS' batch_norm_eval).
_MGX_NORM = {"layernorm": 6.0, "batch_norm_inference": 4.0}
_MGX_SOFTMAX = frozenset({"softmax", "logsoftmax"})
#: Data movement: bytes only (``hip::copy*``, ``gpu::contiguous``, ``contiguous_kernel``, ``concat_kernel``, ...).
_MGX_COPY = frozenset({"contiguous", "layout", "hip_copy", "copy", "copy_to_gpu", "copy_from_gpu", "concat", "pad",
                       "reverse"})
#: Most operands a product's or convolution's operands are searched among (pairwise): a kernel takes a few.
MAX_PAIRED_OPERANDS = 64
_MGX_VOCAB = (set(MIGRAPHX_POINTWISE_FLOPS) | _MGX_MATMUL | _MGX_CONV | _MGX_DECONV | _MGX_REDUCE | set(_MGX_NORM)
              | _MGX_SOFTMAX | _MGX_COPY | {"pooling", "gather", "fill"})


def _mgx_ops(name: str) -> list[str] | None:
    """The MIGraphX op names an op or kernel name stands for: ``gpu::code_object::mlir_convolution_add_relu`` ->
    [convolution, add, relu], ``gpu::code_object::add_layernorm_mul_kernel`` -> [add, layernorm, mul],
    ``gpu::gemm`` -> [gemm] (``perf --detailed``'s ``<shapes>`` suffix ignored); None where it is not a MIGraphX
    name or a part is not a known op."""
    if not name.startswith(MIGRAPHX_NAMESPACES):
        return None
    body = name.split("<", 1)[0]
    if body.startswith("gpu::code_object::"):
        body = body[len("gpu::code_object::"):]
        body = body.removeprefix("mlir_").removesuffix("_kernel")
    else:
        body = body.split("::", 1)[1]
    words = body.split("_")
    ops: list[str] = []
    i = 0
    while i < len(words):
        for size in (3, 2, 1):  # the longest known name first: reduce_sum, not reduce + sum
            part = "_".join(words[i:i + size])
            if i + size <= len(words) and part in _MGX_VOCAB:
                ops.append(part)
                i += size
                break
        else:
            return None
    return ops or None


@dataclass(frozen=True)
class _Tensor:
    shape: Shape
    dtype: str
    stored: int  # elements in memory: a broadcast dimension (stride 0) counts once

    @property
    def nbytes(self) -> float:
        return self.stored * DTYPE_BYTES[self.dtype]

    @property
    def numel(self) -> int:
        return _numel(self.shape)


def _mgx_record(shapes: str | None, dtypes: str | None, concrete: str | None,
                strides: str | None) -> tuple[list[_Tensor], _Tensor, list[int] | None]:
    """(inputs, output, pooling window) of a MIGraphX record; _BadRecordError where an entry has no size (a tuple,
    an unknown dtype) or the texts disagree."""
    shape_list = _shapes(shapes)
    texts = _strings(dtypes, len(shape_list))
    values = _strings(concrete, len(shape_list))
    stride_list = _loads(strides)
    if len(texts) != len(shape_list) or (stride_list is not None and len(stride_list) != len(shape_list)):
        raise _BadRecordError
    last = max((i for i, t in enumerate(texts) if t.strip()), default=-1)  # entries after it are attributes
    if last < 0:
        raise _BadRecordError
    tensors = []
    for i in range(last + 1):
        shape, dtype = shape_list[i], canonical_dtype(texts[i])
        if isinstance(shape, list) or dtype is None:
            raise _BadRecordError
        stored = _numel(shape)
        if stride_list is not None:
            st = stride_list[i]
            if not isinstance(st, list) or len(st) != len(shape) or any(type(v) is not int or v < 0 for v in st):
                raise _BadRecordError
            stored = math.prod(d for d, s in zip(shape, st) if s != 0)
        tensors.append(_Tensor(shape, dtype, stored))
    attributes = _Args(shape_list, [None] * len(shape_list), values)
    window = next((w for w in map(attributes.ints, range(last + 1, len(shape_list))) if w), None)
    return tensors[:-1], tensors[-1], window


def _widest(tensors: list[_Tensor], out: _Tensor) -> str:
    """The compute dtype of a pointwise or reducing kernel: its widest input (bool only where all are), else the
    output's."""
    dtypes = [t.dtype for t in tensors if t.dtype != "bool"] or [t.dtype for t in tensors] or [out.dtype]
    return max(dtypes, key=lambda d: _RANK.get(d, 0))


def _mgx_matmul(ins: list[_Tensor], out: _Tensor, views: bool) -> tuple[float, str]:
    """A product's FLOPs, 2·M·N·K·batch = 2·(output elements)·K, and compute dtype. The output is [..., M, N]; K is
    read off an operand pair a [..., M, K], b [..., K, N] whose batch dimensions broadcast to the output's. A kernel
    that reshapes or transposes its operands (``mlir_transpose_reshape_dot_add``) keeps their element counts: K =
    numel(a)·N / numel(out) = numel(b)·M / numel(out) for some pair. Either way the pairs that fit must agree on K
    (a pointwise operand could fit too), else no model."""
    o = out.shape
    if len(o) < 2 or not out.numel or len(ins) > MAX_PAIRED_OPERANDS:
        raise _BadRecordError
    m, n = o[-2], o[-1]
    found: dict[int, str] = {}
    for a in ins:
        for b in ins:
            if a is b or len(a.shape) != len(o) or len(b.shape) != len(o):
                continue
            if a.shape[-2] == m and b.shape[-1] == n and a.shape[-1] == b.shape[-2]:
                try:
                    batch = _broadcast(a.shape[:-2], b.shape[:-2], o[:-2])
                except _BadRecordError:
                    continue
                if batch == o[:-2]:
                    found.setdefault(a.shape[-1], a.dtype)
    if not found and views:
        for a in ins:
            for b in ins:
                k_a, r_a = divmod(a.numel * n, out.numel)
                k_b, r_b = divmod(b.numel * m, out.numel)
                if a is not b and k_a > 0 and not r_a and not r_b and k_a == k_b:
                    found.setdefault(k_a, a.dtype)
    if len(found) != 1:
        raise _BadRecordError
    (k, dtype), = found.items()
    return 2.0 * out.numel * k, dtype


def _materialised(t: _Tensor) -> bool:
    """Not a broadcast view (a convolution's input and weight are stored whole)."""
    return t.stored == t.numel


def _mgx_conv(ins: list[_Tensor], out: _Tensor, transposed: bool) -> tuple[float, str]:
    """A convolution's FLOPs and compute dtype, from its output and the weight found among its operands.

    * forward, out [N, C_out, out...], weight [C_out, C_in/groups, k...], input [N, C_in, in...]: each output element
      is a dot product over its group's C_in/groups channels and the kernel window, so flops =
      2·numel(out)·prod(weight[1:]) = 2·N·C_out·(C_in/groups)·prod(k)·prod(out spatial) (depthwise, weight
      [C, 1, k...]: 2·numel(out)·prod(k)); groups = C_in / weight[1], which must divide C_out. Padding, stride and
      dilation (which a compiled kernel does not print) are in the output's size.
    * transposed (``convolution_backwards``), weight [C_in, C_out/groups, k...]: each input element is scattered
      through the kernel into C_out/groups channels: flops = 2·numel(input)·prod(weight[1:]).

    The input and weight are the operands of the convolution's rank, not broadcast, that fit: weight[0] = C_out
    (C_in transposed) and an input of batch N whose channels the weight's divide. Every fitting pair must give the
    same FLOPs (a residual operand shaped like the output fits as an input when N = C_out), else no model."""
    o = out.shape
    r = len(o)
    if r < 3 or len(ins) > MAX_PAIRED_OPERANDS:
        raise _BadRecordError
    found: dict[float, str] = {}
    for w in ins:
        if len(w.shape) != r or not _materialised(w) or min(w.shape) < 1:
            continue
        for x in ins:
            if x is w or len(x.shape) != r or not _materialised(x) or x.shape[0] != o[0]:
                continue
            if transposed:
                groups = o[1] // w.shape[1]
                if x.shape[1] != w.shape[0] or o[1] % w.shape[1] or not groups or x.shape[1] % groups:
                    continue
                flops = 2.0 * x.numel * _numel(w.shape[1:])
            else:
                groups = x.shape[1] // w.shape[1]
                if w.shape[0] != o[1] or x.shape[1] % w.shape[1] or not groups or o[1] % groups:
                    continue
                flops = 2.0 * out.numel * _numel(w.shape[1:])
            found.setdefault(flops, w.dtype)
    if len(found) != 1:
        raise _BadRecordError
    (flops, dtype), = found.items()
    return flops, dtype


def _pointwise_flops(ops: Sequence[str]) -> float:
    return sum(MIGRAPHX_POINTWISE_FLOPS[op] for op in ops)


def _mgx_work(ops: list[str], ins: list[_Tensor], out: _Tensor, window: list[int] | None) -> Work:
    """The work of one MIGraphX op or kernel: ``ops``, the op names its name joins, decide the family.

    * bytes: every input read once (a broadcast input at its size in memory) + the output written once; a fill
      writes only; a gather reads the rows it gathers (the output's size), not its whole table, and the indices.
    * a product (dot, gemm, ``mlir_dot*``, ``ck_gemm*``) or convolution (``convolution``, ``mlir_convolution*``,
      ``channelwise_conv*``) with fused pointwise ops: its FLOPs (_mgx_matmul, _mgx_conv) + the pointwise ops' on
      each output element; two products in one kernel (attention) have no model;
    * pointwise kernels: MIGRAPHX_POINTWISE_FLOPS summed over the ops, per output element; a kernel that only moves
      or converts data (``contiguous``, ``convert``, ``concat``, ``hip::copy``) is a copy, 0 FLOPs;
    * reductions (``reduce_sum_kernel``, fused ``reduce_max_sub_exp_reduce_sum_div_kernel``): the ops up to the last
      reduction run on each element of the largest input (a reduction 1 FLOP), the ops after it on each output
      element (a layernorm's ``add``/``sqrt`` on the reduced rows are then counted per element: at most 2 FLOPs per
      element more than it does);
    * softmax/logsoftmax: 5 per input element (REDUCTION_FLOPS); layernorm: 6 per input element + its fused ops;
    * pooling: output elements x window where the op prints its window (``gpu::pooling[lengths={3, 3}]``), else
      (``pooling_kernel``) one per input element (exact for global and non-overlapping windows, fewer than the
      windows hold where they overlap).
    """
    heavy = [op for op in ops if op in _MGX_MATMUL or op in _MGX_CONV or op in _MGX_DECONV]
    rest = [op for op in ops if op not in heavy]
    in_bytes = sum(t.nbytes for t in ins)
    nbytes = in_bytes + out.nbytes
    pointwise = all(op in MIGRAPHX_POINTWISE_FLOPS for op in rest)
    if heavy:
        if len(heavy) != 1 or not pointwise:
            raise _BadRecordError
        if heavy[0] in _MGX_MATMUL:
            flops, dtype = _mgx_matmul(ins, out, any(op in _MGX_VIEWS for op in rest))
            family = "matmul"
        else:
            flops, dtype = _mgx_conv(ins, out, heavy[0] in _MGX_DECONV)
            flops += out.numel if heavy[0] == "conv_bias" else 0
            family = "conv"
        return Work(flops + out.numel * _pointwise_flops(rest), nbytes, dtype, family)
    largest = max((t.numel for t in ins), default=0)
    dtype = _widest(ins, out)
    if ops == ["fill"]:
        return Work(0.0, out.nbytes, out.dtype, "copy")
    if ops == ["gather"]:
        if len(ins) < 2:
            raise _BadRecordError
        return Work(0.0, out.numel * DTYPE_BYTES[ins[0].dtype] + ins[1].nbytes + out.nbytes, ins[0].dtype,
                    "embedding")
    if ops == ["pooling"]:
        if not ins:
            raise _BadRecordError
        flops = out.numel * _numel(window) if window else ins[0].numel
        return Work(float(flops), nbytes, dtype, "reduction")
    if len(ops) == 1 and ops[0] in _MGX_SOFTMAX:
        return Work(largest * REDUCTION_FLOPS["softmax"], nbytes, dtype, "reduction")
    norms = [op for op in ops if op in _MGX_NORM]
    reduces = [i for i, op in enumerate(ops) if op in _MGX_REDUCE]
    if norms:
        others = [op for op in ops if op not in _MGX_NORM]
        if len(norms) != 1 or not all(op in MIGRAPHX_POINTWISE_FLOPS for op in others):
            raise _BadRecordError
        return Work(largest * _MGX_NORM[norms[0]] + out.numel * _pointwise_flops(others), nbytes, dtype, "norm")
    if reduces:
        cut = reduces[-1] + 1
        if not all(op in MIGRAPHX_POINTWISE_FLOPS or op in _MGX_REDUCE for op in ops):
            raise _BadRecordError
        before = sum(1.0 if op in _MGX_REDUCE else MIGRAPHX_POINTWISE_FLOPS[op] for op in ops[:cut])
        return Work(largest * before + out.numel * _pointwise_flops(ops[cut:]), nbytes, dtype, "reduction")
    if not all(op in MIGRAPHX_POINTWISE_FLOPS or op in _MGX_COPY for op in ops):
        raise _BadRecordError
    flops = out.numel * _pointwise_flops([op for op in ops if op not in _MGX_COPY])
    return Work(flops, nbytes, dtype, "elementwise" if flops else "copy")


@functools.lru_cache(maxsize=1 << 14)
def _migraphx_work(name: str, shapes: str | None, dtypes: str | None, concrete: str | None,
                   strides: str | None) -> Work | None:
    ops = _mgx_ops(name)
    if ops is None:
        return None
    try:
        ins, out, window = _mgx_record(shapes, dtypes, concrete, strides)
        return _mgx_work(ops, ins, out, window)
    except (_BadRecordError, KeyError, IndexError, ValueError, TypeError, ZeroDivisionError, OverflowError):
        return None


# ---------------------------------------------------------------------------------------------------------------
# names


#: Other frameworks' op names (ONNX op types, TF ops) -> the aten-style key whose model applies.
_ALIASES: dict[str, str] = {
    # ONNX (ONNX Runtime's op names)
    "Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "Neg": "neg", "Abs": "abs", "Relu": "relu",
    "Sigmoid": "sigmoid", "Tanh": "tanh", "Erf": "erf", "Sqrt": "sqrt", "Exp": "exp", "Log": "log", "Pow": "pow",
    "Reciprocal": "reciprocal", "Where": "where", "Equal": "eq", "Less": "lt", "Greater": "gt", "Clip": "clamp",
    "LeakyRelu": "leaky_relu", "Gelu": "gelu", "HardSigmoid": "hardsigmoid", "HardSwish": "hardswish",
    "Softplus": "softplus", "Elu": "elu", "Max": "maximum", "Min": "minimum", "Transpose": "clone",
    # ONNX Runtime's layout changes for its NCHWc kernels (NCHW <-> channel blocks): a copy each
    "ReorderInput": "clone", "ReorderOutput": "clone",
    # TF
    "AddV2": "add", "BiasAdd": "add", "RealDiv": "div", "Maximum": "maximum", "Minimum": "minimum",
    "GreaterEqual": "ge", "LessEqual": "le", "NotEqual": "ne", "Rsqrt": "rsqrt", "Square": "square",
    "Relu6": "relu6", "SquaredDifference": "sub", "Selu": "selu", "Softmax": "softmax", "LogSoftmax": "log_softmax",
    "ReluGrad": "threshold_backward", "Relu6Grad": "hardtanh_backward", "SigmoidGrad": "sigmoid_backward",
    "TanhGrad": "tanh_backward", "EluGrad": "elu_backward", "SoftplusGrad": "softplus_backward",
    "DivNoNan": "div", "MulNoNan": "mul", "Select": "where", "SelectV2": "where", "FloorDiv": "floor_divide",
    "FloorMod": "remainder", "Sign": "sign", "Floor": "floor", "Ceil": "ceil", "Round": "round", "Sin": "sin",
    "Cos": "cos", "Atan": "atan", "Atan2": "atan2", "Log1p": "log1p", "Expm1": "expm1", "LogicalAnd": "logical_and",
    "LogicalOr": "logical_or", "LogicalNot": "logical_not", "IsNan": "isnan", "IsInf": "isinf",
}
#: Products whose transposes are attributes the records do not carry.
_TRANSPOSABLE = frozenset({"Gemm", "MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3", "FusedMatMul",
                           "_FusedMatMul"})
#: Products whose further inputs (a bias, the fused ops' arguments) are read: ONNX Gemm's C, TF _FusedMatMul's args.
_WITH_EXTRA = frozenset({"Gemm", "_FusedMatMul"})
#: TF ops with a model of their own (the TF name is the key).
_TF_MODELS: dict[str, Callable[[str, _Args], Work]] = {
    "AddN": _add_n, "BiasAddGrad": _bias_add_grad, "FusedBatchNorm": _tf_batch_norm,
    "FusedBatchNormV2": _tf_batch_norm, "FusedBatchNormV3": _tf_batch_norm}
#: Names that are an elementwise op in ONNX (variadic Max/Min) and a reduction in TF (whose second input is the
#: int axes): modeled as elementwise only where every tensor has one dtype.
_ONNX_OR_TF = frozenset({"Max", "Min"})
_MATMUL_OPS = frozenset({"mm", "bmm", "matmul", "mv", "dot", "vdot", "addmm", "baddbmm", "addbmm", "linear",
                         "_addmm_activation", "_scaled_mm", "_int_mm", "einsum"})
_EMBEDDING_OPS = frozenset({"embedding", "index_select", "embedding_dense_backward"})

_CONV_BACKWARD = frozenset({"convolution_backward", "cudnn_convolution_backward", "miopen_convolution_backward"})
_Model = Callable[[str, _Args], Work]


def _model_of(key: str) -> _Model | None:
    if key in _TF_MODELS:
        return _TF_MODELS[key]
    if key in _TRANSPOSABLE:
        return _onnx_product
    if key in _ONNX_CONV:
        return _onnx_conv
    if key in _ONNX_NORMS:
        return _onnx_norm
    if key in _POOLS:
        return _pool
    if key in _ONNX_REDUCE:
        return _onnx_reduce
    if key in _MATMUL_OPS:
        return _matmul
    if key in _CONV_ARGS:
        return _conv
    if key in _CONV_BACKWARD:
        return _conv_backward
    if key in _ATTENTION:
        return _attention
    if key in ELEMENTWISE_FLOPS:
        return _elementwise
    if key in _NORMS:
        return _norm
    if key in REDUCTION_FLOPS:
        return _reduction
    if key in _EMBEDDING_OPS:
        return _embedding
    if key in _COPY_OPS:
        return _copy
    return None


def _key(name: str) -> str:
    """``aten::add_`` -> ``add`` (in place: the same work), ``Mul`` -> ``mul``; other namespaces keep their name."""
    if name.startswith("aten::"):
        key = name[6:].split(".", 1)[0]
        if key.endswith("_") and not key.endswith("__") and key != "copy_":
            key = key[:-1]
        return key
    return _ALIASES.get(name, name)


def modeled_names() -> dict[str, tuple[str, ...]]:
    """The op names with a model, per family (aten ops listed without their ``aten::`` prefix; in-place ``_``
    variants share their op's model; ONNX/TF names included; MIGraphX's names, read by their parts (``_mgx_ops``),
    are not listed; HLO instructions by opcode as ``hlo:OPCODE``)."""
    out: dict[str, list[str]] = {f: [] for f in FAMILIES}
    families: dict[_Model, str] = {
        _matmul: "matmul", _onnx_product: "matmul", _conv: "conv", _conv_backward: "conv", _onnx_conv: "conv",
        _attention: "attention", _elementwise: "elementwise", _norm: "norm", _onnx_norm: "norm",
        _reduction: "reduction", _pool: "reduction", _onnx_reduce: "reduction", _embedding: "embedding",
        _copy: "copy", _add_n: "elementwise", _bias_add_grad: "reduction", _tf_batch_norm: "norm"}
    keys = (_MATMUL_OPS | set(_CONV_ARGS) | _CONV_BACKWARD | set(_ATTENTION) | set(ELEMENTWISE_FLOPS)
            | set(_NORMS) | set(REDUCTION_FLOPS) | _EMBEDDING_OPS | _COPY_OPS | set(_ALIASES) | _TRANSPOSABLE
            | _ONNX_CONV | set(_ONNX_NORMS) | _POOLS | _ONNX_REDUCE | set(_TF_MODELS))
    for key in sorted(keys):
        model = _model_of(_ALIASES.get(key, key))
        if model is not None:
            out[families[model]].append(key)
    for family, opcodes in hlo_work.MODELED.items():
        out[family].extend(f"hlo:{op}" for op in sorted(opcodes))
    return {f: tuple(v) for f, v in out.items()}


def op_work(name: str, shapes: str | None, dtypes: str | None, concrete: str | None = None,
            outputs: str | None = None, strides: str | None = None) -> Work | None:
    """The work of one call of op ``name`` from its recorded ``shapes``/``dtypes``/``concrete_inputs`` text and,
    where the record has them, its ``output_shapes`` (``outputs``) and, for MIGraphX's ops, ``strides`` (a broadcast
    operand's size in memory); None when the op has no model or its record
    does not resolve (absent, malformed, inconsistent, too large). Cached: a trace repeats the same few records many
    times."""
    if not isinstance(name, str) or len(name) > 512:
        return None
    if any(t is not None and (not isinstance(t, str) or len(t) > MAX_TEXT)
           for t in (shapes, dtypes, concrete, outputs, strides)):
        return None
    if hlo_work.is_record(concrete):
        assert concrete is not None
        found = hlo_work.instruction_work(concrete)
        return Work(*found) if found is not None else None
    if name.startswith(MIGRAPHX_NAMESPACES):
        return _checked(_migraphx_work(name, shapes, dtypes, concrete, strides))
    return _op_work(name, shapes, dtypes, concrete, outputs)


def _checked(work: Work | None) -> Work | None:
    """``work`` with finite, non-negative figures (as floats); None otherwise."""
    if work is None:
        return None
    flops, nbytes = float(work.flops), float(work.bytes)
    if not (math.isfinite(flops) and math.isfinite(nbytes)) or flops < 0 or nbytes < 0:
        return None
    return Work(flops, nbytes, work.dtype, work.family)


@functools.lru_cache(maxsize=1 << 14)
def _op_work(name: str, shapes: str | None, dtypes: str | None, concrete: str | None,
             outputs: str | None) -> Work | None:
    key = _key(name)
    model = _model_of(key)
    if model is None:
        return None
    try:
        shape_list = _shapes(shapes)
        type_texts = _strings(dtypes, len(shape_list))
        args = _Args(shape_list, [canonical_dtype(t) for t in type_texts], _strings(concrete, len(shape_list)),
                     _output_shapes(outputs))
        if name in _ONNX_OR_TF and len({d for _, d in args.tensors()}) > 1:
            return None
        work = model(key, args)
    except (_BadRecordError, KeyError, IndexError, ValueError, TypeError, ZeroDivisionError, OverflowError):
        return None
    return _checked(work)
