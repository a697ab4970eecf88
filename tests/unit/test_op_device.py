"""Device work charged to ops (analyses/op_device.py): the launching op, or the outermost op with a Python API."""

from __future__ import annotations

import pytest
from support import make_trace, row

from opscope.analyses.op_device import api_op_rows, device_work
from opscope.errors import UsageError

US = 1000
GEMM = ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel"
        "__5x_cublas")


def launch(ts, corr):
    return row("runtime", "cudaLaunchKernel", ts, 1, correlation=corr)


def kernel(name, ts, dur, corr):
    return row("kernel", name, ts, dur, pid=0, tid=7, device=0, stream=7, correlation=corr)


def nested_trace():
    """One step. aten::linear > aten::addmm > launch (GEMM, 100 us); a compiled region (an op without a Python API)
    > aten::mm > launch (50 us); aten::conv2d > aten::convolution > aten::cudnn_convolution > launch (conv kernel,
    30 us); a launch outside any op (20 us)."""
    return make_trace([
        row("user_annotation", "ProfilerStep#1", 0, 1000),
        row("cpu_op", "aten::linear", 10, 50, shapes="[[4,8],[16,8],[16]]"),
        row("cpu_op", "aten::addmm", 12, 40, shapes="[[16],[4,8],[8,16],[],[]]"), launch(14, 1),
        row("cpu_op", "Torch-Compiled Region: 0/0", 100, 50),
        row("cpu_op", "aten::mm", 110, 20, shapes="[[4,8],[8,16]]"), launch(112, 2),
        row("cpu_op", "aten::conv2d", 200, 60, shapes="[[1,3,8,8],[4,3,3,3]]"),
        row("cpu_op", "aten::convolution", 202, 55, shapes="[[1,3,8,8],[4,3,3,3],[],[1,1]]"),
        row("cpu_op", "aten::cudnn_convolution", 205, 45, shapes="[[1,3,8,8],[4,3,3,3]]"), launch(207, 3),
        launch(300, 4),
        kernel(GEMM, 20, 100, 1),
        kernel("triton_tem_fused_mm_0", 130, 50, 2),
        kernel("cutlass__5x_cudnn::Kernel<cutlass_tensorop_bf16_s16816fprop_optimized_bf16_256x64_32x4_nhwc_align8>",
               210, 30, 3),
        kernel("mystery_kernel", 310, 20, 4),
    ])


def test_launching_level_charges_the_op_that_launched_the_work():
    work = device_work(nested_trace(), level="launching")
    assert [(r["op"], r["shapes"], r["class"], r["dur_ns"]) for r in work.to_pylist()] == [
        ("aten::addmm", "[[16],[4,8],[8,16],[],[]]", "gemm", 100 * US),
        ("aten::mm", "[[4,8],[8,16]]", "gemm", 50 * US),
        ("aten::cudnn_convolution", "[[1,3,8,8],[4,3,3,3]]", "conv", 30 * US),
        (None, None, "other", 20 * US),
    ]
    assert work["step"].to_pylist() == [1, 1, 1, 1]


def test_api_level_charges_the_outermost_op_with_a_python_api_not_a_wrapper_without_one():
    work = device_work(nested_trace(), level="api", framework="pytorch")
    assert [(r["op"], r["shapes"]) for r in work.to_pylist()] == [
        ("aten::linear", "[[4,8],[16,8],[16]]"),  # torch.nn.functional.linear, above aten::addmm
        ("aten::mm", "[[4,8],[8,16]]"),  # the compiled region has no API: it would lump everything in one row
        ("aten::conv2d", "[[1,3,8,8],[4,3,3,3]]"),  # above the vendor's aten::cudnn_convolution
        (None, None),
    ]
    # the class still comes from the kernel and the op that launched it
    assert work["class"].to_pylist() == ["gemm", "gemm", "conv", "other"]


def test_api_op_rows_keeps_nulls_and_the_launching_op_when_nothing_above_has_an_api():
    import pyarrow as pa

    trace = nested_trace()
    events = trace.select(["kind", "name", "parent"])
    names = events["name"].cast(pa.string()).to_pylist()
    region = names.index("Torch-Compiled Region: 0/0")
    mm = names.index("aten::mm")
    rows = api_op_rows(events, pa.array([region, mm, None], pa.int64()), "pytorch")
    assert rows.to_pylist() == [region, mm, None]


def test_bad_level_and_a_trace_without_device_work():
    with pytest.raises(UsageError, match="--op-level"):
        device_work(nested_trace(), level="outermost")
    assert device_work(make_trace([row("cpu_op", "aten::add", 0, 1)])).num_rows == 0
