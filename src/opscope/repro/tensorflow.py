"""The PyTorch op that does what a TensorFlow op does, with inputs of the same shapes, memory layout and dtypes.

``opscope repro --as torch`` turns an op of a TensorFlow or XProf trace into a PyTorch
reproducer: :func:`torch_equivalent` maps the op type, its recorded inputs (:class:`TFInput`) and its node
attributes to one aten call (:class:`TorchCall`) whose arguments are :mod:`opscope.repro.values` types only, or
to the reason there is none. No torch import: the mapping is arithmetic on shapes and attributes.

Choices, each stated in the call's ``notes``:

- **Layout.** A 4-D NHWC activation of a spatial op (convolution, pooling, batch norm) becomes a torch tensor of
  size (N, C, H, W) with channels_last strides (H*W*C, 1, W*C, C): the same memory as TF's. NCHW stays
  contiguous. Elementwise ops (BiasAdd, Relu, AddV2...) keep TF's shape (row-major, the same memory): the
  meaning of the dimensions does not matter to them.
- **Filters.** TF's HWIO filter (kh, kw, cin, cout) becomes a torch weight (cout, cin, kh, kw) whose strides
  (1, cout, kw*cin*cout, cin*cout) describe the HWIO memory: the reproducer reads the bytes TF read. torch copies
  such a weight into its kernel's layout inside the call; measured on the CPU that costs no more than a
  contiguous weight (a 3x3x64x64 conv on 8x56x56: 14.4 ms either way), so the faithful layout is kept. A
  depthwise filter (kh, kw, cin, mult) becomes (cin*mult, 1, kh, kw) with groups=cin, strides again of its memory.
- **SAME and EXPLICIT padding.** TF pads ``total // 2`` before and the rest after; torch's convolutions pad
  both sides alike. Where the two sides differ, the torch input stands for TF's input already padded by the
  difference (``F.pad`` with zeros), with the smaller pad on both sides: the output has TF's shape and values.
  Pooling needs no pre-padding: at a stride above 1, TF's SAME pooling is ``padding=before`` with
  ``ceil_mode=True`` (the window that reaches the bottom/right pad is kept); at stride 1 (an even window) the
  larger pad goes on both sides and torch's output has one leading row/col more than TF's, which the note names
  (``out[:, :, 1:, 1:]``). AvgPool takes ``count_include_pad=False``, as TF averages over input elements only.
- **The ``*_sizes`` inputs** of the backprops are 1-D int32 tensors whose values a trace does not record: they
  come from ``attrs["input_sizes"]`` / ``attrs["filter_sizes"]`` when given, else are derived where the other
  shapes determine them (stride 1 and VALID or EXPLICIT padding), else the call is a reason.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from opscope.repro.values import DTYPES, T, Value, contiguous_strides

#: TF's DataType names (``DT_FLOAT``, ``float``, ``tf.float32``, lower-cased, prefixes dropped) to torch's.
_TF_DTYPES = {
    "float": "float32", "float32": "float32", "half": "float16", "float16": "float16", "bfloat16": "bfloat16",
    "double": "float64", "float64": "float64", "int8": "int8", "int16": "int16", "int32": "int32",
    "int64": "int64", "uint8": "uint8", "uint16": "uint16", "uint32": "uint32", "uint64": "uint64",
    "bool": "bool", "complex64": "complex64", "complex128": "complex128",
    "float8_e4m3fn": "float8_e4m3fn", "float8_e5m2": "float8_e5m2",
}
_FLOATS = ("float32", "float64", "float16", "bfloat16")
_MATMUL_DTYPES = (*_FLOATS, "complex64", "complex128")
#: A TF op type as TF names them (``Conv2D``, ``_FusedConv2D``): safe to show as it is.
_OP_TYPE = re.compile(r"_?[A-Z][A-Za-z0-9]{0,63}")
_MAX_SHOWN = 80
#: The batch, channel and spatial positions of a 4-element attribute (strides, ksize...) per data format.
_POSITIONS = {"NHWC": (0, 3, 1, 2), "NCHW": (0, 1, 2, 3)}


@dataclass(frozen=True)
class TFInput:
    """One input of a TF op as a trace records it: its shape and TF dtype name (None: not recorded)."""

    shape: tuple[int, ...] | None
    dtype: str | None


@dataclass(frozen=True)
class TorchCall:
    """An aten op (``aten::conv2d``, no overload: it is chosen from the arguments) and its arguments in the
    schema's order; ``notes`` say what the reader must know (layout mapping, padding made explicit, fused parts
    left out)."""

    op: str
    args: tuple
    kwargs: dict = field(default_factory=dict)
    notes: tuple[str, ...] = ()


class _NoCallError(Exception):
    """Raised inside the mapping with the reason there is no call; :func:`torch_equivalent` returns it."""


def torch_equivalent(op_type: str, inputs: list[TFInput], attrs: dict) -> TorchCall | str:
    """The PyTorch op doing what TF op ``op_type`` does on these inputs, or the reason there is none (a str)."""
    if not isinstance(op_type, str):
        return "the TF op type is not text"
    mapping = _MAPPINGS.get(op_type)
    if mapping is None:
        return f"no PyTorch equivalent for TF op {shown(op_type)} in opscope's table"
    if not isinstance(inputs, list | tuple) or not isinstance(attrs, dict):
        return f"TF op {op_type}: inputs or attributes not recorded"
    try:
        return mapping(_Op(op_type, list(inputs), attrs))
    except _NoCallError as reason:
        return f"TF op {op_type}: {reason}"


def shown(name: object) -> str:
    """A name from a trace as it can be shown anywhere: a TF op type as it is, anything else as a cut repr
    (quoted, control and invisible characters escaped)."""
    if isinstance(name, str) and _OP_TYPE.fullmatch(name):
        return name
    text = name if isinstance(name, str) else type(name).__name__
    cut = text[:_MAX_SHOWN]
    return repr(cut) + ("..." if len(text) > _MAX_SHOWN else "")


def torch_dtype(name: object) -> str | None:
    """The torch dtype name (one of :data:`values.DTYPES`) for a TF dtype name, or None."""
    if not isinstance(name, str) or len(name) > 40:
        return None
    key = name.strip().lower()
    for prefix in ("dt_", "tf."):
        if key.startswith(prefix):
            key = key[len(prefix):]
    found = _TF_DTYPES.get(key)
    return found if found in DTYPES else None


# --- inputs and attributes, checked --------------------------------------------------------------------------


@dataclass
class _Op:
    op_type: str
    inputs: list
    attrs: dict
    notes: list[str] = field(default_factory=list)

    def tensor(self, i: int, rank: int | None = None, dtypes: tuple[str, ...] | None = None) -> tuple[tuple, str]:
        """Input ``i``'s TF shape and torch dtype, checked."""
        if i >= len(self.inputs):
            raise _NoCallError(f"input {i} not recorded (the op has {len(self.inputs)} inputs)")
        got = self.inputs[i]
        shape, dtype = getattr(got, "shape", None), getattr(got, "dtype", None)
        if shape is None:
            raise _NoCallError(f"shape of input {i} not recorded")
        if not isinstance(shape, tuple | list) or any(type(n) is not int or n < 0 for n in shape):
            raise _NoCallError(f"shape of input {i} is not a list of non-negative ints")
        if dtype is None:
            raise _NoCallError(f"dtype of input {i} not recorded")
        name = torch_dtype(dtype)
        if name is None:
            raise _NoCallError(f"dtype of input {i} ({shown(dtype)}) has no torch dtype")
        if rank is not None and len(shape) != rank:
            raise _NoCallError(f"input {i} has rank {len(shape)}, {self.op_type} takes rank {rank}")
        if dtypes is not None and name not in dtypes:
            raise _NoCallError(f"input {i} is {name}; torch's equivalent takes {', '.join(dtypes)}")
        return tuple(shape), name

    def has_input(self, i: int) -> bool:
        return i < len(self.inputs) and getattr(self.inputs[i], "shape", None) is not None

    def text(self, name: str, default: str | None, allowed: tuple[str, ...]) -> str:
        value = self.attrs.get(name, default)
        if isinstance(value, bytes):
            value = value.decode("ascii", "replace")
        if value is None:
            raise _NoCallError(f"attribute {name} not recorded (TF has no default for it)")
        if value not in allowed:
            raise _NoCallError(f"attribute {name} is not one of {', '.join(allowed)}")
        return value

    def flag(self, name: str, default: bool) -> bool:
        value = self.attrs.get(name, default)
        if not isinstance(value, bool):
            raise _NoCallError(f"attribute {name} is not a bool")
        return value

    def number(self, name: str, default: float) -> float:
        value = self.attrs.get(name, default)
        if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
            raise _NoCallError(f"attribute {name} is not a number")
        return float(value)

    def ints(self, name: str, length: int, default: list[int] | None = None, low: int = 1) -> list[int]:
        value = self.attrs.get(name, default)
        if value is None:
            raise _NoCallError(f"attribute {name} not recorded")
        if (not isinstance(value, list | tuple) or len(value) != length
                or any(type(n) is not int or n < low for n in value)):
            raise _NoCallError(f"attribute {name} is not a list of {length} ints of at least {low}")
        return list(value)

    def data_format(self) -> str:
        return self.text("data_format", "NHWC", ("NHWC", "NCHW"))

    def spatial(self, name: str, fmt: str, default: int | None = 1) -> tuple[int, int]:
        """(h, w) of a 4-element attribute in ``fmt`` order whose batch and channel entries must be 1; a missing
        one is ``default`` (None: a reason), said in a note unless it is TF's own default (dilations)."""
        if self.attrs.get(name) is None and default is not None and name != "dilations":
            note = f"attribute {name} not recorded: {default} assumed"
            if note not in self.notes:
                self.notes.append(note)
        values = self.ints(name, 4, None if default is None else [default] * 4)
        n, c, h, w = _POSITIONS[fmt]
        if values[n] != 1 or values[c] != 1:
            raise _NoCallError(f"attribute {name} moves along the batch or channels; torch's op does not")
        return values[h], values[w]

    def fused_ops(self) -> list[str]:
        value = self.attrs.get("fused_ops", [])
        if isinstance(value, list | tuple):
            value = [v.decode("ascii", "replace") if isinstance(v, bytes) else v for v in value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise _NoCallError("attribute fused_ops is not a list of op names")
        return value

    def call(self, op: str, *args: Value | list) -> TorchCall:
        return TorchCall(op, tuple(args), {}, tuple(self.notes))


def _plain(shape: tuple, dtype: str) -> T:
    """A tensor of TF's shape, row-major: TF's memory as it is."""
    return T(tuple(shape), contiguous_strides(tuple(shape)), dtype)


def _activation(nchw: tuple[int, int, int, int], fmt: str, dtype: str) -> T:
    """An (N, C, H, W) torch tensor laid out as TF's ``fmt`` tensor is: channels_last for NHWC."""
    _, c, h, w = nchw
    if fmt == "NCHW":
        return T(nchw, contiguous_strides(nchw), dtype)
    c1, w1 = max(c, 1), max(w, 1)
    return T(nchw, (h * w1 * c1, 1, w1 * c1, c1), dtype)


def _to_nchw(shape: tuple, fmt: str) -> tuple[int, int, int, int]:
    n, c, h, w = _POSITIONS[fmt]
    return shape[n], shape[c], shape[h], shape[w]


def _layout_note(op: _Op, fmt: str, what: str = "input") -> None:
    if fmt == "NHWC":
        op.notes.append(f"NHWC {what} as a torch (N, C, H, W) tensor with channels_last strides, the same memory")
    else:
        op.notes.append(f"NCHW {what} as a contiguous torch tensor, the same memory")


def _filter(shape: tuple, dtype: str, depthwise: bool) -> T:
    """TF's filter (kh, kw, cin, cout) as a torch weight (cout, cin, kh, kw) over the same (HWIO) memory; a
    depthwise filter (kh, kw, cin, mult) as (cin*mult, 1, kh, kw)."""
    kh, kw, ci, co = shape
    if depthwise:
        out = ci * co
        return T((out, 1, kh, kw), (1, max(out, 1), max(kw * out, 1), max(out, 1)), dtype)
    return T((co, ci, kh, kw), (1, max(co, 1), max(kw * ci * co, 1), max(ci * co, 1)), dtype)


def _filter_note(op: _Op, depthwise: bool) -> None:
    if depthwise:
        op.notes.append("depthwise filter (kh, kw, C, mult) as a weight (C*mult, 1, kh, kw) over the same memory, "
                        "groups=C")
    else:
        op.notes.append("HWIO filter (kh, kw, cin, cout) as a weight (cout, cin, kh, kw) whose strides are those of "
                        "the HWIO memory (torch copies it into its kernel's layout inside the call)")


# --- padding --------------------------------------------------------------------------------------------------


def same_padding(size: int, k: int, stride: int, dilation: int) -> tuple[int, int]:
    """TF's SAME padding of one spatial dimension: (before, after)."""
    out = -(-size // stride)
    total = max((out - 1) * stride + (k - 1) * dilation + 1 - size, 0)
    return total // 2, total - total // 2


def _pads(op: _Op, fmt: str, size: tuple[int, int], k: tuple[int, int], stride: tuple[int, int],
          dilation: tuple[int, int], explicit_ok: bool = True) -> tuple[tuple[int, int], tuple[int, int]]:
    """((top, bottom), (left, right)) as TF pads this op."""
    padding = op.text("padding", None, ("SAME", "VALID", "EXPLICIT") if explicit_ok else ("SAME", "VALID"))
    if padding == "VALID":
        return (0, 0), (0, 0)
    if padding == "SAME":
        return (same_padding(size[0], k[0], stride[0], dilation[0]),
                same_padding(size[1], k[1], stride[1], dilation[1]))
    values = op.ints("explicit_paddings", 8, low=0)
    n, c, h, w = _POSITIONS[fmt]
    if values[2 * n] or values[2 * n + 1] or values[2 * c] or values[2 * c + 1]:
        raise _NoCallError("explicit_paddings pad the batch or channels")
    return (values[2 * h], values[2 * h + 1]), (values[2 * w], values[2 * w + 1])


def _out_size(size: int, pad: tuple[int, int], k: int, stride: int, dilation: int) -> int:
    span = size + pad[0] + pad[1] - ((k - 1) * dilation + 1)
    if span < 0:
        raise _NoCallError("the filter or window is larger than the padded input")
    return span // stride + 1


def _split_pads(op: _Op, pads: tuple[tuple[int, int], tuple[int, int]]) -> tuple[list[int], tuple[int, int]]:
    """torch's symmetric padding [ph, pw] and the rows/cols (extra_h, extra_w) the input carries already padded;
    the note says where."""
    sym = [min(p) for p in pads]
    extra = (pads[0][0] + pads[0][1] - 2 * sym[0], pads[1][0] + pads[1][1] - 2 * sym[1])
    if any(extra):
        (top, bottom), (left, right) = ((p[0] - s, p[1] - s) for p, s in zip(pads, sym))
        op.notes.append(
            f"TF pads unevenly (top {pads[0][0]}, bottom {pads[0][1]}, left {pads[1][0]}, right {pads[1][1]}) and "
            f"torch pads both sides alike: the torch input is TF's input already padded with zeros by "
            f"F.pad(x, ({left}, {right}, {top}, {bottom})), {extra[0]} row(s) and {extra[1]} col(s) larger, and "
            f"padding={sym}; the output has TF's shape and values")
    return sym, extra


# --- convolutions ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Conv:
    x: T                  # the activation, pre-padded where TF pads unevenly
    stride: list[int]
    padding: list[int]
    dilation: list[int]
    groups: int
    extra: tuple[int, int]


def _conv(op: _Op, fmt: str, x_nchw: tuple[int, int, int, int], dtype: str, filt: tuple, depthwise: bool,
          out_nchw: tuple[int, ...] | None = None) -> _Conv:
    """The geometry of a TF convolution in torch's terms; ``out_nchw``: the gradient's shape, checked."""
    n, c, h, w = x_nchw
    kh, kw, ci, co = filt
    if min(c, kh, kw, ci, co) < 1:
        raise _NoCallError("the input's channels or the filter's sizes include a zero")
    if depthwise:
        if ci != c:
            raise _NoCallError(f"the filter takes {ci} channels, the input has {c}")
        groups = c
    else:
        if ci < 1 or c % ci:
            raise _NoCallError(f"the input's {c} channels are not a multiple of the filter's {ci}")
        groups = c // ci
        if co % groups:
            raise _NoCallError(f"the filter's {co} output channels do not split into {groups} groups")
    stride = op.spatial("strides", fmt)
    dilation = op.spatial("dilations", fmt)
    pads = _pads(op, fmt, (h, w), (kh, kw), stride, dilation)
    out = (_out_size(h, pads[0], kh, stride[0], dilation[0]), _out_size(w, pads[1], kw, stride[1], dilation[1]))
    if out_nchw is not None:
        want = (n, ci * co if depthwise else co, *out)
        if tuple(out_nchw) != want:
            raise _NoCallError(f"out_backprop's shape (N, C, H, W) {tuple(out_nchw)} is not the convolution's "
                                f"output {want}")
    sym, extra = _split_pads(op, pads)
    x = _activation((n, c, h + extra[0], w + extra[1]), fmt, dtype)
    if groups > 1 and not depthwise:
        op.notes.append(f"the input has {groups}x the filter's channels: a grouped convolution, groups={groups}")
    return _Conv(x, list(stride), sym, list(dilation), groups, extra)


def _conv2d(op: _Op, depthwise: bool = False, fused: bool = False) -> TorchCall:
    x_shape, dtype = op.tensor(0, 4, _FLOATS)
    f_shape, f_dtype = op.tensor(1, 4, _FLOATS)
    if f_dtype != dtype:
        raise _NoCallError(f"input is {dtype}, filter {f_dtype}")
    fmt = op.data_format()
    geo = _conv(op, fmt, _to_nchw(x_shape, fmt), dtype, f_shape, depthwise)
    bias: T | None = None
    if fused:
        fused_ops = op.fused_ops()
        left_out = fused_ops
        if fused_ops[:1] == ["BiasAdd"]:
            b_shape, b_dtype = op.tensor(2, 1)
            if b_shape != (f_shape[3],) or b_dtype != dtype:
                raise _NoCallError(f"the fused bias is not a {dtype} vector of the {f_shape[3]} output channels")
            bias, left_out = _plain(b_shape, b_dtype), fused_ops[1:]
            op.notes.append("the fused BiasAdd is conv2d's bias")
        if left_out:
            op.notes.append(f"fused {', '.join(shown(f) for f in left_out)} left out: the call is the convolution"
                            f"{' and its bias' if bias is not None else ''} only")
    _layout_note(op, fmt)
    _filter_note(op, depthwise)
    weight = _filter(f_shape, dtype, depthwise)
    return op.call("aten::conv2d", geo.x, weight, bias, geo.stride, geo.padding, geo.dilation, geo.groups)


def _sizes_attr(op: _Op, name: str) -> tuple | None:
    if op.attrs.get(name) is None:
        return None
    return tuple(op.ints(name, 4, low=0))


def _stride1(op: _Op, fmt: str, what: str) -> tuple[int, int]:
    stride = op.spatial("strides", fmt)
    if stride != (1, 1):
        raise _NoCallError(f"{what} not recorded and, with stride {list(stride)}, not determined by the other shapes")
    return stride


def _backprop_input(op: _Op, depthwise: bool) -> TorchCall:
    f_shape, dtype = op.tensor(1, 4, _FLOATS)
    g_shape, g_dtype = op.tensor(2, 4, _FLOATS)
    if g_dtype != dtype:
        raise _NoCallError(f"filter is {dtype}, out_backprop {g_dtype}")
    fmt = op.data_format()
    g_nchw = _to_nchw(g_shape, fmt)
    sizes = _sizes_attr(op, "input_sizes")
    if sizes is not None:
        x_nchw = _to_nchw(sizes, fmt)
    else:
        _stride1(op, fmt, "input_sizes")
        kh, kw = f_shape[:2]
        dilation = op.spatial("dilations", fmt)
        padding = op.text("padding", None, ("SAME", "VALID", "EXPLICIT"))
        if padding == "SAME":
            h, w = g_nchw[2], g_nchw[3]
        else:
            pads = _pads(op, fmt, (0, 0), (kh, kw), (1, 1), dilation)
            h = g_nchw[2] + (kh - 1) * dilation[0] - pads[0][0] - pads[0][1]
            w = g_nchw[3] + (kw - 1) * dilation[1] - pads[1][0] - pads[1][1]
        x_nchw = (g_nchw[0], f_shape[2], h, w)
        if min(x_nchw) < 0:
            raise _NoCallError("input_sizes not recorded and the other shapes give no input")
        op.notes.append(f"input_sizes not recorded: (N, C, H, W) {x_nchw} follows from out_backprop and the filter "
                        f"at stride 1")
    geo = _conv(op, fmt, x_nchw, dtype, f_shape, depthwise, g_nchw)
    _layout_note(op, fmt, "out_backprop and input")
    _filter_note(op, depthwise)
    op.notes.append("the input only gives the gradient's shape: its values are not read (output_mask "
                    "[True, False, False])")
    if any(geo.extra):
        op.notes.append("the input gradient covers the padded input: TF's result is its slice without the pre-padded "
                        "rows/cols")
    grad = _activation(g_nchw, fmt, dtype)
    return op.call("aten::convolution_backward", grad, geo.x, _filter(f_shape, dtype, depthwise), None, geo.stride,
                   geo.padding, geo.dilation, False, [0, 0], geo.groups, [True, False, False])


def _backprop_filter(op: _Op, depthwise: bool) -> TorchCall:
    x_shape, dtype = op.tensor(0, 4, _FLOATS)
    g_shape, g_dtype = op.tensor(2, 4, _FLOATS)
    if g_dtype != dtype:
        raise _NoCallError(f"input is {dtype}, out_backprop {g_dtype}")
    fmt = op.data_format()
    x_nchw, g_nchw = _to_nchw(x_shape, fmt), _to_nchw(g_shape, fmt)
    sizes = _sizes_attr(op, "filter_sizes")
    if sizes is not None:
        f_shape = sizes
    else:
        _stride1(op, fmt, "filter_sizes")
        dilation = op.spatial("dilations", fmt)
        if op.text("padding", None, ("SAME", "VALID", "EXPLICIT")) == "SAME":
            raise _NoCallError("filter_sizes not recorded and, with SAME padding, not determined by the other shapes")
        pads = _pads(op, fmt, (0, 0), (1, 1), (1, 1), dilation)
        spans = (x_nchw[2] + sum(pads[0]) - g_nchw[2], x_nchw[3] + sum(pads[1]) - g_nchw[3])
        if any(s < 0 or s % d for s, d in zip(spans, dilation)):
            raise _NoCallError("filter_sizes not recorded and the other shapes give no filter")
        kh, kw = spans[0] // dilation[0] + 1, spans[1] // dilation[1] + 1
        c, co = x_nchw[1], g_nchw[1]
        if depthwise and (c < 1 or co % c):
            raise _NoCallError("filter_sizes not recorded and out_backprop's channels are no multiple of the input's")
        f_shape = (kh, kw, c, co // c) if depthwise else (kh, kw, c, co)
        op.notes.append(f"filter_sizes not recorded: {list(f_shape)} follows from the input and out_backprop at "
                        f"stride 1 (assuming an ungrouped convolution)")
    geo = _conv(op, fmt, x_nchw, dtype, f_shape, depthwise, g_nchw)
    _layout_note(op, fmt, "input and out_backprop")
    _filter_note(op, depthwise)
    op.notes.append("the weight only gives the gradient's shape: its values are not read (output_mask "
                    "[False, True, False]); the gradient is (cout, cin, kh, kw), TF's is its HWIO permutation")
    grad = _activation(g_nchw, fmt, dtype)
    return op.call("aten::convolution_backward", grad, geo.x, _filter(f_shape, dtype, depthwise), None, geo.stride,
                   geo.padding, geo.dilation, False, [0, 0], geo.groups, [False, True, False])


# --- matmuls --------------------------------------------------------------------------------------------------


def _matrix(shape: tuple, dtype: str, transposed: bool) -> T:
    """A matrix (or batch of them) TF reads transposed when ``transposed``: a transposed view of its memory."""
    strides = contiguous_strides(shape)
    if not transposed:
        return T(shape, strides, dtype)
    return T((*shape[:-2], shape[-1], shape[-2]), (*strides[:-2], strides[-1], strides[-2]), dtype)


def _matmul(op: _Op, fused: bool = False) -> TorchCall:
    a_shape, dtype = op.tensor(0, 2, _MATMUL_DTYPES)
    b_shape, b_dtype = op.tensor(1, 2, _MATMUL_DTYPES)
    if b_dtype != dtype:
        raise _NoCallError(f"a is {dtype}, b {b_dtype}")
    ta, tb = op.flag("transpose_a", False), op.flag("transpose_b", False)
    a, b = _matrix(a_shape, dtype, ta), _matrix(b_shape, dtype, tb)
    if a.size[1] != b.size[0]:
        raise _NoCallError(f"a's {a.size[1]} columns are not b's {b.size[0]} rows")
    for name, flag in (("a", ta), ("b", tb)):
        if flag:
            op.notes.append(f"transpose_{name}: {name} is a transposed view of its memory")
    if fused:
        fused_ops = op.fused_ops()
        if fused_ops[:1] == ["BiasAdd"]:
            bias_shape, bias_dtype = op.tensor(2, 1)
            if bias_shape != (b.size[1],) or bias_dtype != dtype:
                raise _NoCallError(f"the fused bias is not a {dtype} vector of the {b.size[1]} output columns")
            op.notes.append("the fused BiasAdd is addmm's bias")
            if fused_ops[1:]:
                op.notes.append(f"fused {', '.join(shown(f) for f in fused_ops[1:])} left out: the call is the "
                                f"matmul and its bias only")
            return op.call("aten::addmm", _plain(bias_shape, dtype), a, b)
        if fused_ops:
            op.notes.append(f"fused {', '.join(shown(f) for f in fused_ops)} left out: the call is the matmul only")
    return op.call("aten::mm", a, b)


def _broadcast(x: tuple, y: tuple) -> tuple:
    """numpy's (TF's and torch's) broadcast shape of x and y."""
    out = []
    for i in range(1, max(len(x), len(y)) + 1):
        m, n = (x[-i] if i <= len(x) else 1), (y[-i] if i <= len(y) else 1)
        if m != n and m != 1 and n != 1:
            raise _NoCallError(f"shapes {x} and {y} do not broadcast")
        out.append(n if m == 1 else m)
    return tuple(reversed(out))


def _batch_matmul(op: _Op) -> TorchCall:
    x_shape, dtype = op.tensor(0, None, _MATMUL_DTYPES)
    y_shape, y_dtype = op.tensor(1, None, _MATMUL_DTYPES)
    if y_dtype != dtype:
        raise _NoCallError(f"x is {dtype}, y {y_dtype}")
    if len(x_shape) < 2 or len(y_shape) < 2:
        raise _NoCallError("x and y must have rank 2 or more")
    adj_x, adj_y = op.flag("adj_x", False), op.flag("adj_y", False)
    if (adj_x or adj_y) and dtype.startswith("complex"):
        raise _NoCallError("adj_x/adj_y conjugate complex matrices; the reproducer only transposes")
    x, y = _matrix(x_shape, dtype, adj_x), _matrix(y_shape, dtype, adj_y)
    if x.size[-1] != y.size[-2]:
        raise _NoCallError(f"x's {x.size[-1]} columns are not y's {y.size[-2]} rows")
    batch = _broadcast(x.size[:-2], y.size[:-2])
    if op.op_type == "BatchMatMul" and (x.size[:-2] != batch or y.size[:-2] != batch):
        raise _NoCallError("BatchMatMul's batch dimensions differ (it does not broadcast)")
    for name, flag in (("x", adj_x), ("y", adj_y)):
        if flag:
            op.notes.append(f"adj_{name}: {name} is a transposed view of its memory")
    if x.size[:-2] != y.size[:-2]:
        op.notes.append("the batch dimensions broadcast, as in TF")
    return op.call("aten::matmul", x, y)


# --- elementwise, softmax -------------------------------------------------------------------------------------

_ELEMENTWISE_NOTE = "elementwise: the tensors keep TF's shape, row-major (the same memory)"


def _bias_add(op: _Op) -> TorchCall:
    x_shape, dtype = op.tensor(0)
    b_shape, b_dtype = op.tensor(1, 1)
    if b_dtype != dtype:
        raise _NoCallError(f"value is {dtype}, bias {b_dtype}")
    fmt = "NHWC" if op.op_type == "BiasAddV1" else op.data_format()
    if len(x_shape) < 2 or (fmt == "NCHW" and len(x_shape) < 3):
        raise _NoCallError("the value's rank is too small for BiasAdd")
    channel = 1 if fmt == "NCHW" else len(x_shape) - 1
    if b_shape[0] != x_shape[channel]:
        raise _NoCallError(f"bias has {b_shape[0]} elements, the value's channels {x_shape[channel]}")
    op.notes.append(_ELEMENTWISE_NOTE)
    if fmt == "NCHW":
        rest = len(x_shape) - 2
        bias = T((b_shape[0],) + (1,) * rest, (1,) * (rest + 1), dtype)
        op.notes.append(f"NCHW: the bias is viewed as {bias.size} to broadcast along dimension 1")
    else:
        bias = _plain(b_shape, dtype)
    return op.call("aten::add", _plain(x_shape, dtype), bias)


def _binary(aten: str) -> Callable[[_Op], TorchCall]:
    def mapping(op: _Op) -> TorchCall:
        x_shape, dtype = op.tensor(0)
        y_shape, y_dtype = op.tensor(1)
        if y_dtype != dtype:
            raise _NoCallError(f"x is {dtype}, y {y_dtype}")
        _broadcast(x_shape, y_shape)
        if x_shape != y_shape:
            op.notes.append("the shapes broadcast, as in TF")
        op.notes.append(_ELEMENTWISE_NOTE)
        return op.call(aten, _plain(x_shape, dtype), _plain(y_shape, dtype))
    return mapping


def _unary(aten: str, dtypes: tuple[str, ...] | None = None, *extra: Value) -> Callable[[_Op], TorchCall]:
    def mapping(op: _Op) -> TorchCall:
        shape, dtype = op.tensor(0, None, dtypes)
        op.notes.append(_ELEMENTWISE_NOTE)
        return op.call(aten, _plain(shape, dtype), *extra)
    return mapping


def _softmax(op: _Op) -> TorchCall:
    shape, dtype = op.tensor(0, None, _FLOATS)
    if not shape:
        raise _NoCallError("Softmax takes rank 1 or more")
    op.notes.append("softmax over the last dimension, as TF's; the tensor keeps TF's shape (the same memory)")
    return op.call("aten::softmax", _plain(shape, dtype), -1, None)


# --- pooling, batch norm --------------------------------------------------------------------------------------


def _pool(op: _Op, average: bool) -> TorchCall:
    """MaxPool / AvgPool as max_pool2d / avg_pool2d (uneven padding: see :func:`_pool_padding`)."""
    x_shape, dtype = op.tensor(0, 4, _FLOATS)
    fmt = op.data_format()
    nchw = _to_nchw(x_shape, fmt)
    k = op.spatial("ksize", fmt, None)
    stride = op.spatial("strides", fmt)
    pads = _pads(op, fmt, nchw[2:], k, stride, (1, 1), explicit_ok=not average)
    for size, pad, kk, s in zip(nchw[2:], pads, k, stride):
        _out_size(size, pad, kk, s, 1)
    padding, ceil_mode, spare = _pool_padding(pads, stride, op.attrs.get("padding") == "SAME")
    if any(p[0] != p[1] for p in pads):
        uneven = (f"TF pads unevenly (top {pads[0][0]}, bottom {pads[0][1]}, left {pads[1][0]}, right "
                  f"{pads[1][1]}): padding={padding}")
        if ceil_mode:
            uneven += (" with ceil_mode=True, which keeps the window that reaches the extra bottom/right pad (stride "
                       "above 1)")
        if any(spare):
            where = " and ".join(f"one {'leading' if n > 0 else 'trailing'} {what}"
                                 for n, what in zip(spare, ("row", "col")) if n)
            cut = ", ".join({1: "1:", -1: ":-1", 0: ":"}[n] for n in spare)
            uneven += (f"; at stride 1 the larger pad goes on both sides, so torch's output has {where} more than "
                       f"TF's: TF's output is out[:, :, {cut}]")
        else:
            uneven += ", so the output has TF's shape and values"
        op.notes.append(uneven)
    if any(2 * p > kk for p, kk in zip(padding, k)):
        raise _NoCallError("the padding is more than half the window, which torch's pooling refuses")
    _layout_note(op, fmt)
    x = _activation(nchw, fmt, dtype)
    if average:
        if any(padding) or ceil_mode:
            op.notes.append("count_include_pad=False: TF averages over the input elements in each window only")
        return op.call("aten::avg_pool2d", x, list(k), list(stride), padding, ceil_mode, False, None)
    return op.call("aten::max_pool2d", x, list(k), list(stride), padding, [1, 1], ceil_mode)


def _pool_padding(pads: tuple[tuple[int, int], tuple[int, int]], stride: tuple[int, int],
                  same: bool) -> tuple[list[int], bool, tuple[int, int]]:
    """torch's symmetric pool padding for TF's (before, after) pads, whether ceil_mode is on, and per dimension
    the output row/col torch computes beyond TF's: 1 a leading one, -1 a trailing one, 0 none.

    SAME pads ``after = before + 1`` at most; at a stride above 1, ``padding=before`` with ``ceil_mode`` gives TF's
    windows exactly (the last one reaches into the missing pad, which counts for nothing). At stride 1 floor and
    ceil agree, so the larger pad goes on both sides and torch computes one window more than TF."""
    padding: list[int] = []
    spare: list[int] = []
    ceil_mode = False
    for (before, after), s in zip(pads, stride):
        if before == after:
            padding.append(before)
            spare.append(0)
        elif s == 1 and abs(after - before) == 1:
            padding.append(max(before, after))
            spare.append(1 if after > before else -1)
        elif same and after - before == 1:
            padding.append(before)
            ceil_mode = True
            spare.append(0)
        else:
            raise _NoCallError("the padding is uneven in a way torch's pooling cannot express")
    return padding, ceil_mode, (spare[0], spare[1])


def _batch_norm(op: _Op) -> TorchCall:
    x_shape, dtype = op.tensor(0, 4, _FLOATS)
    fmt = op.data_format()
    nchw = _to_nchw(x_shape, fmt)
    training = op.flag("is_training", True)
    eps = op.number("epsilon", 0.0001)
    factor = op.number("exponential_avg_factor", 1.0)
    params: list[T | None] = []
    for i, name in ((1, "scale"), (2, "offset"), (3, "mean"), (4, "variance")):
        shape, p_dtype = op.tensor(i, 1, _FLOATS)
        if shape == (0,) and i >= 3 and training:
            params.append(None)
        elif shape != (nchw[1],):
            raise _NoCallError(f"{name} has {shape[0]} elements, the input {nchw[1]} channels")
        else:
            params.append(_plain(shape, p_dtype))
    if (params[2] is None) != (params[3] is None):
        raise _NoCallError("one of mean and variance is empty, the other not")
    _layout_note(op, fmt)
    if training:
        op.notes.append("training: normalises with the batch's statistics; TF's batch mean/variance outputs and "
                        "reserve spaces are not returned")
        if params[2] is None:
            op.notes.append("mean and variance inputs are empty (TF does not update running statistics in the op): "
                            "running_mean/running_var None")
        else:
            op.notes.append(f"running statistics updated with momentum = exponential_avg_factor ({factor})")
    else:
        op.notes.append("inference: normalises with the given mean and variance")
    return op.call("aten::batch_norm", _activation(nchw, fmt, dtype), params[0], params[1], params[2], params[3],
                   training, factor, eps, True)


_MAPPINGS: dict[str, Callable[[_Op], TorchCall]] = {
    "Conv2D": _conv2d,
    "_FusedConv2D": lambda op: _conv2d(op, fused=True),
    "DepthwiseConv2dNative": lambda op: _conv2d(op, depthwise=True),
    "Conv2DBackpropInput": lambda op: _backprop_input(op, depthwise=False),
    "Conv2DBackpropFilter": lambda op: _backprop_filter(op, depthwise=False),
    "DepthwiseConv2dNativeBackpropInput": lambda op: _backprop_input(op, depthwise=True),
    "DepthwiseConv2dNativeBackpropFilter": lambda op: _backprop_filter(op, depthwise=True),
    "MatMul": _matmul,
    "_FusedMatMul": lambda op: _matmul(op, fused=True),
    "BatchMatMul": _batch_matmul,
    "BatchMatMulV2": _batch_matmul,
    "BiasAdd": _bias_add,
    "BiasAddV1": _bias_add,
    "MaxPool": lambda op: _pool(op, average=False),
    "AvgPool": lambda op: _pool(op, average=True),
    "FusedBatchNorm": _batch_norm,
    "FusedBatchNormV2": _batch_norm,
    "FusedBatchNormV3": _batch_norm,
    "Relu": _unary("aten::relu", (*_FLOATS, "int8", "int16", "int32", "int64", "uint8")),
    "Relu6": _unary("aten::relu6", _FLOATS),
    "Softmax": _softmax,
    "AddV2": _binary("aten::add"),
    "Add": _binary("aten::add"),
    "Sub": _binary("aten::sub"),
    "Mul": _binary("aten::mul"),
}

#: The TF op types :func:`torch_equivalent` maps.
SUPPORTED = tuple(sorted(_MAPPINGS))
