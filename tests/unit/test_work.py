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
    # ONNX Runtime leaves a prepacked weight out of the record: no B, no model
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
