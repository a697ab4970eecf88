"""TensorFlow op -> PyTorch equivalent (``opscope repro --as torch``).

Each mapping is checked three ways: its arguments (worked out by hand from the TF shapes and attributes), a run of
the aten op with those arguments (the output's shape must be TF's, computed by hand from TF's rules), and where
the values matter, the numbers: the torch tensors are views of the very memory TF's tensors occupy (``as_strided``
on the row-major TF data), and the result is compared with TF's semantics written out independently here
(convolution as a sum over the window of HWIO filter taps, TF's SAME padding, autograd for the backprops).
"""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from opscope.repro import values
from opscope.repro.tensorflow import SUPPORTED, TFInput, TorchCall, same_padding, shown, torch_dtype, torch_equivalent
from opscope.repro.values import T

try:
    import torch
    import torch.nn.functional as F  # noqa: N812
except ImportError:  # the mapping is pure; only the runs need torch
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="running the aten ops needs torch")
I = TFInput  # noqa: E741


def _f(*shape: int, dtype: str = "float") -> TFInput:
    return TFInput(tuple(shape), dtype)


def _call(op_type: str, inputs: list[TFInput], **attrs) -> TorchCall:
    got = torch_equivalent(op_type, inputs, attrs)
    assert isinstance(got, TorchCall), got
    for arg in (*got.args, *got.kwargs.values()):
        values.source(arg)  # every argument is a value the script writer can write
    return got


# --- running a call -------------------------------------------------------------------------------------------

def _dtype(name: str):
    return getattr(torch, name)


def _random(t: T):
    """A tensor with ``t``'s size, strides and dtype over a storage just large enough (random values)."""
    n = t.storage_elements()
    dtype = _dtype(t.dtype)
    if dtype.is_floating_point:
        flat = torch.randn(n, dtype=torch.float64).to(dtype)
    elif dtype == torch.bool:
        flat = torch.randint(0, 2, (n,)).bool()
    else:
        flat = torch.randint(-5, 6, (n,), dtype=dtype)
    return torch.as_strided(flat, t.size, t.stride)


def _view(t: T, memory):
    """``t`` as a view of ``memory`` (a tensor whose row-major data is the TF tensor's memory)."""
    assert t.storage_elements() <= memory.numel()
    return torch.as_strided(memory.contiguous().flatten().to(_dtype(t.dtype)), t.size, t.stride)


def _run(call: TorchCall, *given):
    """Runs the call: ``given`` tensors replace the T arguments in order (the rest are random)."""
    queue = list(given)
    args = []
    for arg in call.args:
        if isinstance(arg, T):
            args.append(queue.pop(0) if queue else _random(arg))
        else:
            args.append(arg)
    packet = getattr(torch.ops.aten, call.op.removeprefix("aten::"))
    return packet(*args, **call.kwargs)  # the packet picks the overload from the arguments, as a script's call does


def _nhwc(t) -> tuple:
    """TF's NHWC shape of a torch (N, C, H, W) result."""
    return tuple(t.permute(0, 2, 3, 1).shape)


def _close(a, b, tol: float = 1e-9) -> None:
    assert a.shape == b.shape
    assert torch.allclose(a.double(), b.double(), rtol=tol, atol=tol), (a - b).abs().max()


# --- TF's semantics written out (the references) --------------------------------------------------------------


def _tf_pad(x, pads, value: float = 0.0):
    """An NHWC tensor padded as TF pads: pads = ((top, bottom), (left, right))."""
    return F.pad(x, (0, 0, pads[1][0], pads[1][1], pads[0][0], pads[0][1]), value=value)


def _tf_conv(x, f, stride, pads, dilation=(1, 1), depthwise=False):
    """TF's Conv2D / DepthwiseConv2dNative on NHWC ``x`` and an HWIO (HWCM) filter: a sum over the filter taps."""
    xp = _tf_pad(x, pads)
    n, h, w, c = xp.shape
    kh, kw, ci, co = f.shape
    oh = (h - (kh - 1) * dilation[0] - 1) // stride[0] + 1
    ow = (w - (kw - 1) * dilation[1] - 1) // stride[1] + 1
    out = torch.zeros(n, oh, ow, ci * co if depthwise else co, dtype=x.dtype)
    groups = 1 if depthwise else c // ci
    for i in range(kh):
        for j in range(kw):
            r0, c0 = i * dilation[0], j * dilation[1]
            patch = xp[:, r0:r0 + (oh - 1) * stride[0] + 1:stride[0], c0:c0 + (ow - 1) * stride[1] + 1:stride[1], :]
            if depthwise:  # output channel c*mult + m is input channel c times filter[i, j, c, m]
                out += (patch[..., :, None] * f[i, j]).reshape(n, oh, ow, ci * co)
                continue
            per = co // groups
            for g in range(groups):
                out[..., g * per:(g + 1) * per] += torch.einsum(
                    "nhwc,cd->nhwd", patch[..., g * ci:(g + 1) * ci], f[i, j][:, g * per:(g + 1) * per])
    return out


# --- dtypes, names --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("tf", "torch_name"), [
    ("float", "float32"), ("DT_FLOAT", "float32"), ("float32", "float32"), ("tf.float32", "float32"),
    ("half", "float16"), ("DT_HALF", "float16"), ("bfloat16", "bfloat16"), ("DT_BFLOAT16", "bfloat16"),
    ("double", "float64"), ("int32", "int32"), ("DT_INT64", "int64"), ("bool", "bool"), ("uint8", "uint8"),
    ("complex64", "complex64"), ("resource", None), ("variant", None), ("", None), ("x" * 1000, None), (None, None),
])
def test_dtype_names(tf, torch_name):
    assert torch_dtype(tf) == torch_name


def test_unsupported_op_is_a_reason_naming_it():
    assert torch_equivalent("Conv3D", [], {}) == "no PyTorch equivalent for TF op Conv3D in opscope's table"
    assert torch_equivalent("NonMaxSuppressionV5", [], {}).startswith("no PyTorch equivalent for TF op")


@pytest.mark.parametrize("name", ["Relu\x1b[2J\x07", "Conv2D\nimport os", "\u202eRelu", "x" * 10_000, "", "a'\"b"])
def test_hostile_op_type_is_shown_escaped(name):
    reason = torch_equivalent(name, [_f(2, 2)], {})
    assert isinstance(reason, str)
    assert reason.startswith("no PyTorch equivalent for TF op ")
    assert reason.isprintable()  # no control or invisible characters get through
    assert len(reason) < 200
    assert shown(name).startswith("'")  # quoted: not a bare name


def test_hostile_attributes_are_reasons_or_escaped_notes():
    x, f = _f(1, 5, 5, 2), _f(3, 3, 2, 4)
    for attrs in ({"padding": "SAME\x1b[31m"}, {"padding": "SAME", "strides": "1,1"},
                  {"padding": "SAME", "strides": [1, True, 1, 1]}, {"padding": "SAME", "strides": [1, -1, 1, 1]},
                  {"padding": "SAME", "data_format": "NH\nWC"}, {"padding": "EXPLICIT", "explicit_paddings": [1]},
                  {"padding": "SAME", "strides": [1, 2 ** 70, 1, 1], "dilations": "x"}):
        reason = torch_equivalent("Conv2D", [x, f], attrs)
        assert isinstance(reason, str) and reason.startswith("TF op Conv2D: "), reason
        assert reason.isprintable()
        assert "\x1b" not in reason and "NH\nWC" not in reason
    fused = _call("_FusedConv2D", [x, f, _f(4)], padding="SAME", fused_ops=["BiasAdd", "Evil\x1b]0;pwn\x07"])
    assert all(note.isprintable() for note in fused.notes)
    assert any("'Evil\\x1b]0;pwn\\x07' left out" in note for note in fused.notes)
    # a dtype name from the trace is shown escaped too
    reason = torch_equivalent("Relu", [TFInput((2,), "flo\x1bat")], {})
    assert reason == "TF op Relu: dtype of input 0 ('flo\\x1bat') has no torch dtype"


def test_unrecorded_inputs_are_reasons():
    attrs = {"padding": "SAME"}
    assert torch_equivalent("Conv2D", [TFInput(None, "float"), _f(3, 3, 2, 4)], attrs) == \
        "TF op Conv2D: shape of input 0 not recorded"
    assert torch_equivalent("Conv2D", [_f(1, 5, 5, 2), TFInput((3, 3, 2, 4), None)], attrs) == \
        "TF op Conv2D: dtype of input 1 not recorded"
    assert torch_equivalent("Conv2D", [_f(1, 5, 5, 2)], attrs) == \
        "TF op Conv2D: input 1 not recorded (the op has 1 inputs)"
    assert torch_equivalent("Conv2D", [_f(1, 5, 5, 2), _f(3, 3, 2, 4)], {}) == \
        "TF op Conv2D: attribute padding not recorded (TF has no default for it)"
    assert torch_equivalent("Conv2D", [_f(5, 5, 2), _f(3, 3, 2, 4)], attrs) == \
        "TF op Conv2D: input 0 has rank 3, Conv2D takes rank 4"
    assert torch_equivalent("Conv2D", [_f(1, 5, 5, 3), _f(3, 3, 2, 4)], attrs) == \
        "TF op Conv2D: the input's 3 channels are not a multiple of the filter's 2"
    assert torch_equivalent("Conv2D", [_f(1, 2, 2, 2), _f(3, 3, 2, 4)], {"padding": "VALID"}) == \
        "TF op Conv2D: the filter or window is larger than the padded input"
    for x, f in (((1, 5, 5, 0), (3, 3, 0, 4)), ((1, 5, 5, 2), (0, 3, 2, 4)), ((1, 5, 5, 2), (3, 3, 2, 0))):
        assert torch_equivalent("Conv2D", [_f(*x), _f(*f)], attrs) == \
            "TF op Conv2D: the input's channels or the filter's sizes include a zero"
    assert torch_equivalent("MatMul", [_f(2, 3), _f(4, 5)], {}) == "TF op MatMul: a's 3 columns are not b's 4 rows"
    assert torch_equivalent("Conv2D", [_f(1, 5, 5, 2, dtype="int32"), _f(3, 3, 2, 4, dtype="int32")], attrs) == \
        "TF op Conv2D: input 0 is int32; torch's equivalent takes float32, float64, float16, bfloat16"


def test_module_does_not_import_torch():
    code = "import sys, opscope.repro.tensorflow; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


# --- convolutions ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("size", "k", "s", "d", "want"), [
    (7, 3, 2, 1, (1, 1)), (7, 3, 1, 1, (1, 1)), (8, 4, 1, 1, (1, 2)), (8, 3, 2, 1, (0, 1)), (7, 1, 2, 1, (0, 0)),
    (5, 3, 1, 2, (2, 2)), (224, 7, 2, 1, (2, 3)), (1, 5, 3, 1, (2, 2)),
])
def test_same_padding_is_tfs(size, k, s, d, want):
    # TF: out = ceil(size / s); total = max((out - 1) * s + (k - 1) * d + 1 - size, 0); before = total // 2
    assert same_padding(size, k, s, d) == want


@needs_torch
def test_conv2d_same_stride2_the_issue_example():
    call = _call("Conv2D", [_f(1, 7, 7, 3), _f(3, 3, 3, 8)], strides=[1, 2, 2, 1], padding="SAME")
    assert call.op == "aten::conv2d"
    # NHWC (1, 7, 7, 3) as (N, C, H, W) channels_last: strides (H*W*C, 1, W*C, C) = (147, 1, 21, 3)
    # HWIO (3, 3, 3, 8): memory strides (72, 24, 8, 1) -> weight (cout, cin, kh, kw) strides (1, 8, 72, 24)
    assert call.args == (T((1, 3, 7, 7), (147, 1, 21, 3), "float32"), T((8, 3, 3, 3), (1, 8, 72, 24), "float32"),
                         None, [2, 2], [1, 1], [1, 1], 1)
    assert "NHWC input as a torch (N, C, H, W) tensor with channels_last strides, the same memory" in call.notes
    assert _nhwc(_run(call)) == (1, 4, 4, 8)  # ceil(7 / 2) = 4


@needs_torch
@pytest.mark.parametrize(("x", "f", "attrs", "tf_out", "pads"), [
    # SAME, stride 2, even pads: (1, 1) both ways
    ((1, 7, 7, 3), (3, 3, 3, 8), {"strides": [1, 2, 2, 1], "padding": "SAME"}, (1, 4, 4, 8), ((1, 1), (1, 1))),
    # SAME, stride 1, even kernel: TF pads (1, 2); torch gets one pre-padded row and col
    ((2, 8, 6, 3), (4, 4, 3, 5), {"padding": "SAME"}, (2, 8, 6, 5), ((1, 2), (1, 2))),
    # SAME, stride 2, uneven on H only (8: total 1 -> (0, 1)), 7 on W (total 2 -> (1, 1))
    ((1, 8, 7, 2), (3, 3, 2, 4), {"strides": [1, 2, 2, 1], "padding": "SAME"}, (1, 4, 4, 4), ((0, 1), (1, 1))),
    # VALID with dilation 2: 9 - (3 - 1) * 2 = 5
    ((1, 9, 9, 2), (3, 3, 2, 3), {"padding": "VALID", "dilations": [1, 2, 2, 1]}, (1, 5, 5, 3), ((0, 0), (0, 0))),
    # EXPLICIT uneven: (9 + 2 + 0 - 3) // 2 + 1 = 5 rows, (6 + 1 + 3 - 3) // 1 + 1 = 8 cols
    ((1, 9, 6, 2), (3, 3, 2, 3), {"padding": "EXPLICIT", "strides": [1, 2, 1, 1],
                                  "explicit_paddings": [0, 0, 2, 0, 1, 3, 0, 0]}, (1, 5, 8, 3), ((2, 0), (1, 3))),
    # grouped: 6 input channels, filter cin 2 -> groups 3
    ((1, 5, 5, 6), (3, 3, 2, 9), {"padding": "SAME"}, (1, 5, 5, 9), ((1, 1), (1, 1))),
])
def test_conv2d_shapes_and_values_are_tfs(x, f, attrs, tf_out, pads):
    call = _call("Conv2D", [_f(*x, dtype="double"), _f(*f, dtype="double")], **attrs)
    xs, fs = torch.randn(x, dtype=torch.float64), torch.randn(f, dtype=torch.float64)
    want = _tf_conv(xs, fs, call.args[3], pads, call.args[5])
    assert tuple(want.shape) == tf_out
    # the input is TF's memory, pre-padded where TF pads unevenly (as the note says)
    sym = call.args[4]
    extra = tuple((p[0] - s, p[1] - s) for p, s in zip(pads, sym))
    assert sum(map(sum, extra)) == 0 or any("pads unevenly" in n for n in call.notes)
    x_mem = _tf_pad(xs, extra)
    got = _run(call, _view(call.args[0], x_mem), _view(call.args[1], fs))
    assert _nhwc(got) == tf_out
    _close(got.permute(0, 2, 3, 1), want)


@needs_torch
@pytest.mark.parametrize("size", [1, 2, 5, 8, 13])
@pytest.mark.parametrize("k", [1, 2, 3, 4])
@pytest.mark.parametrize("s", [1, 2, 3])
@pytest.mark.parametrize("d", [1, 2])
def test_conv2d_same_output_is_ceil_size_over_stride(size, k, s, d):
    call = _call("Conv2D", [_f(1, size, size + 1, 2), _f(k, k, 2, 3)], strides=[1, s, s, 1],
                 dilations=[1, d, d, 1], padding="SAME")
    assert _nhwc(_run(call)) == (1, math.ceil(size / s), math.ceil((size + 1) / s), 3)


@needs_torch
def test_conv2d_nchw():
    call = _call("Conv2D", [_f(2, 3, 10, 10), _f(3, 3, 3, 4)], data_format="NCHW", strides=[1, 1, 2, 2],
                 padding="VALID")
    assert call.args[0] == T((2, 3, 10, 10), (300, 100, 10, 1), "float32")  # NCHW: contiguous, as it is
    assert call.args[3] == [2, 2]
    assert "NCHW input as a contiguous torch tensor, the same memory" in call.notes
    assert tuple(_run(call).shape) == (2, 4, 4, 4)  # (10 - 3) // 2 + 1
    # strides in NHWC order moving along the channels are refused
    assert torch_equivalent("Conv2D", [_f(2, 3, 10, 10), _f(3, 3, 3, 4)],
                            {"data_format": "NCHW", "strides": [1, 2, 2, 1], "padding": "VALID"}) == \
        "TF op Conv2D: attribute strides moves along the batch or channels; torch's op does not"


def test_missing_strides_assume_one_and_say_so():
    call = _call("Conv2D", [_f(1, 5, 5, 2), _f(3, 3, 2, 4)], padding="VALID")
    assert call.args[3] == [1, 1]
    assert "attribute strides not recorded: 1 assumed" in call.notes


@needs_torch
def test_conv2d_bfloat16_runs():
    call = _call("Conv2D", [_f(1, 6, 6, 4, dtype="DT_BFLOAT16"), _f(3, 3, 4, 4, dtype="bfloat16")], padding="SAME")
    out = _run(call)
    assert out.dtype == torch.bfloat16 and _nhwc(out) == (1, 6, 6, 4)


@needs_torch
def test_fused_conv2d_keeps_the_bias_and_says_what_is_left_out():
    x, f, b = _f(1, 6, 6, 3, dtype="double"), _f(3, 3, 3, 4, dtype="double"), _f(4, dtype="double")
    call = _call("_FusedConv2D", [x, f, b], padding="SAME", fused_ops=["BiasAdd", "Relu"], strides=[1, 1, 1, 1])
    assert call.op == "aten::conv2d"
    assert call.args[2] == T((4,), (1,), "float64")
    assert "the fused BiasAdd is conv2d's bias" in call.notes
    assert "fused Relu left out: the call is the convolution and its bias only" in call.notes
    xs, fs, bs = (torch.randn(s, dtype=torch.float64) for s in ((1, 6, 6, 3), (3, 3, 3, 4), (4,)))
    got = _run(call, _view(call.args[0], xs), _view(call.args[1], fs), bs)
    _close(got.permute(0, 2, 3, 1), _tf_conv(xs, fs, (1, 1), ((1, 1), (1, 1))) + bs)
    # fused batch norm: the convolution only
    bn = _call("_FusedConv2D", [x, f, b, b, b, b], padding="SAME", fused_ops=["FusedBatchNorm", "Relu"])
    assert bn.args[2] is None
    assert "fused FusedBatchNorm, Relu left out: the call is the convolution only" in bn.notes
    assert _nhwc(_run(bn)) == (1, 6, 6, 4)
    # a bias that is not the output channels' vector is refused
    assert "fused bias" in torch_equivalent("_FusedConv2D", [x, f, _f(3, dtype="double")],
                                            {"padding": "SAME", "fused_ops": ["BiasAdd"]})


@needs_torch
@pytest.mark.parametrize(("x", "f", "attrs", "tf_out", "pads"), [
    ((1, 9, 9, 4), (3, 3, 4, 2), {"strides": [1, 2, 2, 1], "padding": "SAME"}, (1, 5, 5, 8), ((1, 1), (1, 1))),
    ((2, 8, 8, 3), (4, 4, 3, 1), {"padding": "SAME"}, (2, 8, 8, 3), ((1, 2), (1, 2))),
    ((1, 10, 7, 5), (3, 3, 5, 3), {"padding": "VALID", "dilations": [1, 2, 2, 1]}, (1, 6, 3, 15), ((0, 0), (0, 0))),
])
def test_depthwise_shapes_and_values_are_tfs(x, f, attrs, tf_out, pads):
    call = _call("DepthwiseConv2dNative", [_f(*x, dtype="double"), _f(*f, dtype="double")], **attrs)
    c, m = f[2], f[3]
    kh, kw = f[:2]
    # (kh, kw, C, mult) memory strides (kw*C*m, C*m, m, 1) -> weight (C*m, 1, kh, kw): (1, C*m, kw*C*m, C*m)
    assert call.args[1] == T((c * m, 1, kh, kw), (1, c * m, kw * c * m, c * m), "float64")
    assert call.args[6] == c  # groups
    xs, fs = torch.randn(x, dtype=torch.float64), torch.randn(f, dtype=torch.float64)
    extra = tuple((p[0] - s, p[1] - s) for p, s in zip(pads, call.args[4]))
    got = _run(call, _view(call.args[0], _tf_pad(xs, extra)), _view(call.args[1], fs))
    assert _nhwc(got) == tf_out
    _close(got.permute(0, 2, 3, 1), _tf_conv(xs, fs, call.args[3], pads, call.args[5], depthwise=True))


# --- convolution backprops ------------------------------------------------------------------------------------


def _tf_grads(xs, fs, g, stride, pads, dilation=(1, 1), depthwise=False):
    """TF's input and filter gradients: autograd through the reference convolution."""
    xs, fs = xs.clone().requires_grad_(), fs.clone().requires_grad_()
    _tf_conv(xs, fs, stride, pads, dilation, depthwise).backward(g)
    return xs.grad, fs.grad


@needs_torch
@pytest.mark.parametrize("depthwise", [False, True])
@pytest.mark.parametrize(("x", "k", "attrs", "pads"), [
    ((2, 7, 7, 3), (3, 3), {"strides": [1, 2, 2, 1], "padding": "SAME"}, ((1, 1), (1, 1))),
    ((1, 8, 8, 2), (4, 4), {"strides": [1, 1, 1, 1], "padding": "SAME"}, ((1, 2), (1, 2))),
    ((1, 8, 9, 2), (3, 3), {"strides": [1, 2, 2, 1], "padding": "VALID"}, ((0, 0), (0, 0))),
])
def test_backprop_input_is_tfs(depthwise, x, k, attrs, pads):
    op = "DepthwiseConv2dNativeBackpropInput" if depthwise else "Conv2DBackpropInput"
    f = (*k, x[3], 2 if depthwise else 5)
    xs, fs = torch.randn(x, dtype=torch.float64), torch.randn(f, dtype=torch.float64)
    out = _tf_conv(xs, fs, attrs["strides"][1:3], pads, depthwise=depthwise)
    g = torch.randn(out.shape, dtype=torch.float64)
    call = _call(op, [_f(4, dtype="int32"), _f(*f, dtype="double"), _f(*out.shape, dtype="double")],
                 input_sizes=list(x), **attrs)
    assert call.op == "aten::convolution_backward"
    assert call.args[3] is None and call.args[7:] == (False, [0, 0], x[3] if depthwise else 1, [True, False, False])
    grad_input, grad_weight, grad_bias = _run(call, _view(call.args[0], g), _random(call.args[1]),
                                              _view(call.args[2], fs))
    assert grad_weight is None and grad_bias is None
    want, _ = _tf_grads(xs, fs, g, attrs["strides"][1:3], pads, depthwise=depthwise)
    extra = [(p[0] - s, p[1] - s) for p, s in zip(pads, call.args[5])]
    # the gradient of the pre-padded input: TF's is its slice without the extra rows/cols
    assert _nhwc(grad_input) == (x[0], x[1] + sum(extra[0]), x[2] + sum(extra[1]), x[3])
    inner = grad_input.permute(0, 2, 3, 1)[:, extra[0][0]:extra[0][0] + x[1], extra[1][0]:extra[1][0] + x[2]]
    _close(inner, want)


@needs_torch
@pytest.mark.parametrize("depthwise", [False, True])
@pytest.mark.parametrize(("x", "k", "attrs", "pads"), [
    ((2, 7, 7, 3), (3, 3), {"strides": [1, 2, 2, 1], "padding": "SAME"}, ((1, 1), (1, 1))),
    ((1, 8, 8, 2), (4, 4), {"strides": [1, 1, 1, 1], "padding": "SAME"}, ((1, 2), (1, 2))),
    ((1, 8, 9, 2), (3, 2), {"strides": [1, 2, 2, 1], "padding": "VALID"}, ((0, 0), (0, 0))),
])
def test_backprop_filter_is_tfs(depthwise, x, k, attrs, pads):
    op = "DepthwiseConv2dNativeBackpropFilter" if depthwise else "Conv2DBackpropFilter"
    f = (*k, x[3], 2 if depthwise else 5)
    xs, fs = torch.randn(x, dtype=torch.float64), torch.randn(f, dtype=torch.float64)
    out = _tf_conv(xs, fs, attrs["strides"][1:3], pads, depthwise=depthwise)
    g = torch.randn(out.shape, dtype=torch.float64)
    call = _call(op, [_f(*x, dtype="double"), _f(4, dtype="int32"), _f(*out.shape, dtype="double")],
                 filter_sizes=list(f), **attrs)
    assert call.args[-1] == [False, True, False]
    extra = [(p[0] - s, p[1] - s) for p, s in zip(pads, call.args[5])]
    _, grad_weight, _ = _run(call, _view(call.args[0], g), _view(call.args[1], _tf_pad(xs, extra)),
                             _random(call.args[2]))
    _, want = _tf_grads(xs, fs, g, attrs["strides"][1:3], pads, depthwise=depthwise)
    # torch's (cout, cin, kh, kw) gradient is TF's HWIO one permuted; depthwise: (C*m, 1, kh, kw) of (kh, kw, C, m)
    if depthwise:
        assert tuple(grad_weight.shape) == (f[2] * f[3], 1, *k)
        _close(grad_weight.reshape(f[2], f[3], *k).permute(2, 3, 0, 1), want)
    else:
        assert tuple(grad_weight.shape) == (f[3], f[2], *k)
        _close(grad_weight.permute(2, 3, 1, 0), want)


@needs_torch
def test_backprop_sizes_derived_at_stride_one():
    # BackpropInput, VALID, stride 1: H = 6 + 3 - 1 = 8, W = 5 + 2 - 1 = 6; C from the filter
    call = _call("Conv2DBackpropInput", [_f(4, dtype="int32"), _f(3, 2, 4, 7), _f(2, 6, 5, 7)],
                 strides=[1, 1, 1, 1], padding="VALID")
    assert call.args[1] == T((2, 4, 8, 6), (192, 1, 24, 4), "float32")
    assert any(n.startswith("input_sizes not recorded: (N, C, H, W) (2, 4, 8, 6)") for n in call.notes)
    assert _nhwc(_run(call)[0]) == (2, 8, 6, 4)
    # SAME, stride 1: the input has the gradient's spatial size
    same = _call("Conv2DBackpropInput", [_f(4, dtype="int32"), _f(3, 3, 4, 7), _f(2, 6, 5, 7)],
                 strides=[1, 1, 1, 1], padding="SAME")
    assert _nhwc(_run(same)[0]) == (2, 6, 5, 4)
    # BackpropFilter, VALID, stride 1: kh = 8 - 6 + 1 = 3, kw = 6 - 5 + 1 = 2
    filt = _call("Conv2DBackpropFilter", [_f(2, 8, 6, 4), _f(4, dtype="int32"), _f(2, 6, 5, 7)],
                 strides=[1, 1, 1, 1], padding="VALID")
    assert filt.args[2] == T((7, 4, 3, 2), (1, 7, 56, 28), "float32")
    assert tuple(_run(filt)[1].shape) == (7, 4, 3, 2)
    # depthwise: mult = 8 / 4
    dw = _call("DepthwiseConv2dNativeBackpropFilter", [_f(1, 8, 8, 4), _f(4, dtype="int32"), _f(1, 6, 6, 8)],
               strides=[1, 1, 1, 1], padding="VALID")
    assert dw.args[2].size == (8, 1, 3, 3)
    assert tuple(_run(dw)[1].shape) == (8, 1, 3, 3)


def test_backprop_sizes_not_derivable_are_reasons():
    assert torch_equivalent("Conv2DBackpropInput", [_f(4, dtype="int32"), _f(3, 3, 4, 7), _f(2, 6, 5, 7)],
                            {"strides": [1, 2, 2, 1], "padding": "SAME"}) == \
        ("TF op Conv2DBackpropInput: input_sizes not recorded and, with stride [2, 2], not determined by the other "
         "shapes")
    assert torch_equivalent("Conv2DBackpropFilter", [_f(2, 8, 6, 4), _f(4, dtype="int32"), _f(2, 8, 6, 7)],
                            {"strides": [1, 1, 1, 1], "padding": "SAME"}) == \
        ("TF op Conv2DBackpropFilter: filter_sizes not recorded and, with SAME padding, not determined by the "
         "other shapes")
    # sizes that contradict the gradient's shape
    reason = torch_equivalent("Conv2DBackpropInput", [_f(4, dtype="int32"), _f(3, 3, 4, 7), _f(2, 6, 5, 7)],
                              {"strides": [1, 1, 1, 1], "padding": "SAME", "input_sizes": [2, 9, 5, 4]})
    assert reason.startswith("TF op Conv2DBackpropInput: out_backprop's shape (N, C, H, W) (2, 7, 6, 5) is not")


# --- matmuls --------------------------------------------------------------------------------------------------


@needs_torch
@pytest.mark.parametrize(("ta", "tb"), [(False, False), (True, False), (False, True), (True, True)])
def test_matmul_transposes_are_views_of_the_memory(ta, tb):
    a_mem = torch.randn((5, 3) if ta else (3, 5), dtype=torch.float64)
    b_mem = torch.randn((4, 5) if tb else (5, 4), dtype=torch.float64)
    call = _call("MatMul", [_f(*a_mem.shape, dtype="double"), _f(*b_mem.shape, dtype="double")],
                 transpose_a=ta, transpose_b=tb)
    assert call.op == "aten::mm"
    assert call.args[0] == (T((3, 5), (1, 3), "float64") if ta else T((3, 5), (5, 1), "float64"))
    assert call.args[1] == (T((5, 4), (1, 5), "float64") if tb else T((5, 4), (4, 1), "float64"))
    got = _run(call, _view(call.args[0], a_mem), _view(call.args[1], b_mem))
    _close(got, (a_mem.T if ta else a_mem) @ (b_mem.T if tb else b_mem))


@needs_torch
def test_fused_matmul_is_addmm():
    call = _call("_FusedMatMul", [_f(8, 16), _f(16, 4), _f(4)], fused_ops=["BiasAdd", "Relu"])
    assert call.op == "aten::addmm"
    assert call.args == (T((4,), (1,), "float32"), T((8, 16), (16, 1), "float32"), T((16, 4), (4, 1), "float32"))
    assert "fused Relu left out: the call is the matmul and its bias only" in call.notes
    assert tuple(_run(call).shape) == (8, 4)


@needs_torch
def test_batch_matmul_broadcasts_and_adjoints():
    call = _call("BatchMatMulV2", [_f(2, 1, 3, 5), _f(4, 6, 5)], adj_y=True)
    assert call.op == "aten::matmul"
    assert call.args[1] == T((4, 5, 6), (30, 1, 5), "float32")
    assert tuple(_run(call).shape) == (2, 4, 3, 6)
    x, y = torch.randn(3, 2, 4, dtype=torch.float64), torch.randn(3, 5, 2, dtype=torch.float64)
    adj = _call("BatchMatMulV2", [_f(3, 2, 4, dtype="double"), _f(3, 5, 2, dtype="double")], adj_x=True, adj_y=True)
    _close(_run(adj, _view(adj.args[0], x), _view(adj.args[1], y)), x.transpose(1, 2) @ y.transpose(1, 2))
    assert torch_equivalent("BatchMatMulV2", [_f(2, 3, 5), _f(3, 5, 2)], {}) == \
        "TF op BatchMatMulV2: shapes (2,) and (3,) do not broadcast"


# --- elementwise, softmax -------------------------------------------------------------------------------------


@needs_torch
def test_bias_add_nhwc_and_nchw():
    call = _call("BiasAdd", [_f(2, 4, 4, 6), _f(6)])
    assert call.op == "aten::add"
    assert call.args == (T((2, 4, 4, 6), (96, 24, 6, 1), "float32"), T((6,), (1,), "float32"))
    assert tuple(_run(call).shape) == (2, 4, 4, 6)
    nchw = _call("BiasAdd", [_f(2, 6, 4, 4, dtype="double"), _f(6, dtype="double")], data_format="NCHW")
    assert nchw.args[1] == T((6, 1, 1), (1, 1, 1), "float64")
    x, b = torch.randn(2, 6, 4, 4, dtype=torch.float64), torch.randn(6, dtype=torch.float64)
    _close(_run(nchw, x, _view(nchw.args[1], b)), x + b[:, None, None])
    assert torch_equivalent("BiasAdd", [_f(2, 4, 4, 6), _f(4)], {}) == \
        "TF op BiasAdd: bias has 4 elements, the value's channels 6"


@needs_torch
@pytest.mark.parametrize(("op", "x", "y", "out"), [
    ("AddV2", (2, 3, 4), (4,), (2, 3, 4)), ("AddV2", (2, 1, 4), (3, 1), (2, 3, 4)), ("Mul", (5,), (), (5,)),
    ("Mul", (2, 3), (2, 3), (2, 3)),
])
def test_binary_broadcast(op, x, y, out):
    call = _call(op, [_f(*x), _f(*y)])
    assert call.op == {"AddV2": "aten::add", "Mul": "aten::mul"}[op]
    assert tuple(_run(call).shape) == out
    assert ("the shapes broadcast, as in TF" in call.notes) == (x != y)


def test_binary_mismatches_are_reasons():
    assert torch_equivalent("AddV2", [_f(2, 3), _f(4)], {}) == "TF op AddV2: shapes (2, 3) and (4,) do not broadcast"
    assert torch_equivalent("Mul", [_f(2), _f(2, dtype="half")], {}) == "TF op Mul: x is float32, y float16"


@needs_torch
def test_relu_relu6_softmax():
    x = torch.linspace(-8, 8, 24, dtype=torch.float64).reshape(2, 3, 4)
    relu = _call("Relu", [_f(2, 3, 4, dtype="double")])
    assert relu.op == "aten::relu"
    _close(_run(relu, x), x.clamp(min=0))
    relu6 = _call("Relu6", [_f(2, 3, 4, dtype="double")])
    assert relu6.op == "aten::relu6"
    _close(_run(relu6, x), x.clamp(0, 6))
    soft = _call("Softmax", [_f(2, 3, 4, dtype="double")])
    assert soft.op == "aten::softmax" and soft.args[1:] == (-1, None)
    _close(_run(soft, x), x.exp() / x.exp().sum(-1, keepdim=True))
    assert tuple(_run(_call("Relu", [_f(3, 3, dtype="int32")])).shape) == (3, 3)


# --- pooling --------------------------------------------------------------------------------------------------


def _tf_pool(x, k, s, pads, average):
    """TF's MaxPool / AvgPool on NHWC ``x``: pads never win a max nor count in an average."""
    xp = _tf_pad(x, pads, value=-math.inf if average is False else 0.0)
    ones = _tf_pad(torch.ones_like(x), pads)
    n, h, w, c = xp.shape
    oh, ow = (h - k[0]) // s[0] + 1, (w - k[1]) // s[1] + 1
    out = torch.empty(n, oh, ow, c, dtype=x.dtype)
    for i in range(oh):
        for j in range(ow):
            win = xp[:, i * s[0]:i * s[0] + k[0], j * s[1]:j * s[1] + k[1]]
            cnt = ones[:, i * s[0]:i * s[0] + k[0], j * s[1]:j * s[1] + k[1]].sum((1, 2))
            out[:, i, j] = win.sum((1, 2)) / cnt if average else win.amax((1, 2))
    return out


@needs_torch
@pytest.mark.parametrize("average", [False, True])
@pytest.mark.parametrize(("x", "k", "s", "padding"), [
    ((1, 7, 7, 2), (3, 3), (2, 2), "SAME"), ((2, 8, 8, 3), (3, 3), (2, 2), "SAME"),
    ((1, 8, 9, 2), (2, 2), (2, 2), "SAME"), ((1, 6, 6, 2), (2, 2), (1, 1), "SAME"),
    ((1, 9, 10, 2), (3, 2), (2, 3), "VALID"), ((1, 112, 112, 1), (3, 3), (2, 2), "SAME"),
])
def test_pools_are_tfs(average, x, k, s, padding):
    op = "AvgPool" if average else "MaxPool"
    call = _call(op, [_f(*x, dtype="double")], ksize=[1, *k, 1], strides=[1, *s, 1], padding=padding)
    assert call.op == ("aten::avg_pool2d" if average else "aten::max_pool2d")
    xs = torch.randn(x, dtype=torch.float64)
    got = _run(call, _view(call.args[0], xs))
    if padding == "SAME":
        pads = (same_padding(x[1], k[0], s[0], 1), same_padding(x[2], k[1], s[1], 1))
        tf_out = (x[0], math.ceil(x[1] / s[0]), math.ceil(x[2] / s[1]), x[3])
    else:
        pads = ((0, 0), (0, 0))
        tf_out = (x[0], (x[1] - k[0]) // s[0] + 1, (x[2] - k[1]) // s[1] + 1, x[3])
    if s == (1, 1) and pads[0][0] != pads[0][1]:  # stride 1, uneven: one leading row and col more, as the note says
        assert any(n.endswith("TF's output is out[:, :, 1:, 1:]") for n in call.notes)
        got = got[:, :, 1:, 1:]
    assert _nhwc(got) == tf_out
    _close(got.permute(0, 2, 3, 1), _tf_pool(xs, k, s, pads, average))


@needs_torch
@pytest.mark.parametrize("size", range(1, 12))
@pytest.mark.parametrize(("k", "s"), [(1, 1), (2, 1), (2, 2), (3, 1), (3, 2), (3, 3), (4, 2), (5, 3)])
def test_same_pool_output_is_ceil_size_over_stride(size, k, s):
    # at stride 1 with an even window TF pads one more after than before: torch computes one leading window more
    spare = 1 if s == 1 and k % 2 == 0 else 0
    for op in ("MaxPool", "AvgPool"):
        call = _call(op, [_f(1, size, size + 2, 1)], ksize=[1, k, k, 1], strides=[1, s, s, 1], padding="SAME")
        assert _nhwc(_run(call)) == (1, math.ceil(size / s) + spare, math.ceil((size + 2) / s) + spare, 1)


def test_pool_args_and_attribute_reasons():
    call = _call("MaxPool", [_f(1, 8, 8, 2)], ksize=[1, 3, 3, 1], strides=[1, 2, 2, 1], padding="SAME")
    # 8 / 2: total (4 - 1) * 2 + 3 - 8 = 1 -> (0, 1): padding 0, ceil_mode keeps the window over the extra pad
    assert call.args[1:] == ([3, 3], [2, 2], [0, 0], [1, 1], True)
    avg = _call("AvgPool", [_f(1, 7, 7, 2)], ksize=[1, 3, 3, 1], strides=[1, 2, 2, 1], padding="SAME")
    assert avg.args[1:] == ([3, 3], [2, 2], [1, 1], False, False, None)
    assert torch_equivalent("MaxPool", [_f(1, 8, 8, 2)], {"padding": "SAME"}) == \
        "TF op MaxPool: attribute ksize not recorded"
    assert torch_equivalent("MaxPool", [_f(1, 8, 8, 2)], {"padding": "SAME", "ksize": [2, 2, 2, 1]}) == \
        "TF op MaxPool: attribute ksize moves along the batch or channels; torch's op does not"


# --- batch norm -----------------------------------------------------------------------------------------------


@needs_torch
def test_fused_batch_norm_training_with_empty_statistics():
    # TF 2's training FusedBatchNormV3: mean and variance inputs are empty, exponential_avg_factor 1
    x = _f(4, 5, 5, 3, dtype="half")
    call = _call("FusedBatchNormV3", [x, _f(3), _f(3), _f(0), _f(0)], epsilon=0.001, is_training=True,
                 exponential_avg_factor=1.0)
    assert call.op == "aten::batch_norm"
    assert call.args == (T((4, 3, 5, 5), (75, 1, 15, 3), "float16"), T((3,), (1,), "float32"),
                         T((3,), (1,), "float32"), None, None, True, 1.0, 0.001, True)
    xs = torch.randn(4, 5, 5, 3, dtype=torch.float64)
    scale, offset = torch.randn(3, dtype=torch.float64), torch.randn(3, dtype=torch.float64)
    call64 = _call("FusedBatchNormV3", [_f(4, 5, 5, 3, dtype="double"), _f(3, dtype="double"),
                                        _f(3, dtype="double"), _f(0), _f(0)], epsilon=0.001)
    got = _run(call64, _view(call64.args[0], xs), scale, offset)
    mean, var = xs.mean((0, 1, 2)), xs.var((0, 1, 2), unbiased=False)
    _close(got.permute(0, 2, 3, 1), (xs - mean) / torch.sqrt(var + 0.001) * scale + offset, 1e-7)
    assert _nhwc(_run(call)) == (4, 5, 5, 3)


@needs_torch
def test_fused_batch_norm_inference():
    call = _call("FusedBatchNormV3", [_f(2, 4, 3, 3, dtype="double")] + [_f(4, dtype="double")] * 4,
                 is_training=False, data_format="NCHW")
    assert call.args[5:] == (False, 1.0, 0.0001, True)
    x = torch.randn(2, 4, 3, 3, dtype=torch.float64)
    scale, offset, mean = (torch.randn(4, dtype=torch.float64) for _ in range(3))
    var = torch.rand(4, dtype=torch.float64) + 0.5
    got = _run(call, x, scale, offset, mean, var)
    b = (slice(None), None, None)
    _close(got, (x - mean[b]) / torch.sqrt(var[b] + 0.0001) * scale[b] + offset[b], 1e-7)
    # inference needs the statistics
    assert torch_equivalent("FusedBatchNormV3", [_f(2, 4, 3, 3)] + [_f(4)] * 2 + [_f(0)] * 2,
                            {"is_training": False, "data_format": "NCHW"}) == \
        "TF op FusedBatchNormV3: mean has 0 elements, the input 4 channels"


# --- everything in the table runs -----------------------------------------------------------------------------


_EXAMPLES = {
    "Conv2D": ([_f(1, 6, 6, 2), _f(3, 3, 2, 4)], {"padding": "SAME"}),
    "_FusedConv2D": ([_f(1, 6, 6, 2), _f(3, 3, 2, 4), _f(4)], {"padding": "SAME", "fused_ops": ["BiasAdd"]}),
    "DepthwiseConv2dNative": ([_f(1, 6, 6, 2), _f(3, 3, 2, 2)], {"padding": "VALID"}),
    "Conv2DBackpropInput": ([_f(4, dtype="int32"), _f(3, 3, 2, 4), _f(1, 6, 6, 4)],
                            {"padding": "SAME", "input_sizes": [1, 6, 6, 2]}),
    "Conv2DBackpropFilter": ([_f(1, 6, 6, 2), _f(4, dtype="int32"), _f(1, 6, 6, 4)],
                             {"padding": "SAME", "filter_sizes": [3, 3, 2, 4]}),
    "DepthwiseConv2dNativeBackpropInput": ([_f(4, dtype="int32"), _f(3, 3, 2, 2), _f(1, 4, 4, 4)],
                                           {"padding": "VALID"}),
    "DepthwiseConv2dNativeBackpropFilter": ([_f(1, 6, 6, 2), _f(4, dtype="int32"), _f(1, 4, 4, 4)],
                                            {"padding": "VALID"}),
    "MatMul": ([_f(3, 4), _f(4, 5)], {}),
    "_FusedMatMul": ([_f(3, 4), _f(4, 5), _f(5)], {"fused_ops": ["BiasAdd"]}),
    "BatchMatMul": ([_f(2, 3, 4), _f(2, 4, 5)], {}),
    "BatchMatMulV2": ([_f(2, 3, 4), _f(4, 5)], {}),
    "BiasAdd": ([_f(2, 3), _f(3)], {}),
    "BiasAddV1": ([_f(2, 3), _f(3)], {}),
    "MaxPool": ([_f(1, 6, 6, 2)], {"ksize": [1, 2, 2, 1], "strides": [1, 2, 2, 1], "padding": "VALID"}),
    "AvgPool": ([_f(1, 6, 6, 2)], {"ksize": [1, 2, 2, 1], "strides": [1, 2, 2, 1], "padding": "VALID"}),
    "FusedBatchNorm": ([_f(2, 3, 3, 2)] + [_f(2)] * 4, {"is_training": False}),
    "FusedBatchNormV2": ([_f(2, 3, 3, 2)] + [_f(2)] * 4, {}),
    "FusedBatchNormV3": ([_f(2, 3, 3, 2)] + [_f(2)] * 2 + [_f(0)] * 2, {}),
    "Relu": ([_f(3)], {}),
    "Relu6": ([_f(3)], {}),
    "Softmax": ([_f(2, 3)], {}),
    "AddV2": ([_f(2, 3), _f(3)], {}),
    "Add": ([_f(2, 3), _f(3)], {}),
    "Sub": ([_f(2, 3), _f(3)], {}),
    "Mul": ([_f(2, 3), _f(3)], {}),
}


@needs_torch
@pytest.mark.parametrize("op_type", SUPPORTED)
def test_every_supported_op_runs_in_torch(op_type):
    inputs, attrs = _EXAMPLES[op_type]
    call = _call(op_type, inputs, **attrs)
    # hasattr, not dir(): torch.ops.aten lists only the ops looked up so far (the test order would decide)
    assert hasattr(torch.ops.aten, call.op.removeprefix("aten::"))
    assert _run(call) is not None
    assert all(isinstance(n, str) and n.isprintable() for n in call.notes)
