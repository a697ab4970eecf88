"""Keys that let ``diff --by api`` match ops across frameworks: ONNX op types and MIGraphX operators.

PyTorch and TensorFlow ops meet through the Python function that records them (``aten::conv2d`` and TF's
``Conv2D`` both key as ``conv2d``; see :func:`opscope.diff.rows.api_key`). ONNX Runtime names its ops by ONNX op
type (``Conv``, ``Gemm``) and MIGraphX by its own operators (``gpu::convolution``, a compiled
``gpu::code_object::mlir_dot``), so this module maps those names onto the same keys. Two choices, stated where the
comparison is shown: an ONNX ``Conv`` keys as ``conv2d`` (the common case; ONNX does not say the rank in the op
name), and every matrix product (``linear``, ``addmm``, ``Gemm``, ``MatMul``, MIGraphX's ``dot``) is one key,
``matmul``, because each framework lowers a dense layer to a different one of them.
"""

from __future__ import annotations

import re

#: Keys from torch's/TF's Python APIs that are one matrix-product family across frameworks.
MATMUL_FAMILY = frozenset({"linear", "addmm", "mm", "bmm", "baddbmm", "matmul", "batchmatmul", "batchmatmulv2",
                           "batchmatmulv3", "gemm", "dot", "quant_dot"})

_ONNX = {
    "conv2d": ("Conv", "FusedConv", "NhwcConv", "QLinearConv", "ConvInteger", "convolution", "quant_convolution"),
    "conv_transpose2d": ("ConvTranspose", "deconvolution"),
    "matmul": ("Gemm", "MatMul", "FusedGemm", "FusedMatMul", "MatMulInteger", "QLinearMatMul", "MatMulNBits",
               "dot", "quant_dot", "gemm"),
    "relu": ("Relu", "relu"), "leaky_relu": ("LeakyRelu", "leaky_relu"), "sigmoid": ("Sigmoid", "sigmoid"),
    "tanh": ("Tanh", "tanh"), "gelu": ("Gelu", "FastGelu", "BiasGelu", "gelu"), "silu": ("QuickGelu",),
    "softmax": ("Softmax", "softmax"), "log_softmax": ("LogSoftmax", "logsoftmax"),
    "max_pool2d": ("MaxPool",), "avg_pool2d": ("AveragePool",), "adaptive_avg_pool2d": ("GlobalAveragePool",),
    "adaptive_max_pool2d": ("GlobalMaxPool",),
    "batch_norm": ("BatchNormalization", "batch_norm_inference"),
    "layer_norm": ("LayerNormalization", "SkipLayerNormalization", "SimplifiedLayerNormalization", "layernorm"),
    "add": ("Add", "add"), "sub": ("Sub", "sub"), "mul": ("Mul", "mul"), "div": ("Div", "div"), "pow": ("Pow", "pow"),
    "sqrt": ("Sqrt", "sqrt"), "exp": ("Exp", "exp"), "erf": ("Erf", "erf"), "clamp": ("Clip", "clip"),
    "cat": ("Concat", "concat"), "reshape": ("Reshape", "reshape"), "transpose": ("Transpose", "transpose"),
    "flatten": ("Flatten", "flatten"), "mean": ("ReduceMean", "reduce_mean"), "sum": ("ReduceSum", "reduce_sum"),
    "where": ("Where", "where"), "split": ("Split", "split"), "squeeze": ("Squeeze", "squeeze"),
    "unsqueeze": ("Unsqueeze", "unsqueeze"), "pad": ("Pad", "pad"), "interpolate": ("Resize", "resize"),
    "embedding": ("Gather", "gather"), "dropout": ("Dropout",),
    "scaled_dot_product_attention": ("Attention", "MultiHeadAttention", "GroupQueryAttention", "attention"),
}
#: ONNX op type or MIGraphX operator -> key.
_KEY_OF = {name: key for key, names in _ONNX.items() for name in names}
#: MIGraphX operators whose names are not ops of the model: parameters, memory, bookkeeping.
_MIGRAPHX_PREFIXES = re.compile(r"^(?:gpu::code_object::|gpu::|hip::|cpu::|ref::)?(?:mlir_)?")
#: Longest first, so that a fused kernel's name finds its first whole operator (``quant_dot`` before ``dot``).
_BY_LENGTH = sorted((n for n in _KEY_OF if n[:1].islower()), key=len, reverse=True)


def onnx_key(op: str) -> str | None:
    """The cross-framework key of an ONNX op type (ONNX Runtime's op names), None when it has none."""
    return _KEY_OF.get(op)


def migraphx_key(op: str) -> str | None:
    """The key of a MIGraphX instruction's operator: ``gpu::convolution`` -> ``conv2d``; a compiled kernel counts as
    the first operator of its fusion (``gpu::code_object::mlir_convolution_add_relu`` -> ``conv2d``,
    ``add_relu_kernel`` -> ``add``); parameters, copies and allocations have none."""
    name = _MIGRAPHX_PREFIXES.sub("", op)
    name = name.removesuffix("_kernel")
    for candidate in _BY_LENGTH:
        if name == candidate or name.startswith(candidate + "_"):
            return _KEY_OF[candidate]
    return None


def family(key: str) -> str:
    """A Python-API key with the matrix-product family folded into ``matmul``."""
    return "matmul" if key in MATMUL_FAMILY else key
