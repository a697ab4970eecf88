"""Cross-framework op keys for ``diff --by api``: ONNX op types and MIGraphX operators meet torch's and TF's ops."""

from __future__ import annotations

import pytest

from opscope.analyses.op_keys import migraphx_key, onnx_key
from opscope.diff.rows import api_key


@pytest.mark.parametrize(("op", "framework", "key"), [
    ("aten::conv2d", "pytorch", "conv2d"),
    ("Conv2D", "tensorflow", "conv2d"),
    ("_FusedConv2D", "tensorflow", "conv2d"),
    ("Conv", "onnxruntime", "conv2d"),
    ("gpu::convolution", "migraphx", "conv2d"),
    ("gpu::code_object::mlir_convolution_add_relu", "migraphx", "conv2d"),
    # the matrix-product family: a dense layer is linear in torch, MatMul in TF, Gemm in ONNX, dot in MIGraphX
    ("aten::linear", "pytorch", "matmul"),
    ("aten::addmm", "pytorch", "matmul"),
    ("MatMul", "tensorflow", "matmul"),
    ("BatchMatMulV2", "tensorflow", "matmul"),
    ("Gemm", "onnxruntime", "matmul"),
    ("gpu::code_object::mlir_dot", "migraphx", "matmul"),
    ("gpu::code_object::mlir_quant_dot", "migraphx", "matmul"),
    ("gpu::gemm", "migraphx", "matmul"),
    ("aten::relu", "pytorch", "relu"),
    ("Relu", "onnxruntime", "relu"),
    ("gpu::code_object::add_relu_kernel", "migraphx", "add"),
    ("MaxPool", "onnxruntime", "max_pool2d"),
    ("aten::max_pool2d", "pytorch", "max_pool2d"),
    ("GlobalAveragePool", "onnxruntime", "adaptive_avg_pool2d"),
    ("aten::adaptive_avg_pool2d", "pytorch", "adaptive_avg_pool2d"),
    ("LayerNormalization", "onnxruntime", "layer_norm"),
    ("gpu::code_object::layernorm_kernel", "migraphx", "layer_norm"),
    ("aten::layer_norm", "pytorch", "layer_norm"),
])
def test_the_same_op_gets_one_key_in_every_framework(op, framework, key):
    assert api_key(op, framework) == key


@pytest.mark.parametrize("op", ["@param", "check_context::migraphx::gpu::context", "hip::hip_allocate_memory", "load",
                                "gpu::code_object::some_unknown_fusion", "@return"])
def test_migraphx_bookkeeping_and_unknown_kernels_have_no_key(op):
    assert migraphx_key(op) is None


def test_onnx_keys_are_case_exact_and_unknown_types_have_none():
    assert onnx_key("conv") is None  # an ONNX op type is CamelCase; a lower-case name is not one
    assert onnx_key("MyCustomOp") is None
    assert api_key("Conv", "pytorch") is None  # a CamelCase name in a PyTorch trace is an annotation, not an op
