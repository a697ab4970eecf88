"""Work per call of XLA HLO instructions from their text (analyses/hlo_work.py, reached through work.op_work): each
formula against a hand computation written out here, XLA's own text syntax parsed, hostile text refused."""

from __future__ import annotations

import json

import pytest

from opscope.analyses.hlo_work import instruction_work, is_record
from opscope.analyses.work import FAMILIES, Work, modeled_names, op_work


def _hlo(*lines: str, name: str = "fusion") -> Work | None:
    """The work op_work gives an op whose record (concrete_inputs) is these HLO lines, as the xplane reader writes."""
    return op_work(name, None, None, json.dumps(["\n".join(lines)]))


# --- dot -----------------------------------------------------------------------------------------------------------

def test_dot_is_2mnk_and_reads_both_operands() -> None:
    w = _hlo("f32[8,32] dot(f32[8,16], f32[16,32]), lhs_contracting_dims={1}, rhs_contracting_dims={0}", name="dot")
    # M=8, K=16, N=32: 2*8*32*16 = 8,192; bytes (8*16 + 16*32 + 8*32) * 4 = (128 + 512 + 256) * 4 = 3,584
    assert w == Work(8_192, 3_584, "fp32", "matmul")


def test_batched_dot_counts_the_batch() -> None:
    w = _hlo("bf16[4,8,32] dot(bf16[4,8,16], bf16[4,16,32]), lhs_batch_dims={0}, lhs_contracting_dims={2}, "
             "rhs_batch_dims={0}, rhs_contracting_dims={1}", name="dot")
    # batch 4, M=8, K=16, N=32: 2*4*8*32*16 = 32,768; bytes (512 + 2,048 + 1,024) * 2 = 7,168
    assert w == Work(32_768, 7_168, "bf16", "matmul")


def test_dot_contracting_any_dimension() -> None:
    # lhs [K=8, M=16] contracted on its dim 0 with rhs [K=8, N=32]: 2*16*32*8 = 8,192
    w = _hlo("f32[16,32] dot(f32[8,16], f32[8,32]), lhs_contracting_dims={0}, rhs_contracting_dims={0}")
    assert w is not None and w.flops == 8_192


@pytest.mark.parametrize("line", [
    "f32[8,32] dot(f32[8,16], f32[15,32]), lhs_contracting_dims={1}, rhs_contracting_dims={0}",  # K disagrees
    "f32[8,33] dot(f32[8,16], f32[16,32]), lhs_contracting_dims={1}, rhs_contracting_dims={0}",  # result disagrees
    "f32[8,32] dot(f32[8,16], f32[16,32])",  # no dimension numbers
    "f32[8,32] dot(f32[8,16], f32[16,32]), lhs_contracting_dims={5}, rhs_contracting_dims={0}",  # no such dim
    "f32[8,32] dot(%a, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}",  # operands without shapes
])
def test_dot_that_does_not_resolve_has_no_model(line: str) -> None:
    assert _hlo(line) is None


def test_xla_text_with_names_layouts_and_metadata_parses() -> None:
    line = ('%dot.3 = f32[8,32]{1,0} dot(f32[8,16]{1,0} %p0, f32[16,32]{1,0} %p1), lhs_contracting_dims={1}, '
            'rhs_contracting_dims={0}, metadata={op_name="jit(f)/dot_general, with a comma" source_line=3}')
    assert _hlo(line) == Work(8_192, 3_584, "fp32", "matmul")
    tiled = "ROOT %f = bf16[8,128]{1,0:T(8,128)(2,1)} fusion(bf16[8,128]{1,0:T(8,128)(2,1)} %p), kind=kLoop"
    assert _hlo(tiled) == Work(0, 8 * 128 * 2 * 2, "bf16", "fusion")


# --- convolution ---------------------------------------------------------------------------------------------------

def test_convolution_nhwc_with_stride_and_padding() -> None:
    w = _hlo("f32[1,112,112,64] convolution(f32[1,224,224,3], f32[3,3,3,64]), window={size=3x3 stride=2x2 "
             "pad=0_1x0_1}, dim_labels=b01f_01io->b01f", name="convolution")
    # out 1*112*112*64 = 802,816 elements, each 3 input features x 3x3 taps: 2 * 802,816 * 3 * 9 = 43,352,064
    # bytes: input 224*224*3*4 = 602,112 + kernel 3*3*3*64*4 = 6,912 + output 802,816*4 = 3,211,264
    assert w == Work(43_352_064, 602_112 + 6_912 + 3_211_264, "fp32", "conv")


def test_depthwise_convolution_counts_one_input_feature_per_output() -> None:
    w = _hlo("f32[1,32,56,56] convolution(f32[1,32,56,56], f32[32,1,3,3]), window={size=3x3 pad=1_1x1_1}, "
             "dim_labels=bf01_oi01->bf01, feature_group_count=32")
    # 32 groups of one channel: 2 * (32*56*56 outputs) * 1 * 9 = 1,806,336
    assert w is not None and w.flops == 1_806_336 and w.family == "conv"


def test_base_dilated_convolution_counts_the_input_scattered_not_the_holes() -> None:
    w = _hlo("f32[1,8,9,9] convolution(f32[1,16,4,4], f32[16,8,3,3]), window={size=3x3 pad=2_2x2_2 lhs_dilate=2x2}, "
             "dim_labels=bf01_io01->bf01")
    # each of the 16*4*4 = 256 input elements meets 8 output features through 3x3 taps: 2 * 256 * 8 * 9 = 36,864
    assert w is not None and w.flops == 36_864


@pytest.mark.parametrize("line", [
    # the window's size is not the kernel's
    "f32[1,32,56,56] convolution(f32[1,32,56,56], f32[32,32,3,3]), window={size=5x5 pad=2_2x2_2}, "
    "dim_labels=bf01_oi01->bf01",
    # the kernel's input features times the groups are not the input's
    "f32[1,32,56,56] convolution(f32[1,32,56,56], f32[32,4,3,3]), window={size=3x3 pad=1_1x1_1}, "
    "dim_labels=bf01_oi01->bf01",
    # labels that repeat a dimension
    "f32[1,32,56,56] convolution(f32[1,32,56,56], f32[32,32,3,3]), window={size=3x3}, dim_labels=bf00_oi01->bf01",
    # no window
    "f32[1,32,54,54] convolution(f32[1,32,56,56], f32[32,32,3,3]), dim_labels=bf01_oi01->bf01",
])
def test_convolution_that_does_not_resolve_has_no_model(line: str) -> None:
    assert _hlo(line) is None


CUDNN_FORWARD = ('(bf16[1,5120,34,31,53], u8[7150336]) custom-call(bf16[1,16,32,60,104], bf16[5120,16,1,2,2]), '
                 'window={size=1x2x2 stride=1x2x2 pad=1_1x1_1x1_1}, dim_labels=bf012_oi012->bf012, '
                 'custom_call_target="__cudnn$convForward"')


def test_cudnn_forward_convolution_custom_call() -> None:
    """The convolution of the JAX MI300 trace (jax_conv_minimal_08), as the reader writes it."""
    w = _hlo(CUDNN_FORWARD, name="cudnn-conv")
    # out 1*5120*34*31*53 = 286,013,440 elements, each 16 input features x 1*2*2 taps: 2 * 286,013,440 * 16 * 4
    assert w is not None and w.flops == 36_609_720_320 and w.dtype == "bf16" and w.family == "conv"
    # bytes: input 1*16*32*60*104*2 = 6,389,760 + kernel 5120*16*4*2 = 655,360 + output 286,013,440*2 (the u8
    # scratch buffer of the tuple left out)
    assert w.bytes == 6_389_760 + 655_360 + 572_026_880


def test_cudnn_backward_convolutions_are_their_forward_convolution() -> None:
    # forward: input [2,8,10,10] * kernel [16 out, 8 in, 3x3] -> output [2,16,8,8]: 2 * (2*16*8*8) * 8 * 9 = 294,912
    grad_input = _hlo("(f32[2,8,10,10], u8[0]) custom-call(f32[2,16,8,8], f32[16,8,3,3]), window={size=3x3}, "
                      'dim_labels=bf01_oi01->bf01, custom_call_target="__cudnn$convBackwardInput"')
    grad_filter = _hlo("(f32[16,8,3,3], u8[0]) custom-call(f32[2,8,10,10], f32[2,16,8,8]), window={size=3x3}, "
                       'dim_labels=bf01_oi01->bf01, custom_call_target="__cudnn$convBackwardFilter"')
    # bytes: the three arrays once each, (2*16*8*8 + 16*8*9 + 2*8*10*10) * 4 = (2,048 + 1,152 + 1,600) * 4 = 19,200
    assert grad_input == grad_filter == Work(294_912, 19_200, "fp32", "conv")


def test_gemm_custom_call_is_the_product_of_its_first_two_operands() -> None:
    w = _hlo('(bf16[64,256], s8[1024]) custom-call(bf16[64,128], bf16[128,256]), custom_call_target="__cublas$gemm", '
             "lhs_contracting_dims={1}, rhs_contracting_dims={0}")
    # 2*64*256*128 = 4,194,304; bytes (64*128 + 128*256 + 64*256) * 2 = 114,688 (the workspace left out)
    assert w == Work(4_194_304, 114_688, "bf16", "matmul")


def test_other_custom_calls_have_no_model() -> None:
    assert _hlo('f32[8] custom-call(f32[8]), custom_call_target="my_kernel"') is None
    assert _hlo("f32[8] custom-call(f32[8])") is None


# --- fusions, elementwise, reductions, data movement ---------------------------------------------------------------

def test_fusion_without_a_product_is_memory_bound_with_no_flops() -> None:
    w = _hlo("bf16[55862,5120] fusion(bf16[1,5120,34,31,53]), kind=kInput")
    # a transpose: 286,013,440 elements read and written at 2 bytes
    assert w == Work(0, 2 * 286_013_440 * 2, "bf16", "fusion")


def test_fusion_counts_the_products_inside_it() -> None:
    w = _hlo("f32[8,32] fusion(f32[8,16], f32[16,32], f32[32]), kind=kOutput",
             "  f32[8,32] dot(f32[8,16], f32[16,32]), lhs_contracting_dims={1}, rhs_contracting_dims={0}")
    # the dot's 2*8*32*16 = 8,192; bytes the fusion's: (128 + 512 + 32 + 256) * 4 = 3,712
    assert w == Work(8_192, 3_712, "fp32", "matmul")
    assert _hlo("f32[8,32] fusion(f32[8,16]), kind=kLoop", "  this is not an instruction") is None


def test_elementwise_is_one_flop_per_result_element() -> None:
    # 4*5 = 20 adds; bytes (20 + 20 read + 20 written) * 4 = 240
    assert _hlo("f32[4,5] add(f32[4,5], f32[4,5])", name="add") == Work(20, 240, "fp32", "elementwise")
    # a comparison writes bools: (20 + 20) * 4 + 20 * 1 = 180
    assert _hlo("pred[4,5] compare(f32[4,5], f32[4,5]), direction=LT") == Work(20, 180, "bool", "elementwise")


def test_reductions() -> None:
    # 4*5 = 20 inputs, one add each; bytes 80 read + 4 (the init scalar) + 16 written = 100
    assert _hlo("f32[4] reduce(f32[4,5], f32[]), dimensions={1}, to_apply=%add") == Work(20, 100, "fp32",
                                                                                           "reduction")
    # 2*3*4 = 24 results of a 2x2 window: 96; bytes 2*6*8*4 = 384 + 4 + 96 = 484
    assert _hlo("f32[2,3,4] reduce-window(f32[2,6,8], f32[]), window={size=1x2x2 stride=1x2x2}") == \
        Work(96, 484, "fp32", "reduction")
    assert _hlo("(f32[4], s32[4]) reduce(f32[4,5], s32[4,5], f32[], s32[]), dimensions={1}") is None  # variadic


def test_data_movement() -> None:
    # a transpose reads and writes 20 floats: 160 bytes, no flops
    assert _hlo("f32[5,4] transpose(f32[4,5]), dimensions={1,0}") == Work(0, 160, "fp32", "copy")
    # a slice reads only what it keeps: 2 x 2*5*4 = 80
    assert _hlo("f32[2,5] slice(f32[4,5]), slice={[0:2], [0:5]}") == Work(0, 80, "fp32", "copy")
    # an in-place update reads and writes the update (16*32*4 = 2,048) and reads two s32 indices: 4,104
    assert _hlo("f32[64,32] dynamic-update-slice(f32[64,32], f32[16,32], s32[], s32[])") == \
        Work(0, 4_104, "fp32", "copy")
    assert _hlo("bf16[8,16] convert(f32[8,16])") == Work(0, 8 * 16 * (4 + 2), "bf16", "copy")


@pytest.mark.parametrize("line", [
    "(f32[2], s32[2]) sort(f32[2], s32[2]), dimensions={0}",
    "(s32[], f32[8]) while((s32[], f32[8])), condition=%c, body=%b",
    "f32[8] all-reduce(f32[8]), to_apply=%add",
    "f32[8] call(f32[8]), to_apply=%f",
])
def test_ops_without_a_model(line: str) -> None:
    assert _hlo(line) is None


# --- the record and hostile text -----------------------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    '["f32[8,32] dot(f32[8,16], f32[16,32]", "x"]',  # two strings
    '["f32[8] add(f32[8], f32[8]"]',  # unclosed
    '["f32[8] add(f32[8], f32[8])), x=1"]',  # a stray bracket
    '["f32[8] add(f32[8], f32[8]), window={size=3"]',  # an unclosed brace
    '["f32[?] add(f32[?], f32[?])"]',  # dynamic dimensions
    '["f32[99999999999999999,99999999999999999] add(f32[1], f32[1])"]',  # too many elements
    '["f32[8] add(f32[8], f32[8]), metadata={op_name=\\"unterminated}"]',  # an unclosed quote
    '["zz32[8] add(zz32[8], zz32[8])"]',  # an unknown element type
    '["f32[8] add(f32[8], __import__(\'os\'))"]',  # text that is not an operand
    '["' + "(" * 5000 + '"]',
    "not json",
])
def test_hostile_records_have_no_model(text: str) -> None:
    assert instruction_work(text) is None
    assert op_work("fusion", None, None, text) is None


def test_a_record_longer_than_the_bound_has_no_model() -> None:
    operands = ", ".join(["f32[8]"] * 20_000)
    assert op_work("concatenate", None, None, json.dumps([f"f32[160000] concatenate({operands})"])) is None


def test_what_is_a_record() -> None:
    assert is_record(json.dumps(["f32[8] add(f32[8], f32[8])"]))
    assert is_record(json.dumps(["(f32[8], u8[4]) custom-call(f32[8])"]))
    assert is_record(json.dumps(["%add.1 = f32[8]{0} add(f32[8]{0} %a, f32[8]{0} %b)"]))
    # Kineto's concrete inputs are not: a torch op named like an HLO opcode keeps its own model
    assert not is_record('["", "", "1"]') and not is_record('["[2, 2]"]') and not is_record(None)
    dot = op_work("aten::dot", "[[16],[16]]", '["float","float"]', '["", ""]')
    assert dot == Work(2 * 16, (16 + 16 + 1) * 4, "fp32", "matmul")


def test_hlo_opcodes_are_listed_by_family() -> None:
    names = modeled_names()
    assert set(names) == set(FAMILIES)
    assert "hlo:dot" in names["matmul"] and "hlo:convolution" in names["conv"] and "hlo:fusion" in names["fusion"]
    assert "hlo:add" in names["elementwise"] and "hlo:reduce" in names["reduction"] and "hlo:copy" in names["copy"]
