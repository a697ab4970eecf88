"""Work per op call (FLOPs, minimum bytes) from recorded shapes: each formula against a hand computation, hostile
text refused, and every matmul-family row of a real Kineto trace checked against 2·M·N·K·batch."""

from __future__ import annotations

import json
import math

import pytest
from support.shared import shared_trace

from opscope.analyses.work import FAMILIES, Work, canonical_dtype, modeled_names, op_work


def _j(*items: object) -> str:
    return json.dumps(list(items))


def _work(name: str, shapes: list, dtypes: list, concrete: list | None = None) -> Work | None:
    return op_work(name, json.dumps(shapes), json.dumps(dtypes), json.dumps(concrete) if concrete is not None else None)


# --- dtypes ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "canon"), [
    ("float", "fp32"), ("c10::BFloat16", "bf16"), ("c10::Half", "fp16"), ("double", "fp64"),
    ("c10::Float8_e4m3fn", "fp8"), ("c10::Float8_e5m2", "fp8"), ("c10::Float8_e4m3fnuz", "fp8"),
    ("signed char", "int8"), ("int8", "int8"), ("unsigned char", "uint8"), ("long int", "int64"), ("int", "int32"),
    ("bool", "bool"), ("f32", "fp32"), ("bf16", "bf16"), ("f16", "fp16"), ("f8e4m3fn", "fp8"), ("s32", "int32"),
    ("tensor(float)", "fp32"), ("tensor(float16)", "fp16"), ("float_type", "fp32"), ("half_type", "fp16"),
    ("fp8e4m3fnuz_type", "fp8"), ("bfloat16", "bf16"), ("half", "fp16"), ("float32", "fp32"), (" float\n", "fp32"),
    ("Scalar", None), ("ScalarList", None), ("TensorList", None), ("", None), ("GenericList", None),
    ("x" * 1000, None),
])
def test_canonical_dtype(text: str, canon: str | None) -> None:
    assert canonical_dtype(text) == canon


# --- matmul ----------------------------------------------------------------------------------------------------

def test_mm_fp16() -> None:
    w = _work("aten::mm", [[64, 128], [128, 256]], ["c10::Half", "c10::Half"])
    # M=64, K=128, N=256: 2*64*256*128 = 4,194,304; bytes (A + B + C) * 2 bytes
    assert w == Work(4_194_304, (64 * 128 + 128 * 256 + 64 * 256) * 2, "fp16", "matmul")


def test_mm_with_kineto_whitespace_in_dtypes() -> None:
    w = op_work("aten::mm", "[[8944,1024],[1024,1024]]", '[\n          "c10::BFloat16",\n   "c10::BFloat16"\n ]',
                '[\n "",\n ""\n ]')
    assert w is not None and w.flops == 2 * 8944 * 1024 * 1024 and w.dtype == "bf16"


def test_mm_inner_dims_disagree_is_no_model() -> None:
    assert _work("aten::mm", [[64, 128], [127, 256]], ["float", "float"]) is None


def test_addmm_reads_the_bias_but_counts_only_the_product() -> None:
    shapes = [[1024], [8944, 1024], [1024, 1024], [], []]
    dtypes = ["c10::BFloat16"] * 3 + ["Scalar", "Scalar"]
    w = _work("aten::addmm", shapes, dtypes, ["", "", "", "1", "1"])
    # 2*8944*1024*1024; bytes: (bias 1024 + A 8944*1024 + B 1024*1024 + out 8944*1024) * 2
    assert w == Work(2 * 8944 * 1024 * 1024, (1024 + 8944 * 1024 + 1024 * 1024 + 8944 * 1024) * 2, "bf16", "matmul")
    no_bias = _work("aten::addmm", shapes, dtypes, ["", "", "", "0", "1"])  # beta = 0: the bias is not read
    assert no_bias is not None and no_bias.bytes == w.bytes - 1024 * 2


def test_bmm_and_baddbmm() -> None:
    w = _work("aten::bmm", [[16, 5185, 64], [16, 64, 5185]], ["c10::BFloat16"] * 2)
    assert w is not None and w.flops == 2 * 16 * 5185 * 5185 * 64  # batch 16, M=N=5185, K=64
    assert _work("aten::bmm", [[16, 8, 4], [8, 4, 8]], ["float"] * 2) is None  # bmm does not broadcast its batch
    b = _work("aten::baddbmm", [[4, 8, 16], [4, 8, 32], [4, 32, 16], [], []], ["float"] * 3 + ["Scalar"] * 2,
              ["", "", "", "1", "1"])
    # 2*4*8*16*32 = 32768; bytes (bias 4*8*16 + A 4*8*32 + B 4*32*16 + out 4*8*16) * 4
    assert b == Work(32768, (512 + 1024 + 2048 + 512) * 4, "fp32", "matmul")


def test_matmul_broadcasts_batch_dims() -> None:
    w = _work("aten::matmul", [[8, 1, 32, 64], [4, 64, 16]], ["float", "float"])
    # batch broadcast (8,1) x (4,) -> (8,4) = 32; 2*32*32*16*64 = 2,097,152
    # bytes (8*32*64 + 4*64*16 + 8*4*32*16) * 4
    assert w == Work(2_097_152, (16384 + 4096 + 16384) * 4, "fp32", "matmul")
    assert _work("aten::matmul", [[3, 32, 64], [4, 64, 16]], ["float", "float"]) is None  # 3 vs 4 do not broadcast


def test_matmul_vector_operands() -> None:
    w = _work("aten::matmul", [[5, 7], [7]], ["float", "float"])  # matrix-vector: 2*5*7, out [5]
    assert w == Work(70, (35 + 7 + 5) * 4, "fp32", "matmul")
    d = _work("aten::matmul", [[7], [7]], ["float", "float"])  # dot: 2*7, out scalar
    assert d == Work(14, (7 + 7 + 1) * 4, "fp32", "matmul")


def test_linear_3d_input() -> None:
    w = _work("aten::linear", [[16, 559, 1024], [4096, 1024], [4096]], ["c10::BFloat16"] * 3, ["", "", ""])
    # M = 16*559 = 8944, K = 1024, N = 4096: 2*8944*4096*1024
    # bytes (input 8944*1024 + weight 4096*1024 + bias 4096 + out 8944*4096) * 2
    assert w == Work(2 * 8944 * 4096 * 1024, (8944 * 1024 + 4096 * 1024 + 4096 + 8944 * 4096) * 2, "bf16", "matmul")


def test_scaled_mm_is_fp8_with_its_out_dtype() -> None:
    shapes = [[128, 256], [256, 512], [], [], [], [], [], []]
    dtypes = ["c10::Float8_e4m3fn", "c10::Float8_e4m3fn", "float", "float", "", "", "Scalar", "Scalar"]
    w = _work("aten::_scaled_mm", shapes, dtypes, ["", "", "", "", "", "", "15", "False"])
    # 2*128*512*256; bytes A 128*256*1 + B 256*512*1 + two fp32 scalar scales 2*4 + out bf16 128*512*2
    assert w == Work(2 * 128 * 512 * 256, 128 * 256 + 256 * 512 + 8 + 128 * 512 * 2, "fp8", "matmul")


def test_einsum_only_with_its_equation() -> None:
    shapes = [[], [[2, 3, 4], [2, 4, 5]], []]
    dtypes = ["", "TensorList", ""]
    assert _work("aten::einsum", shapes, dtypes, ["", "", ""]) is None  # Kineto did not record the equation
    # as recorded, TensorList members have no dtype: no bytes, no model either
    assert _work("aten::einsum", shapes, dtypes, ["bij,bjk->bik", "", ""]) is None


def test_onnx_gemm_resolves_the_transpose_from_shapes() -> None:
    w = _work("Gemm", [[8, 64], [10, 64], [10]], ["float", "float", "float"])  # transB: K = 64, N = 10
    assert w == Work(2 * 8 * 10 * 64, (8 * 64 + 10 * 64 + 10 + 8 * 10) * 4, "fp32", "matmul")
    # ONNX Runtime leaves a prepacked weight out of the record: without the output's shape, no B, no model (with
    # it, see test_onnx_gemm_with_its_weight_prepacked)
    assert _work("Gemm", [[8, 64], [10]], ["float", "float"]) is None
    # [4,5] x [5,4] also reads as transA+transB ([5,4] x [4,5]): two different products, no model
    assert _work("MatMul", [[4, 5], [5, 4]], ["float", "float"]) is None


# --- convolution -----------------------------------------------------------------------------------------------

_CONV2D_DTYPES = ["float", "float", "", "ScalarList", "ScalarList", "ScalarList", "Scalar"]


def test_conv2d_stride_padding() -> None:
    w = _work("aten::conv2d", [[8, 3, 96, 96], [32, 3, 3, 3], [], [], [], [], []], _CONV2D_DTYPES,
              ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "1"])
    # out = (96 + 2*1 - 1*(3-1) - 1)//2 + 1 = 48; 2*N*C_out*(C_in/g)*kh*kw*H*W = 2*8*32*3*3*3*48*48 = 31,850,496
    # bytes (input 8*3*96*96 + weight 32*3*3*3 + out 8*32*48*48) * 4
    assert w == Work(31_850_496, (221184 + 864 + 589824) * 4, "fp32", "conv")


def test_conv_argument_orders_of_the_backends_agree() -> None:
    """mkldnn/cudnn record padding before stride: the same convolution gives the same work."""
    conv2d = _work("aten::conv2d", [[8, 3, 96, 96], [32, 3, 3, 3], [], [], [], [], []], _CONV2D_DTYPES,
                   ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "1"])
    mkldnn = _work("aten::mkldnn_convolution", [[8, 3, 96, 96], [32, 3, 3, 3], [], [], [], [], []], _CONV2D_DTYPES,
                   ["", "", "", "[1, 1]", "[2, 2]", "[1, 1]", "1"])
    cudnn = _work("aten::cudnn_convolution", [[8, 3, 96, 96], [32, 3, 3, 3], [], [], [], [], [], [], []],
                  ["float", "float", "ScalarList", "ScalarList", "ScalarList", "Scalar", "Scalar", "Scalar", "Scalar"],
                  ["", "", "[1, 1]", "[2, 2]", "[1, 1]", "1", "False", "False", "True"])
    assert conv2d == mkldnn
    assert cudnn == Work(conv2d.flops, conv2d.bytes, "tf32", "conv")  # allow_tf32=True on an fp32 convolution


def test_depthwise_conv() -> None:
    w = _work("aten::conv2d", [[8, 32, 48, 48], [32, 1, 3, 3], [], [], [], [], []], _CONV2D_DTYPES,
              ["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "32"])
    # groups = C_in = 32: out 48x48; 2*8*32*(32/32)*3*3*48*48 = 10,616,832
    # bytes (input 8*32*48*48 twice (in and out) + weight 32*9) * 4
    assert w == Work(10_616_832, (2 * 589824 + 288) * 4, "fp32", "conv")


def test_conv_without_stride_and_padding_is_no_model() -> None:
    """2021 Kineto traces record no concrete inputs: stride 1, padding 0 is not assumed."""
    shapes = [[32, 3, 224, 224], [64, 3, 7, 7], [], [], [], [], []]
    assert _work("aten::conv2d", shapes, ["float", "float", "", "GenericList", "GenericList", "GenericList", "Int"],
                 None) is None


def test_conv_dilation_and_bias() -> None:
    w = _work("aten::convolution", [[1, 4, 10, 10], [6, 4, 3, 3], [6], [], [], [], [], [], []],
              ["c10::Half", "c10::Half", "c10::Half", "ScalarList", "ScalarList", "ScalarList", "Scalar",
               "ScalarList", "Scalar"],
              ["", "", "", "[1, 1]", "[0, 0]", "[2, 2]", "False", "[0, 0]", "1"])
    # out = (10 + 0 - 2*(3-1) - 1)//1 + 1 = 6; 2*1*6*4*3*3*6*6 = 15552
    # bytes (input 400 + weight 216 + bias 6 + out 6*36) * 2
    assert w == Work(15552, (400 + 216 + 6 + 216) * 2, "fp16", "conv")


def test_transposed_conv() -> None:
    w = _work("aten::conv_transpose2d", [[2, 16, 8, 8], [16, 8, 4, 4], [], [], [], [], [], []],
              ["float", "float", "", "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList"],
              ["", "", "", "[2, 2]", "[1, 1]", "[0, 0]", "1", "[1, 1]"])
    # weight [C_in=16, C_out/g=8, 4, 4]; out = (8-1)*2 - 2*1 + 1*(4-1) + 0 + 1 = 16
    # flops 2*N*C_in*(C_out/g)*kh*kw*H_in*W_in = 2*2*16*8*4*4*8*8 = 524,288
    # bytes (input 2*16*64 + weight 16*8*16 + out 2*8*16*16) * 4
    assert w == Work(524_288, (2048 + 2048 + 4096) * 4, "fp32", "conv")
    via_convolution = _work("aten::convolution", [[2, 16, 8, 8], [16, 8, 4, 4], [], [], [], [], [], [], []],
                            ["float", "float", "", "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList",
                             "Scalar"], ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "True", "[0, 0]", "1"])
    assert via_convolution == w


def test_convolution_backward_per_output_mask() -> None:
    shapes = [[8, 32, 12, 12], [8, 192, 12, 12], [32, 192, 1, 1], [], [], [], [], [], [], [], []]
    dtypes = ["float"] * 3 + ["ScalarList"] * 4 + ["Scalar", "ScalarList", "Scalar", "ScalarList"]
    concrete = ["", "", "", "[0]", "[1, 1]", "[0, 0]", "[1, 1]", "False", "[0, 0]", "1", "[True, True, False]"]
    w = _work("aten::convolution_backward", shapes, dtypes, concrete)
    fwd = 2 * 8 * 32 * 192 * 1 * 1 * 12 * 12  # = 14,155,776: the forward's flops, from grad_output's 12x12
    go, inp, wt = 8 * 32 * 144, 8 * 192 * 144, 32 * 192
    # grad input: reads grad_output, weight, writes grad input; grad weight: reads input, writes grad weight
    assert w == Work(2 * fwd, (go + wt + inp + inp + wt) * 4, "fp32", "conv")
    only_weight = _work("aten::convolution_backward", shapes, dtypes, [*concrete[:10], "[False, True, False]"])
    assert only_weight == Work(fwd, (go + inp + wt) * 4, "fp32", "conv")


# --- attention -------------------------------------------------------------------------------------------------

_SDPA_SHAPES = [[16, 16, 559, 64]] * 3 + [[], [], [], [], []]
_SDPA_DTYPES = ["c10::BFloat16"] * 3 + ["", "Scalar", "Scalar", "Scalar", "Scalar"]


def test_attention_non_causal() -> None:
    w = _work("aten::scaled_dot_product_attention", _SDPA_SHAPES, _SDPA_DTYPES, ["", "", "", "", "0.", "False", "", ""])
    # 4*B*H*Lq*Lk*D = 4*16*16*559*559*64; bytes q, k, v, out: 4 * 16*16*559*64 * 2
    assert w == Work(4 * 16 * 16 * 559 * 559 * 64, 4 * 16 * 16 * 559 * 64 * 2, "bf16", "attention")


def test_attention_causal_counts_the_kept_pairs() -> None:
    w = _work("aten::scaled_dot_product_attention", _SDPA_SHAPES, _SDPA_DTYPES, ["", "", "", "", "0.", "True", "", ""])
    # causal, Lq = Lk = 559: 559*560/2 pairs instead of 559*559
    assert w is not None and w.flops == 4 * 16 * 16 * (559 * 560 // 2) * 64
    flash = _work("aten::_flash_attention_forward", [[16, 559, 16, 64]] * 3 + [[]] * 12,
                  ["c10::BFloat16"] * 3 + [""] * 12, ["", "", "", "", "", "559", "559", "0.", "True", "False"])
    assert flash == w  # [B, L, H, D] layout, is_causal at 8: the same work


def test_attention_decode_and_gqa() -> None:
    q, kv = [2, 32, 1, 128], [2, 8, 4096, 128]  # one query token, 8 key/value heads for 32 query heads
    w = _work("aten::_scaled_dot_product_flash_attention", [q, kv, kv, [], [], [], []],
              ["c10::Half"] * 3 + ["Scalar"] * 4, ["", "", "", "0.", "True", "False", ""])
    # causal with Lq=1 <= Lk: the single row keeps min(1, 4096) = 1 key (top-left alignment); 4*2*32*1*1*128
    assert w is not None and w.flops == 4 * 2 * 32 * 1 * 128
    full = _work("aten::_scaled_dot_product_flash_attention", [q, kv, kv, [], [], [], []],
                 ["c10::Half"] * 3 + ["Scalar"] * 4, ["", "", "", "0.", "False", "False", ""])
    # 4*2*32*1*4096*128; bytes q 2*32*128 + k,v 2 * 2*8*4096*128 + out 2*32*128, at 2 bytes
    assert full == Work(4 * 2 * 32 * 4096 * 128, (8192 + 2 * 8388608 + 8192) * 2, "fp16", "attention")


def test_attention_backward_is_2_5x_forward() -> None:
    t = [4, 8, 128, 64]
    w = _work("aten::_scaled_dot_product_flash_attention_backward", [t] * 5 + [[4, 8, 128]] + [[]] * 9,
              ["float"] * 6 + [""] * 9, [""] * 11 + ["False"])
    # forward 4*B*H*Lq*Lk*D = 4*4*8*128*128*64 = 134,217,728; x2.5 = 335,544,320
    # bytes q,k,v,out,grad_out read + grad q,k,v written = 8 tensors of 4*8*128*64 fp32
    assert w == Work(335_544_320, 8 * (4 * 8 * 128 * 64) * 4, "fp32", "attention")


def test_varlen_attention_is_no_model() -> None:
    assert _work("aten::_flash_attention_forward", [[1000, 16, 64]] * 3 + [[9], [9]] + [[]] * 5,
                 ["c10::BFloat16"] * 3 + ["int", "int"] + [""] * 5, [""] * 8 + ["True"]) is None


# --- elementwise, norms, reductions, embedding, copies ---------------------------------------------------------

def test_elementwise_add_broadcast() -> None:
    w = _work("aten::add", [[16, 559, 1024], [1024], []], ["c10::BFloat16", "c10::BFloat16", "Scalar"], ["", "", "1"])
    # 16*559*1024 = 9,158,656 outputs, 1 flop each; bytes (a + b + out) * 2
    assert w == Work(9_158_656, (9_158_656 + 1024 + 9_158_656) * 2, "bf16", "elementwise")


def test_elementwise_python_number_does_not_widen_the_dtype() -> None:
    w = _work("aten::mul", [[1, 559, 64], []], ["c10::BFloat16", "double"], ["", ""])
    # Kineto records a Python float as a 0-dim "double": the op still runs in bf16 (35776 elements)
    assert w == Work(35776, 35776 * 2 + 8 + 35776 * 2, "bf16", "elementwise")


def test_activation_table() -> None:
    n = 16 * 559 * 2816
    silu = _work("aten::silu", [[16, 559, 2816]], ["c10::BFloat16"])
    assert silu == Work(5 * n, 2 * n * 2, "bf16", "elementwise")  # silu = x*sigmoid(x): 5 flops per element
    gelu = _work("aten::gelu", [[1, 5184, 1024], []], ["c10::BFloat16", ""], ["", ""])
    assert gelu is not None and gelu.flops == 8 * 5184 * 1024
    lt = _work("aten::lt", [[5], [5, 1]], ["long int", "long int"])
    assert lt == Work(25, (5 + 5) * 8 + 25 * 1, "int64", "elementwise")  # bool output, 1 byte


def test_inplace_variant_shares_the_model() -> None:
    a = _work("aten::add_", [[8, 24], [8, 24], []], ["float", "float", "Scalar"], ["", "", "1"])
    assert a == Work(192, 3 * 192 * 4, "fp32", "elementwise")  # self and other read, self written


def test_layer_norm() -> None:
    w = _work("aten::layer_norm", [[1, 5185, 1024], [], [1024], [1024], [], []],
              ["c10::BFloat16", "ScalarList", "c10::BFloat16", "c10::BFloat16", "Scalar", "Scalar"],
              ["", "[1024]", "", "", "1e-05", "True"])
    n = 5185 * 1024
    # 8 flops per element (stats 4, normalise 2, affine 2); bytes (in + out + weight + bias) * 2
    assert w == Work(8 * n, (2 * n + 2 * 1024) * 2, "bf16", "norm")


def test_batch_norm_train_and_eval() -> None:
    shapes = [[8, 32, 48, 48], [32], [32], [32], [32], [], [], [], []]
    dtypes = ["float"] * 5 + ["Scalar"] * 4
    train = _work("aten::batch_norm", shapes, dtypes, ["", "", "", "", "", "True", "0.1", "1e-05", "True"])
    evaluate = _work("aten::batch_norm", shapes, dtypes, ["", "", "", "", "", "False", "0.1", "1e-05", "True"])
    n = 8 * 32 * 48 * 48
    assert train == Work(8 * n, (2 * n + 64) * 4, "fp32", "norm")  # weight and bias 32 each
    assert evaluate == Work(4 * n, (2 * n + 64) * 4, "fp32", "norm")


def test_softmax_and_reductions() -> None:
    n = 16 * 5185 * 5185
    sm = _work("aten::_softmax", [[16, 5185, 5185], [], []], ["c10::BFloat16", "Scalar", "Scalar"],
               ["", "-1", "False"])
    assert sm == Work(5 * n, 2 * n * 2, "bf16", "reduction")  # 5 flops per element, in and out of one size
    mean = _work("aten::mean", [[16, 559, 1024], [], [], []], ["float", "ScalarList", "Scalar", ""],
                 ["", "[-1]", "True", ""])
    # 16*559*1024 reads, one flop each; out 16*559 at fp32
    assert mean == Work(16 * 559 * 1024, (16 * 559 * 1024 + 16 * 559) * 4, "fp32", "reduction")
    total = _work("aten::sum", [[8, 10]], ["float"])
    assert total == Work(80, (80 + 1) * 4, "fp32", "reduction")


def test_embedding_reads_only_the_gathered_rows() -> None:
    w = _work("aten::embedding", [[151936, 1024], [16, 559], [], [], []],
              ["c10::BFloat16", "long int", "Scalar", "Scalar", "Scalar"], ["", "", "-1", "False", "False"])
    rows = 16 * 559
    # gathered rows read + output written: 2 * 8944*1024*2 bytes; indices 8944*8 bytes; no flops
    assert w == Work(0, 2 * rows * 1024 * 2 + rows * 8, "bf16", "embedding")


def test_copies() -> None:
    clone = _work("aten::clone", [[1, 16, 5185, 64], []], ["c10::BFloat16", "Scalar"], ["", "0"])
    assert clone == Work(0, 2 * 16 * 5185 * 64 * 2, "bf16", "copy")
    cast = _work("aten::copy_", [[1, 3, 1008, 1008], [1, 3, 1008, 1008], []], ["c10::BFloat16", "float", "Scalar"],
                 ["", "", "False"])
    n = 3 * 1008 * 1008
    assert cast == Work(0, n * 4 + n * 2, "fp32", "copy")  # fp32 read, bf16 written
    to = _work("aten::_to_copy", [[1, 3, 1008, 1008], [], [], [], [], [], []],
               ["float", "Scalar", "", "", "", "Scalar", ""], ["", "15", "", "", "", "False", ""])
    assert to == Work(0, n * 4 + n * 2, "fp32", "copy")  # dtype code 15 = bfloat16
    # Kineto records cat's inputs as a TensorList without a dtype: no model rather than a guess
    assert _work("aten::cat", [[[1, 559, 32], [1, 559, 32]], []], ["TensorList", "Scalar"], ["", "-1"]) is None


# --- ONNX ops as ONNX Runtime records them: no attributes, the outputs' shapes ------------------------------------

def _ort(name: str, shapes: list, outputs: list | None, dtype: str = "float") -> Work | None:
    """An ORT record: every input a tensor of ``dtype`` (``input_type_shape``), the outputs' shapes."""
    return op_work(name, json.dumps(shapes), json.dumps([dtype] * len(shapes)),
                   None, json.dumps(outputs) if outputs is not None else None)


def test_onnx_depthwise_conv_from_its_output_shape() -> None:
    w = _ort("Conv", [[1, 32, 112, 112], [32, 1, 3, 3]], [[1, 32, 112, 112]])
    # group = C / W[1] = 32 / 1 = 32 (depthwise), C/group = 1
    # flops = 2*N*M*(C/group)*kh*kw*H_out*W_out = 2*1*32*1*3*3*112*112 = 7,225,344
    # bytes = (X 1*32*112*112 + W 32*1*3*3 + Y 1*32*112*112) * 4
    assert w == Work(2 * 1 * 32 * 112 * 112 * 1 * 3 * 3, (401_408 + 288 + 401_408) * 4, "fp32", "conv")


def test_onnx_strided_conv_takes_its_output_size_from_the_record() -> None:
    w = _ort("Conv", [[8, 3, 112, 112], [32, 3, 3, 3]], [[8, 32, 56, 56]])  # stride 2, pads 1: not recorded
    # group = 3 / 3 = 1; flops 2*8*32*3*3*3*56*56 = 43,352,064
    # bytes (X 8*3*112*112 + W 32*3*3*3 + Y 8*32*56*56) * 4
    assert w == Work(43_352_064, (301_056 + 864 + 802_816) * 4, "fp32", "conv")


def test_onnx_grouped_conv_with_bias_and_fused_conv() -> None:
    w = _ort("Conv", [[2, 16, 10, 10], [8, 4, 3, 3], [8]], [[2, 8, 8, 8]])
    # group = 16 / 4 = 4 (and 8 output channels divide into 4 groups); flops 2*2*8*4*3*3*8*8 = 73,728
    # bytes (X 2*16*100 + W 8*4*9 + B 8 + Y 2*8*64) * 4
    assert w == Work(73_728, (3200 + 288 + 8 + 1024) * 4, "fp32", "conv")
    fused = _ort("FusedConv", [[1, 8, 4, 4], [8, 8, 1, 1], [8], [1, 8, 4, 4]], [[1, 8, 4, 4]])
    # flops 2*1*8*8*1*1*4*4 = 2048 (activation and bias not counted); bytes (X 128 + W 64 + B 8 + Z 128 + Y 128) * 4
    assert fused == Work(2048, (128 + 64 + 8 + 128 + 128) * 4, "fp32", "conv")
    half = _ort("Conv", [[1, 4, 6, 6], [4, 4, 3, 3]], [[1, 4, 4, 4]], "float16")
    assert half == Work(2 * 4 * 4 * 9 * 16, (144 + 144 + 64) * 2, "fp16", "conv")


def test_onnx_conv_transpose() -> None:
    w = _ort("ConvTranspose", [[2, 16, 8, 8], [16, 8, 4, 4]], [[2, 8, 16, 16]])
    # W [C=16, M/group=8, 4, 4], Y has M = 8: group = 8 / 8 = 1
    # flops 2*N*C*(M/group)*kh*kw*H_in*W_in = 2*2*16*8*4*4*8*8 = 524,288 (as aten::conv_transpose2d's)
    # bytes (X 2*16*64 + W 16*8*16 + Y 2*8*256) * 4
    assert w == Work(524_288, (2048 + 2048 + 4096) * 4, "fp32", "conv")
    grouped = _ort("ConvTranspose", [[1, 4, 5, 5], [4, 2, 3, 3]], [[1, 4, 7, 7]])
    # group = M / W[1] = 4 / 2 = 2; flops 2*1*4*2*3*3*5*5 = 3600; bytes (100 + 72 + 196) * 4
    assert grouped == Work(3600, (100 + 72 + 196) * 4, "fp32", "conv")


def test_onnx_conv_without_or_against_its_output_is_no_model() -> None:
    x, wt = [8, 3, 112, 112], [32, 3, 3, 3]
    assert _ort("Conv", [x, wt], None) is None                       # no output shape: stride/pads unknown
    assert _ort("Conv", [x, wt], [[8, 16, 56, 56]]) is None          # 16 output channels against W's 32
    assert _ort("Conv", [x, wt], [[4, 32, 56, 56]]) is None          # another batch
    assert _ort("Conv", [x, [32, 2, 3, 3]], [[8, 32, 56, 56]]) is None  # C = 3 is not a multiple of W[1] = 2
    assert _ort("Conv", [x, [31, 1, 3, 3]], [[8, 31, 56, 56]]) is None  # group 3 does not divide 31 channels
    assert _ort("Conv", [x, [32]], [[8, 32, 56, 56]]) is None          # a weight ORT left out (the bias in its place)
    assert _ort("ConvTranspose", [[1, 4, 5, 5], [4, 2, 3, 3]], [[1, 3, 7, 7]]) is None  # 3 outputs: not W[1]*group


def test_onnx_gemm_with_its_weight_prepacked() -> None:
    """ORT leaves a prepacked B out of input_type_shape: the record of Gemm(A, B, C) is [A, C] and Y [M, N]."""
    w = _ort("Gemm", [[8, 64], [10]], [[8, 10]])
    # A [M=8, K=64], Y [8, N=10], [10] cannot be B ([64,10] or [10,64]): it is the bias C, B read as K*N
    # flops 2*8*10*64 = 10,240; bytes (A 8*64 + B 64*10 + C 10 + Y 8*10) * 4
    assert w == Work(10_240, (512 + 640 + 10 + 80) * 4, "fp32", "matmul")
    assert _ort("Gemm", [[8, 64], [10]], None) is None  # without Y: N and B unknown, no model
    bare = _ort("Gemm", [[64, 8]], [[8, 10]])  # transA: A [K=64, M=8], no C
    assert bare == Work(10_240, (512 + 640 + 80) * 4, "fp32", "matmul")
    whole = _ort("Gemm", [[8, 64], [10, 64], [10]], [[8, 10]])  # B given, transB
    assert whole == Work(10_240, (512 + 640 + 10 + 80) * 4, "fp32", "matmul")
    # [8,8] then [8,10]: B [K=8, N=10] and no C, or C [8,10] with B packed: other bytes, so no model
    assert _ort("Gemm", [[8, 8], [8, 10]], [[8, 10]]) is None
    assert _ort("Gemm", [[8, 64], [10, 64], [10]], [[8, 11]]) is None  # Y against the operands
    assert _ort("Gemm", [[8, 64], [12]], [[8, 10]]) is None  # [12] neither B nor a bias of [8, 10]


def test_onnx_matmul_resolved_by_its_output() -> None:
    w = _ort("MatMul", [[4, 5], [5, 4]], [[4, 4]])
    # without Y [4,5]x[5,4] also reads as [5,4]x[4,5]; Y [4,4] says K = 5: 2*4*4*5 = 160; bytes (20 + 20 + 16) * 4
    assert w == Work(160, (20 + 20 + 16) * 4, "fp32", "matmul")
    packed = _ort("MatMul", [[2, 5, 64]], [[2, 5, 32]])  # B prepacked: the 2-D [K=64, N=32]
    # flops 2*batch*M*N*K = 2*2*5*32*64 = 40,960; bytes (A 2*5*64 + B 64*32 + Y 2*5*32) * 4
    assert packed == Work(40_960, (640 + 2048 + 320) * 4, "fp32", "matmul")
    assert _ort("MatMul", [[2, 5, 64]], [[2, 6, 32]]) is None  # M disagrees
    assert _ort("MatMul", [[4, 5], [5, 4]], [[5, 6]]) is None  # no reading gives [5, 6]


def test_onnx_pools() -> None:
    n_in, n_out = 8 * 64 * 56 * 56, 8 * 64 * 28 * 28  # 1,605,632 and 401,408
    mp = _ort("MaxPool", [[8, 64, 56, 56]], [[8, 64, 28, 28]])
    # a compare per window element; no kernel_shape recorded: X's elements (2x2 stride 2 windows tile X)
    # bytes (X + Y) * 4
    assert mp == Work(n_in, (n_in + n_out) * 4, "fp32", "reduction")
    with_indices = _ort("MaxPool", [[8, 64, 56, 56]], [[8, 64, 28, 28], [8, 64, 28, 28]])
    assert with_indices == Work(n_in, (n_in + n_out) * 4 + n_out * 8, "fp32", "reduction")  # int64 indices
    ap = _ort("AveragePool", [[1, 3, 8, 8]], [[1, 3, 4, 4]])
    assert ap == Work(192, (192 + 48) * 4, "fp32", "reduction")
    gap = _ort("GlobalAveragePool", [[8, 64, 28, 28]], [[8, 64, 1, 1]])
    # an add per element of each 28x28 window: 8*64*28*28 = 401,408; bytes (X 401,408 + Y 8*64) * 4
    assert gap == Work(401_408, (401_408 + 512) * 4, "fp32", "reduction")
    assert _ort("GlobalAveragePool", [[8, 64, 28, 28]], None) == gap  # Y is [N, C, 1, 1] by definition
    assert _ort("GlobalMaxPool", [[2, 3, 5]], [[2, 3, 1]]) == Work(30, (30 + 6) * 4, "fp32", "reduction")
    assert _ort("MaxPool", [[8, 64, 56, 56]], None) is None            # Y unknown
    assert _ort("MaxPool", [[8, 64, 56, 56]], [[8, 32, 28, 28]]) is None  # channels changed
    assert _ort("GlobalAveragePool", [[8, 64, 28, 28]], [[8, 64, 2, 2]]) is None
    assert _ort("MaxPool", [[8, 64]], [[8, 64]]) is None                 # no spatial dims


def test_onnx_batch_normalization() -> None:
    x, p = [8, 32, 56, 56], [32]
    n = 8 * 32 * 56 * 56  # 802,816
    infer = _ort("BatchNormalization", [x, p, p, p, p], [x])
    # inference: (x - mean) * rstd * scale + bias = 4 per element; bytes (X + Y + scale, bias, mean, var) * 4
    assert infer == Work(4 * n, (2 * n + 4 * 32) * 4, "fp32", "norm")
    assert _ort("BatchNormalization", [x, p, p, p, p], None) == infer  # ONNX's default: inference
    train = _ort("BatchNormalization", [x, p, p, p, p], [x, p, p])  # training_mode=1: Y, running mean and var
    # 8 per element (the statistics first, as aten's batch norm in training); + running mean and var written
    assert train == Work(8 * n, (2 * n + 4 * 32 + 2 * 32) * 4, "fp32", "norm")
    assert _ort("BatchNormalization", [x, p, p], [x]) is None  # mean and var missing
    assert _ort("BatchNormalization", [x, p, p, p, [64, 32, 56, 56]], [x]) is None  # a "parameter" larger than X


def test_onnx_layer_norms() -> None:
    x, h = [2, 128, 768], [768]
    n = 2 * 128 * 768  # 196,608
    ln = _ort("LayerNormalization", [x, h, h], [x], "float16")
    # statistics 4 + normalise 2 + scale 1 + bias 1 = 8 per element (as aten::layer_norm); bytes (2n + 2*768) * 2
    assert ln == Work(8 * n, (2 * n + 2 * 768) * 2, "fp16", "norm")
    assert _ort("LayerNormalization", [x, h], [x]) == Work(7 * n, (2 * n + 768) * 4, "fp32", "norm")  # no bias
    rms = _ort("SimplifiedLayerNormalization", [x, h], [x])
    # square, add, x rrms, x scale = 4 per element (as aten::rms_norm)
    assert rms == Work(4 * n, (2 * n + 768) * 4, "fp32", "norm")
    skip = _ort("SkipLayerNormalization", [x, x, h, h, h], [x, [2, 128, 1], [2, 128, 1], x])
    # + skip 1, + bias 1, statistics 4, normalise 2, x gamma 1, + beta 1 = 10 per element
    # bytes: input, skip, gamma, beta, bias read; output and the recorded sum (input + skip + bias) written
    assert skip == Work(10 * n, (2 * n + 3 * 768 + n + n) * 4, "fp32", "norm")
    skip_rms = _ort("SkipSimplifiedLayerNormalization", [x, x, h], [x])
    # + skip 1, square 1, add 1, x rrms 1, x gamma 1 = 5 per element
    assert skip_rms == Work(5 * n, (3 * n + 768) * 4, "fp32", "norm")
    inst = _ort("InstanceNormalization", [[1, 3, 4, 4], [3], [3]], [[1, 3, 4, 4]])
    assert inst == Work(8 * 48, (2 * 48 + 6) * 4, "fp32", "norm")
    assert _ort("SkipLayerNormalization", [x, [2, 128, 512], h], [x]) is None  # the skip is not X's shape
    assert _ort("LayerNormalization", [x], [x]) is None                          # no scale
    assert _ort("LayerNormalization", [x, h, h, h], [x]) is None                 # one tensor too many


def test_onnx_reductions_take_their_axes_from_the_output() -> None:
    n = 2 * 128 * 768
    mean = _ort("ReduceMean", [[2, 128, 768]], [[2, 128, 1]])
    # one add per element of X; bytes (X + Y 2*128) * 4
    assert mean == Work(n, (n + 256) * 4, "fp32", "reduction")
    axes = op_work("ReduceSum", "[[2,128,768],[1]]", '["float","int64"]', None, "[[2,128]]")  # opset 18: axes input
    assert axes == Work(n, (n + 256) * 4 + 8, "fp32", "reduction")
    assert _ort("ReduceMax", [[2, 128, 768]], None) is None          # what was reduced is unknown
    assert _ort("ReduceMin", [[2, 3]], [[2, 3, 4]]) is None           # an output larger than the input


def test_onnx_elementwise_softmax_and_copies_resolve() -> None:
    n = 8 * 32 * 56 * 56
    assert _ort("Relu", [[8, 32, 56, 56]], [[8, 32, 56, 56]]) == Work(n, 2 * n * 4, "fp32", "elementwise")
    # Clip(x, min, max): the bounds are 0-dim tensors, read once (4 bytes each)
    assert _ort("Clip", [[8, 32, 56, 56], [], []], [[8, 32, 56, 56]]) == Work(n, (2 * n + 2) * 4, "fp32",
                                                                               "elementwise")
    assert _ort("Add", [[8, 32], [32]], [[8, 32]]) == Work(256, (256 + 32 + 256) * 4, "fp32", "elementwise")
    assert _ort("Sigmoid", [[10]], [[10]]) == Work(40, 80, "fp32", "elementwise")  # 4 per element
    assert _ort("Softmax", [[8, 1000]], [[8, 1000]]) == Work(5 * 8000, 2 * 8000 * 4, "fp32", "reduction")
    assert _ort("Transpose", [[2, 3, 4]], [[4, 3, 2]]) == Work(0, 2 * 24 * 4, "fp32", "copy")
    assert _ort("ReorderOutput", [[8, 64, 1, 1]], [[8, 64, 1, 1]]) == Work(0, 2 * 512 * 4, "fp32", "copy")
    assert _ort("Concat", [[2, 3], [2, 5]], [[2, 8]]) == Work(0, 2 * 16 * 4, "fp32", "copy")
    # ORT puts a Reshape's/Flatten's output on its input's memory: no work, no model (its time stays listed)
    assert _ort("Flatten", [[8, 64, 1, 1]], [[8, 64]]) is None
    assert _ort("Reshape", [[8, 64], [2]], [[8, 8, 8]]) is None


@pytest.mark.parametrize("outputs", [
    "[[8,32,56,56]",            # truncated
    "[[8,-32,56,56]]",          # a negative dim
    '[["8",32,56,56]]',         # a string
    "[[8,32.5,56,56]]",         # not an int
    "[[[8,32,56,56]]]",         # a list of shapes in an output's place
    '{"float":[8,32,56,56]}',   # ORT's own form, not the model's
    "[" * 100_000,              # past the size limit
    "[[" + "9" * 5000 + "]]",   # a huge integer literal
    "null", "1",
])
def test_hostile_output_shapes_are_no_model(outputs: str) -> None:
    assert op_work("Conv", "[[8,3,112,112],[32,3,3,3]]", '["float","float"]', None, outputs) is None
    assert op_work("MaxPool", "[[8,64,56,56]]", '["float"]', None, outputs) is None


# --- TensorFlow ops (types, input shapes only) -----------------------------------------------------------------

def test_tf_fused_matmul_reads_its_bias() -> None:
    # _FusedMatMul(a [16, 64], b [64, 10], bias [10]): 2*16*10*64 = 20,480; bytes (1,024 + 640 + 10 + 160) * 4
    w = _work("_FusedMatMul", [[16, 64], [64, 10], [10]], ["float", "float", "float"])
    assert w == Work(20_480, (1_024 + 640 + 10 + 160) * 4, "fp32", "matmul")


def test_tf_add_n_adds_n_minus_one_per_element() -> None:
    # AddN of 3 tensors [4, 5]: 2 adds per element = 40; bytes 3 read + 1 written = 4 * 20 * 4 = 320
    assert _work("AddN", [[4, 5]] * 3, ["float"] * 3) == Work(40, 320, "fp32", "elementwise")
    assert _work("AddN", [[4, 5], [5, 4]], ["float"] * 2) is None  # AddN's inputs have one shape


def test_tf_bias_add_grad_where_the_channels_are_unambiguous() -> None:
    # [64, 10] (a dense layer's gradient): 640 adds into [10]; bytes 640*4 + 10*4 = 2,600
    assert _work("BiasAddGrad", [[64, 10]], ["float"]) == Work(640, 2_600, "fp32", "reduction")
    # [16, 32, 32, 16]: NHWC gives C = 16, NCHW C = 32 (data_format is not recorded): no model
    assert _work("BiasAddGrad", [[16, 32, 32, 16]], ["float"]) is None
    # [8, 16, 7, 16]: both readings give C = 16
    assert _work("BiasAddGrad", [[8, 16, 7, 16]], ["half"]) == Work(8 * 16 * 7 * 16, (8 * 16 * 7 * 16 + 16) * 2,
                                                                     "fp16", "reduction")


def test_tf_fused_batch_norm_only_where_the_record_says_training() -> None:
    x, c = [16, 32, 32, 16], [16]
    # empty mean/variance: training, the batch statistics computed: 8 FLOPs per element (16*32*32*16 = 262,144);
    # bytes x read + y written + scale + offset: (2 * 262,144 + 16 + 16) * 4
    w = _work("FusedBatchNormV3", [x, c, c, [0], [0]], ["float"] * 5)
    assert w == Work(8 * 262_144, (2 * 262_144 + 32) * 4, "fp32", "norm")
    # [C] mean/variance: training with a running average or inference (is_training is not recorded): no model
    assert _work("FusedBatchNormV3", [x, c, c, c, c], ["float"] * 5) is None


def test_tf_gradient_and_other_elementwise_aliases() -> None:
    # ReluGrad(gradients, features) [8, 8]: 1 select per element; bytes 2 read + 1 written = 3 * 64 * 4
    assert _work("ReluGrad", [[8, 8], [8, 8]], ["float", "float"]) == Work(64, 768, "fp32", "elementwise")
    assert _work("SigmoidGrad", [[8, 8], [8, 8]], ["float", "float"]).flops == 3 * 64
    assert _work("SelectV2", [[8, 8], [8, 8], [8, 8]], ["bool", "float", "float"]).flops == 64
    # TF's Max is a reduction whose second input is the int axes: not ONNX's elementwise Max
    assert _work("Max", [[4, 10], [1]], ["float", "int32"]) is None
    assert _work("Max", [[4, 10], [4, 10]], ["float", "float"]).flops == 40  # ONNX: elementwise


def test_tf_ops_whose_work_depends_on_unrecorded_attributes_have_no_model() -> None:
    # TF records input shapes only: Conv2D's output size depends on its strides and padding, MaxPool's on its ksize,
    # Mean's on its axes (a tensor whose values are not recorded), Cast's bytes on its output type
    assert _work("Conv2D", [[16, 64, 64, 3], [3, 3, 3, 16]], ["float", "float"]) is None
    assert _work("DepthwiseConv2dNative", [[16, 32, 32, 16], [3, 3, 16, 1]], ["float", "float"]) is None
    assert _work("MaxPool", [[16, 32, 32, 32]], ["float"]) is None
    assert _work("Mean", [[16, 32, 32, 16], [2]], ["float", "int32"]) is None
    assert _work("Cast", [[30522, 1024]], ["float"]) is None


# --- what has no model, and hostile text -----------------------------------------------------------------------

def test_ops_without_a_model() -> None:
    assert _work("aten::view", [[16, 559], []], ["long int", "ScalarList"], ["", "[-1]"]) is None
    assert _work("vllm::moe_forward", [[4, 8]], ["float"]) is None
    assert op_work("aten::mm", None, None) is None
    assert op_work("aten::mm", "", "") is None


@pytest.mark.parametrize("shapes", [
    "[[64,128],[128,256]",                   # truncated
    "[[64,-1],[128,256]]",                   # a negative dim
    "[[64,1.5],[128,256]]",                  # not an int
    "[[64,true],[128,256]]",                 # a bool is not a dim
    '[[64,"128"],[128,256]]',                # a string
    "[[64,1099511627776],[1099511627776,2]]",  # a dim past the bound
    "[[" + ",".join(["2"] * 60) + "],[2,2]]",   # too many dims, and too many elements
    "{\"a\": 1}",                            # not a list
    "[[[[[[1]]]]]]",                          # nested too deep
    "[" * 100_000 + "]" * 100_000,           # past the size limit (and a recursion bomb)
    "[[64,128],[128,256]]" + " " * 70_000,   # past the size limit
    "__import__('os').system('true')",       # never evaluated
    "[[" + "9" * 5000 + "],[1]]",            # a huge integer literal
    "NaN",
])
def test_hostile_shapes_are_no_model(shapes: str) -> None:
    assert op_work("aten::mm", shapes, '["float","float"]', '["",""]') is None


@pytest.mark.parametrize(("dtypes", "concrete"), [
    ("not json", None), ('{"a":1}', None), ('["float"]', '["", "", "["]'), ("[" * 5000, None),
])
def test_hostile_dtypes_and_concrete_are_no_model_or_ignored(dtypes: str, concrete: str | None) -> None:
    w = op_work("aten::conv2d", "[[8,3,96,96],[32,3,3,3],[],[],[],[],[]]", dtypes, concrete)
    assert w is None


def test_hostile_conv_parameters() -> None:
    shapes = [[8, 3, 96, 96], [32, 3, 3, 3], [], [], [], [], []]
    for bad in (["", "", "", "[0, 0]", "[1, 1]", "[1, 1]", "1"],        # stride 0
                ["", "", "", "[2, 2]", "[-100, 1]", "[1, 1]", "1"],     # an output size below 1
                ["", "", "", "[2, 2, 2]", "[1, 1]", "[1, 1]", "1"],     # wrong rank
                ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "7"]):       # groups that do not divide C_in
        assert _work("aten::conv2d", shapes, _CONV2D_DTYPES, bad) is None


def test_modeled_names_cover_every_family() -> None:
    names = modeled_names()
    assert set(names) == set(FAMILIES)
    assert all(names[f] for f in FAMILIES)
    assert "mm" in names["matmul"] and "convolution_backward" in names["conv"]
    assert "_flash_attention_forward" in names["attention"] and "gelu" in names["elementwise"]
    assert {"Conv", "ConvTranspose"} <= set(names["conv"]) and {"Gemm", "MatMul"} <= set(names["matmul"])
    assert {"MaxPool", "GlobalAveragePool", "Softmax"} <= set(names["reduction"])
    assert {"BatchNormalization", "LayerNormalization"} <= set(names["norm"]) and "Clip" in names["elementwise"]


# --- a real trace ----------------------------------------------------------------------------------------------

_MATMUL_NAMES = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::linear", "aten::matmul")


def _expected_matmul_flops(name: str, shapes: list) -> int:
    """2·M·N·K·batch, written out per op from the raw shapes, independently of the module."""
    if name == "aten::mm":
        (m, k), (_, n) = shapes[0], shapes[1]
        return 2 * m * n * k
    if name == "aten::addmm":
        (m, k), (_, n) = shapes[1], shapes[2]
        return 2 * m * n * k
    if name == "aten::bmm":
        (b, m, k), (_, _, n) = shapes[0], shapes[1]
        return 2 * b * m * n * k
    if name == "aten::baddbmm":
        (b, m, k), (_, _, n) = shapes[1], shapes[2]
        return 2 * b * m * n * k
    if name == "aten::linear":
        x, w = shapes[0], shapes[1]
        return 2 * math.prod(x[:-1]) * w[0] * w[1]
    a, b = shapes[0], shapes[1]  # aten::matmul, both operands at least 2-D in this trace
    batch_a, batch_b = a[:-2], b[:-2]
    rank = max(len(batch_a), len(batch_b))
    batch_a = [1] * (rank - len(batch_a)) + list(batch_a)
    batch_b = [1] * (rank - len(batch_b)) + list(batch_b)
    batch = math.prod(max(x, y) for x, y in zip(batch_a, batch_b, strict=True))
    return 2 * batch * a[-2] * b[-1] * a[-1]


@pytest.mark.parametrize("relative", [
    "tracelens/traces/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
    "tracelens/traces/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz",
])
def test_every_matmul_row_of_a_real_trace_is_2mnk(relative: str) -> None:
    from opscope.ingest import open_trace

    trace = open_trace(shared_trace(relative))
    rows = trace.select(["kind", "name", "shapes", "dtypes", "concrete_inputs"]).to_pylist()
    checked = 0
    for row in rows:
        if row["kind"] != "cpu_op" or row["name"] not in _MATMUL_NAMES:
            continue
        work = op_work(row["name"], row["shapes"], row["dtypes"], row["concrete_inputs"])
        assert work is not None, row
        assert work.family == "matmul"
        assert work.flops == _expected_matmul_flops(row["name"], json.loads(row["shapes"])), row
        checked += 1
    assert checked > 100
