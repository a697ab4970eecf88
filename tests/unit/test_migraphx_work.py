"""The work (FLOPs, minimum bytes) of MIGraphX's ops and compiled kernels from the records its reader writes (each
operand's shape, dtype and strides, then the output's): every formula against a hand computation written out here,
names read by their parts, hostile records refused; and a perf listing written here, with a depthwise and a dense
convolution, through the reader and the roofline."""

from __future__ import annotations

import json

import pytest

from opscope.analyses.peaks import Peaks
from opscope.analyses.roofline import roofline_table
from opscope.analyses.work import Work, op_work
from opscope.ingest import open_trace


def _contiguous(shape: list[int]) -> list[int]:
    out, step = [], 1
    for d in reversed(shape):
        out.append(step)
        step *= d
    return out[::-1]


def _mgx(name: str, entries: list[tuple], window: list[int] | None = None) -> Work | None:
    """op_work on a record as the reader writes it: ``entries`` = (lens, dtype[, strides]) per operand, the output
    last; ``window`` a pooling window entry after it."""
    shapes = [e[0] for e in entries]
    dtypes = [e[1] for e in entries]
    strides = [e[2] if len(e) > 2 else _contiguous(e[0]) for e in entries]
    concrete = None
    if window is not None:
        shapes.append([])
        dtypes.append("")
        strides.append([])
        concrete = json.dumps([""] * len(entries) + [json.dumps(window)])
    return op_work(name, json.dumps(shapes), json.dumps(dtypes), concrete, strides=json.dumps(strides))


H, F = "float16", "float32"


# --- products ----------------------------------------------------------------------------------------------------

def test_mlir_dot_is_2mnk_batch() -> None:
    # @3 = gpu::code_object[...,symbol_name=mlir_dot,...](@1,@2,@0) -> half_type, {1, 2, 3}: a [1, 2, 4] @ b [1, 4, 3]
    w = _mgx("gpu::code_object::mlir_dot", [([1, 2, 4], H), ([1, 4, 3], H), ([1, 2, 3], H)])
    # M=2, N=3, K=4, batch 1: 2*2*3*4 = 48; bytes (8 + 12 + 6) elements * 2 bytes = 52
    assert w == Work(48, 52, "fp16", "matmul")


def test_gemm_with_a_transposed_view_and_c() -> None:
    # gpu::gemm(A [64, 128], B [128, 256] stored transposed (strides 1, 128), C [64, 256]) -> [64, 256] fp32
    w = _mgx("gpu::gemm", [([64, 128], F), ([128, 256], F, [1, 128]), ([64, 256], F), ([64, 256], F)])
    flops = 2 * 64 * 256 * 128                        # 4,194,304
    nbytes = (64 * 128 + 128 * 256 + 64 * 256 + 64 * 256) * 4  # A, B, C read, out written: 294,912
    assert w == Work(flops, nbytes, "fp32", "matmul")


def test_quant_dot_int8_in_int32_out() -> None:
    w = _mgx("gpu::quant_gemm", [([32, 64], "int8"), ([64, 16], "int8"), ([32, 16], "int32")])
    # 2*32*16*64 = 65,536; bytes 32*64 + 64*16 (int8) + 32*16*4 (int32) = 2048 + 1024 + 2048
    assert w == Work(65_536, 5120, "int8", "matmul")


def test_fused_dot_add_finds_the_product_among_broadcast_operands() -> None:
    # mlir_dot_add(bias, a, b): the bias [2, 8, 16] broadcast from [16] (strides 0, 0, 1), b shared by the batch
    # (strides 0, 16, 1): they are read at their size in memory
    w = _mgx("gpu::code_object::mlir_dot_add",
             [([2, 8, 16], H, [0, 0, 1]), ([2, 8, 32], H), ([2, 32, 16], H, [0, 16, 1]), ([2, 8, 16], H)])
    # product: M=8, N=16, K=32, batch 2: 2*8*16*32*2 = 16,384; the add: 1 per output element, 256
    # bytes: bias 16 + a 512 + b 512 + out 256 = 1296 elements * 2 bytes
    assert w == Work(16_384 + 256, 1296 * 2, "fp16", "matmul")


def test_dot_fused_with_a_transpose_and_reshape_by_element_counts() -> None:
    # mlir_transpose_reshape_dot_add: x [1, 12, 128, 64] is transposed to [1, 128, 12, 64] and reshaped to
    # [1, 128, 768] inside the kernel, times w [1, 768, 512] (shared: strides 0, 512, 1), + bias [1, 128, 512]
    w = _mgx("gpu::code_object::mlir_transpose_reshape_dot_add",
             [([1, 12, 128, 64], H), ([1, 768, 512], H, [0, 512, 1]), ([1, 128, 512], H, [0, 0, 1]),
              ([1, 128, 512], H)])
    # out [1, 128, 512]: M=128, N=512; K = numel(x)*N/numel(out) = 98304*512/65536 = 768 = numel(w)*M/numel(out)
    # = 393216*128/65536; no other pair agrees. flops 2*128*512*768 = 100,663,296 + the add on 65,536 elements
    flops = 2 * 128 * 512 * 768 + 128 * 512
    nbytes = (98_304 + 768 * 512 + 512 + 65_536) * 2  # x, w as stored, the bias row, out
    assert w == Work(flops, nbytes, "fp16", "matmul")


def test_product_whose_operands_do_not_fit_has_no_model() -> None:
    assert _mgx("gpu::code_object::mlir_dot", [([2, 5], F), ([4, 3], F), ([2, 3], F)]) is None
    # two products in one kernel (attention) are not modelled
    assert _mgx("gpu::code_object::mlir_dot_softmax_dot", [([1, 4, 8], F), ([1, 8, 4], F), ([1, 4, 8], F),
                                                           ([1, 4, 8], F)]) is None


# --- convolutions --------------------------------------------------------------------------------------------------

def test_dense_convolution() -> None:
    # gpu::convolution(x [1, 3, 8, 8], w [4, 3, 3, 3]) -> [1, 4, 6, 6] (MIOpen's workspace left out by the reader)
    w = _mgx("gpu::convolution", [([1, 3, 8, 8], F), ([4, 3, 3, 3], F), ([1, 4, 6, 6], F)])
    # 2*N*C_out*C_in*kh*kw*H_out*W_out = 2*1*4*3*3*3*6*6 = 7776; bytes (192 + 108 + 144) * 4
    assert w == Work(7776, (192 + 108 + 144) * 4, "fp32", "conv")


def test_depthwise_convolution_counts_one_channel_per_output() -> None:
    # mlir_convolution_add_clip(bias broadcast, x [1, 32, 56, 56], w [32, 1, 3, 3]): groups = C_in / w[1] = 32
    w = _mgx("gpu::code_object::mlir_convolution_add_clip",
             [([1, 32, 56, 56], H, [0, 1, 0, 0]), ([1, 32, 56, 56], H), ([32, 1, 3, 3], H), ([1, 32, 56, 56], H)])
    out = 32 * 56 * 56                                # 100,352 output elements
    conv = 2 * 1 * 32 * 1 * 3 * 3 * 56 * 56           # 2*N*C_out*(C_in/groups)*k*k*H*W = 1,806,336
    assert conv == 2 * out * 9
    # add and clip: 1 each per output element; bytes: bias 32 + x + w 288 + out, fp16
    assert w == Work(conv + 2 * out, (32 + out + 288 + out) * 2, "fp16", "conv")
    # counted as dense (groups 1) it would be 32x the convolution's FLOPs
    assert w is not None and w.flops < 2 * out * 32 * 9 / 10


def test_miopen_fused_convolutions() -> None:
    # gpu::conv_bias_relu(x, w, bias broadcast from [4]) -> out (the workspace left out by the reader): the
    # convolution 7776 (as above) + the bias add and relu on each of the 144 output elements
    bias = ([1, 4, 6, 6], F, [0, 1, 0, 0])
    w = _mgx("gpu::conv_bias_relu", [([1, 3, 8, 8], F), ([4, 3, 3, 3], F), bias, ([1, 4, 6, 6], F)])
    assert w == Work(7776 + 2 * 144, (192 + 108 + 4 + 144) * 4, "fp32", "conv")
    # gpu::miopen_fusion names no ops: the convolution alone
    w = _mgx("gpu::miopen_fusion", [([1, 3, 8, 8], F), ([4, 3, 3, 3], F), bias, ([1, 4, 6, 6], F)])
    assert w == Work(7776, (192 + 108 + 4 + 144) * 4, "fp32", "conv")


def test_grouped_convolution() -> None:
    # x [2, 8, 10, 10], w [6, 4, 3, 3]: groups = 8 / 4 = 2, C_out 6 divisible by 2; out [2, 6, 8, 8]
    w = _mgx("gpu::convolution", [([2, 8, 10, 10], F), ([6, 4, 3, 3], F), ([2, 6, 8, 8], F)])
    # 2*N*C_out*(C_in/groups)*k*k*H*W = 2*2*6*4*3*3*8*8 = 55,296
    assert w is not None and w.flops == 55_296 and w.family == "conv"


def test_transposed_convolution() -> None:
    # convolution_backwards: x [1, 4, 5, 5], w [C_in=4, C_out/groups=2, 3, 3] -> [1, 2, 7, 7]
    w = _mgx("gpu::convolution_backwards", [([1, 4, 5, 5], F), ([4, 2, 3, 3], F), ([1, 2, 7, 7], F)])
    # each input element scattered through the kernel into 2 channels: 2*N*C_in*(C_out/g)*k*k*H_in*W_in
    # = 2*1*4*2*3*3*5*5 = 3600; bytes (100 + 72 + 98) * 4
    assert w == Work(3600, (100 + 72 + 98) * 4, "fp32", "conv")


def test_convolution_whose_weight_cannot_be_told_has_no_model() -> None:
    # batch 32 = C_out 32 and a residual shaped like the output: it fits as a weight too (other FLOPs): no model
    entries = [([32, 32, 8, 8], F), ([32, 32, 8, 8], F), ([32, 1, 3, 3], F), ([32, 32, 8, 8], F)]
    assert _mgx("gpu::code_object::mlir_convolution_add", entries) is None
    # without the residual the weight is the only fit
    assert _mgx("gpu::code_object::mlir_convolution", [entries[0], entries[2], entries[3]]) is not None
    # no operand fits as a weight (the scratch buffer of an old listing)
    assert _mgx("gpu::convolution", [([1, 3, 4, 4], F), ([385], F), ([1, 8, 4, 4], F)]) is None


# --- pointwise, reductions, normalisations, pooling, copies ---------------------------------------------------------

def test_pointwise_kernel_counts_one_flop_per_op_per_element() -> None:
    # add_relu_kernel(a [2, 3], b broadcast from [3]) -> [2, 3]: add + relu = 2 FLOPs per element
    w = _mgx("gpu::code_object::add_relu_kernel", [([2, 3], F), ([2, 3], F, [0, 1]), ([2, 3], F)])
    # flops 6 * 2 = 12; bytes (6 + 3 + 6) * 4 = 60
    assert w == Work(12, 60, "fp32", "elementwise")
    # sigmoid counts 4 (neg, exp, add, div), mul 1: 5 per element
    w = _mgx("gpu::code_object::mul_sigmoid_kernel", [([4], F), ([4], F), ([4], F)])
    assert w == Work(20, 48, "fp32", "elementwise")
    # the old un-fused op names read the same way
    assert _mgx("gpu::add_relu", [([2, 3], F), ([2, 3], F), ([2, 3], F)]) == Work(12, 72, "fp32", "elementwise")


def test_conversion_is_a_copy() -> None:
    # convert_kernel fp32 [4, 4] -> fp16: no arithmetic; 16*4 read + 16*2 written
    assert _mgx("gpu::code_object::convert_kernel", [([4, 4], F), ([4, 4], H)]) == Work(0, 96, "fp32", "copy")


def test_copies_move_bytes_only() -> None:
    # contiguous_kernel of a transposed view [4, 8] (strides 1, 4): 32 read + 32 written, fp32
    assert _mgx("gpu::code_object::contiguous_kernel", [([4, 8], F, [1, 4]), ([4, 8], F)]) == Work(0, 256, "fp32",
                                                                                                     "copy")
    # hip::copy_to_gpu(src) -> out: read and written once
    assert _mgx("hip::copy_to_gpu", [([1000], F), ([1000], F)]) == Work(0, 8000, "fp32", "copy")
    # hip::fill writes only
    assert _mgx("hip::fill", [([10], H)]) == Work(0, 20, "fp16", "copy")
    # concat of [2, 3] and [2, 5] -> [2, 8]: (6 + 10 + 16) * 4
    assert _mgx("gpu::code_object::concat_kernel", [([2, 3], F), ([2, 5], F), ([2, 8], F)]) == Work(0, 128, "fp32",
                                                                                                      "copy")


def test_gather_reads_the_rows_it_gathers() -> None:
    # gather_kernel(table [1000, 64], indices [2, 5] int32) -> [2, 5, 64]: 640 rows' elements read, not 64,000
    w = _mgx("gpu::code_object::gather_kernel", [([1000, 64], F), ([2, 5], "int32"), ([2, 5, 64], F)])
    assert w == Work(0, 640 * 4 + 10 * 4 + 640 * 4, "fp32", "embedding")


def test_softmax_kernel() -> None:
    # softmax_kernel [2, 8] fp16: 5 FLOPs per element (max, sub, exp, sum, div) = 80; bytes 2 * 16 * 2
    assert _mgx("gpu::code_object::softmax_kernel", [([2, 8], H), ([2, 8], H)]) == Work(80, 64, "fp16", "reduction")


def test_fused_reductions() -> None:
    # softmax fused as reduces: reduce_max, sub, exp, reduce_sum on the 64 input elements (4 each), div after the
    # last reduction on the 64 output elements (1): 5 * 64 = 320
    w = _mgx("gpu::code_object::reduce_max_sub_exp_reduce_sum_div_kernel", [([4, 16], F), ([4, 16], F)])
    assert w == Work(320, 2 * 64 * 4, "fp32", "reduction")
    # reduce_mean over the last axis: 64 FLOPs, reads 64, writes 4
    assert _mgx("gpu::code_object::reduce_mean_kernel", [([4, 16], F), ([4, 1], F)]) == Work(64, 68 * 4, "fp32",
                                                                                                "reduction")
    # mul then reduce_sum: 2 per input element
    w = _mgx("gpu::code_object::mul_reduce_sum_kernel", [([4, 16], F), ([4, 16], F), ([4, 1], F)])
    assert w == Work(128, (64 + 64 + 4) * 4, "fp32", "reduction")


def test_layernorm_with_fused_pre_add_and_affine() -> None:
    # add_layernorm_mul_add_kernel(x, residual, gamma, beta broadcast from [8]) -> [2, 4, 8]: the layernorm 6 per
    # element (statistics 4, normalise 2) of the 64 input elements = 384; add, mul, add on each output element = 192
    w = _mgx("gpu::code_object::add_layernorm_mul_add_kernel",
             [([2, 4, 8], F), ([2, 4, 8], F), ([2, 4, 8], F, [0, 0, 1]), ([2, 4, 8], F, [0, 0, 1]), ([2, 4, 8], F)])
    assert w == Work(384 + 192, (64 + 64 + 8 + 8 + 64) * 4, "fp32", "norm")


def test_pooling_with_and_without_its_window() -> None:
    # gpu::pooling[lengths={3, 3}](x [1, 8, 16, 16]) -> [1, 8, 8, 8]: 512 outputs x 9 = 4608; bytes (2048 + 512) * 4
    entries = [([1, 8, 16, 16], F), ([1, 8, 8, 8], F)]
    assert _mgx("gpu::pooling", entries, window=[3, 3]) == Work(4608, 10_240, "fp32", "reduction")
    # pooling_kernel prints no window: one FLOP per input element, 2048
    assert _mgx("gpu::code_object::pooling_kernel", entries) == Work(2048, 10_240, "fp32", "reduction")


# --- names and hostile records -------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", [
    "gpu::code_object::topk_kernel", "gpu::lrn", "gpu::code_object", "gpu::code_object::", "gpu::", "hip::",
    "gpu::code_object::mlir_dot_frobnicate", "gpu::code_object::add_kernel_x", "hip::hip_copy_literal",
    "gpu::code_object::noop_kernel", "gpu::code_object::" + "add_" * 300 + "kernel",
])
def test_names_without_a_model(name: str) -> None:
    assert _mgx(name, [([4], F), ([4], F)]) is None


def test_detailed_group_names_read_by_their_op() -> None:
    # perf --detailed appends the shapes: gpu::code_object::add_relu_kernel<float_type(4, 4)>
    assert _mgx("gpu::code_object::add_relu_kernel<float_type(4, 4)>", [([4], F), ([4], F)]) == Work(8, 32, "fp32",
                                                                                                   "elementwise")


@pytest.mark.parametrize(("shapes", "dtypes", "strides"), [
    ("[[4,5],[5,3],[4,3]", '["float32","float32","float32"]', None),         # unclosed
    ("[[4,5],[5,3],[4,3]]", '["float32","float32"]', None),                   # the output has no dtype
    ("[[4,5],[5,3],[4,3]]", '["", "", ""]', None),                            # no tensor at all
    ("[[4,5],[5,3],[[4,3],[2]]]", '["float32","float32","TensorList"]', None),  # a tuple output
    ("[[4,5],[5,3],[4,3]]", '["float32","float32","tuple"]', None),           # an unknown dtype
    ("[[4,5],[5,3],[4,3]]", '["float32","float32","float32"]', "[[5,1],[3,1]]"),  # strides of another record
    ("[[4,5],[5,3],[4,3]]", '["float32","float32","float32"]', "[[5,1],[3,1],[3]]"),
    ("[[4,5],[5,3],[4,3]]", '["float32","float32","float32"]', '[[5,1],[3,-1],[3,1]]'),
    ("[[4,5],[5,3],[4,3]]", '["float32","float32","float32"]', '[[5,1],[3,"x"],[3,1]]'),
    ("[[4,-5],[5,3],[4,3]]", '["float32","float32","float32"]', None),
    ("[[4,5.5],[5,3],[4,3]]", '["float32","float32","float32"]', None),
    ("[[1099511627776,5],[5,3],[4,3]]", '["float32","float32","float32"]', None),
    ('{"a": 1}', '["float32"]', None),
    ("[" * 5000 + "]" * 5000, '["float32"]', None),
    ("[[4,5],[5,3],[4,3]]", "[" * 5000 + "]" * 5000, None),
    ("[[4,5],[5,3],[4,3]]", '["float32","float32","float32"]', "[" * 5000 + "]" * 5000),
    ("[[4,5],[5,3],[4,3]]", '["float32","float32","float32"]', "x" * 70_000),
])
def test_hostile_records_have_no_model(shapes: str, dtypes: str, strides: str | None) -> None:
    assert op_work("gpu::code_object::mlir_dot", shapes, dtypes, None, strides=strides) is None


def test_too_many_operands_to_pair_have_no_model() -> None:
    # a product's operands are searched pairwise: past MAX_PAIRED_OPERANDS (64) the record is refused
    entries = [([4, 5], F), ([5, 3], F)] + [([7], F)] * 63 + [([4, 3], F)]
    assert _mgx("gpu::code_object::mlir_dot", entries) is None
    assert _mgx("gpu::code_object::mlir_dot", entries[:2] + entries[-1:]) is not None


def test_other_frameworks_names_are_untouched_by_strides() -> None:
    # an aten record with strides keeps its aten model
    w = op_work("aten::mm", "[[64,128],[128,256]]", '["c10::Half","c10::Half"]', None, strides="[[128,1],[256,1]]")
    assert w == Work(2 * 64 * 256 * 128, (64 * 128 + 128 * 256 + 64 * 256) * 2, "fp16", "matmul")


# --- a perf listing through the reader and the roofline -----------------------------------------------------------

#: A MobileNet-like block on a 2.x driver: a depthwise 3x3 convolution fused with its bias and clip (MLIR), then a
#: dense 1x1 convolution on MIOpen (x, w, workspace, y), then a pointwise add into the output parameter.
LISTING = """\
Running [ MIGraphX Version: 2.12.0 ]: migraphx-driver perf mobilenet_block.onnx
Compiling ...
module: "main"
Allocating params ...
Running performance report ...
@0 = check_context::migraphx::gpu::context -> float_type, {}, {}, target_id=0: 0.001ms, 1%
@1 = hip::hip_allocate_memory[shape=int8_type, {2000000}, {1},id=main:scratch] -> int8_type, {2000000}, {1}, \
target_id=0: 0.001ms, 1%
x = @param:x -> half_type, {1, 32, 56, 56}, {100352, 3136, 56, 1}, target_id=0: 0.001ms, 1%
@3 = hip::hip_copy_literal[id=main:@literal:0] -> half_type, {32, 1, 3, 3}, {9, 9, 3, 1}, target_id=0: 0.001ms, 1%
@4 = hip::hip_copy_literal[id=main:@literal:1] -> half_type, {32}, {1}, target_id=0: 0.001ms, 1%
@5 = multibroadcast[out_lens={1, 32, 56, 56},out_dyn_dims={}](@4) -> half_type, {1, 32, 56, 56}, {0, 1, 0, 0}, \
target_id=0: 0.001ms, 1%
@6 = load[offset=0,end=200704](@1) -> half_type, {1, 32, 56, 56}, {100352, 3136, 56, 1}, target_id=0: 0.001ms, 1%
@7 = gpu::code_object[code_object=9040,symbol_name=mlir_convolution_add_clip,global=2048,local=64,](@5,x,@3,@6) -> \
half_type, {1, 32, 56, 56}, {100352, 3136, 56, 1}, target_id=0: 0.05ms, 40%
@8 = hip::hip_copy_literal[id=main:@literal:2] -> half_type, {64, 32, 1, 1}, {32, 1, 1, 1}, target_id=0: 0.001ms, 1%
@9 = load[offset=200704,end=204800](@1) -> int8_type, {4096}, {1}, target_id=0: 0.001ms, 1%
@10 = load[offset=204800,end=606208](@1) -> half_type, {1, 64, 56, 56}, {200704, 3136, 56, 1}, target_id=0: \
0.001ms, 1%
@11 = gpu::convolution[padding={0, 0, 0, 0},stride={1, 1},dilation={1, 1},group=1,padding_mode=0,solution_id=77]\
(@7,@8,@9,@10) -> half_type, {1, 64, 56, 56}, {200704, 3136, 56, 1}, target_id=0: 0.04ms, 32%
main:#output_0 = @param:main:#output_0 -> half_type, {1, 64, 56, 56}, {200704, 3136, 56, 1}, target_id=0: \
0.001ms, 1%
@13 = gpu::code_object[code_object=4688,symbol_name=add_kernel,global=100352,local=1024,output_arg=2,]\
(@11,@10,main:#output_0) -> half_type, {1, 64, 56, 56}, {200704, 3136, 56, 1}, target_id=0: 0.02ms, 16%
@14 = @return(@13), target_id=0

Summary:
gpu::code_object::mlir_convolution_add_clip: 0.05ms / 1 = 0.05ms, 40%
gpu::convolution: 0.04ms / 1 = 0.04ms, 32%
gpu::code_object::add_kernel: 0.02ms / 1 = 0.02ms, 16%
hip::hip_copy_literal: 0.003ms / 3 = 0.001ms, 3%
load: 0.003ms / 3 = 0.001ms, 3%
@param: 0.002ms / 2 = 0.001ms, 2%
multibroadcast: 0.001ms / 1 = 0.001ms, 1%
hip::hip_allocate_memory: 0.001ms / 1 = 0.001ms, 1%
check_context::migraphx::gpu::context: 0.001ms / 1 = 0.001ms, 1%

Batch size: 1
Rate: 8000 inferences/sec
Total time: 0.125ms
Total instructions time: 0.121ms
Overhead time: 0.0005ms, 0.004ms
Overhead: 0%, 4%
""".replace("\\\n", "")


def test_perf_listing_through_the_roofline(tmp_path) -> None:
    path = tmp_path / "perf.txt"
    path.write_text(LISTING)
    trace = open_trace(path, use_cache=False)
    # the one warning: no timeline (the listing's own sums hold, every line read)
    assert [w["problem"].split(":")[0] for w in trace.warnings] == ["MIGraphX perf text has no timeline"]
    ops = {e["name"]: e for e in trace.events.to_pylist() if e["kind"] == "cpu_op"}
    # the records: operands resolved from the instructions they name; the output buffer (@6, @10, #output_0) and
    # MIOpen's workspace (@9) are not inputs; the output comes last
    depthwise = ops["gpu::code_object::mlir_convolution_add_clip"]
    assert json.loads(depthwise["shapes"]) == [[1, 32, 56, 56], [1, 32, 56, 56], [32, 1, 3, 3], [1, 32, 56, 56]]
    assert json.loads(depthwise["strides"])[0] == [0, 1, 0, 0]
    assert json.loads(depthwise["dtypes"]) == ["float16"] * 4
    assert json.loads(ops["gpu::convolution"]["shapes"]) == [[1, 32, 56, 56], [64, 32, 1, 1], [1, 64, 56, 56]]
    assert json.loads(ops["gpu::code_object::add_kernel"]["shapes"]) == [[1, 64, 56, 56]] * 3

    peaks = Peaks(device="drawn", tflops={"fp16": 100.0}, gbps=1000.0, source="drawn")
    table, notes = roofline_table(trace, peaks)
    rows = {r["name"]: r for r in table.to_pylist()}
    hw = 56 * 56
    # depthwise: 2*N*C_out*(C_in/groups)*k*k*H*W with groups 32 = 2*1*32*1*9*3136 = 1,806,336, + add and clip on
    # each of the 100,352 output elements; bytes: bias 32, x, w 288, out (fp16)
    assert rows["gpu::code_object::mlir_convolution_add_clip"]["flops"] == 2 * 32 * 9 * hw + 2 * 32 * hw
    assert rows["gpu::code_object::mlir_convolution_add_clip"]["bytes"] == (32 + 32 * hw + 288 + 32 * hw) * 2
    # dense 1x1: 2*N*C_out*C_in*H*W = 2*64*32*3136 = 12,845,056; bytes x + w + y
    assert rows["gpu::convolution"]["flops"] == 2 * 64 * 32 * hw
    assert rows["gpu::convolution"]["bytes"] == (32 * hw + 64 * 32 + 64 * hw) * 2
    assert rows["gpu::code_object::add_kernel"]["flops"] == 64 * hw
    assert {r["family"] for r in rows.values()} == {"conv", "elementwise"}
    # each row at its time: 50, 40 and 20 us
    assert [rows[n]["device_ns"] for n in ("gpu::code_object::mlir_convolution_add_clip", "gpu::convolution",
                                           "gpu::code_object::add_kernel")] == [50_000, 40_000, 20_000]
    # the depthwise convolution: 2.0 MFLOP over 401 KB, intensity 5 (fp16 ridge 100): memory bound, its roof
    # 1000 GB/s x 5.0 FLOP/B = 5 TFLOP/s; achieved 2,007,040 FLOP / 50 us = 0.0401 TFLOP/s: 0.80% of it
    dw = rows["gpu::code_object::mlir_convolution_add_clip"]
    intensity = (2 * 32 * 9 * hw + 2 * 32 * hw) / ((32 + 32 * hw + 288 + 32 * hw) * 2)
    assert dw["bound"] == "memory" and dw["intensity"] == pytest.approx(intensity)
    assert dw["pct_of_roof"] == pytest.approx(100 * (2_007_040 / 50e3 / 1e3) / (1000 * intensity / 1e3))
    assert notes[0].startswith("ops with a work model hold 100.0% of the device time")
