"""The roofline (opscope.analyses.roofline): each device event charged to the innermost op with a work model, the
achieved rates against the device's roofs; values computed by hand from drawn timelines, and the matmul rows of a
real H100 trace against 2*M*N*K from their shapes."""

from __future__ import annotations

import json

import pyarrow.compute as pc
import pytest
from support.builder import make_trace, row
from support.shared import shared_trace

from opscope.analyses.peaks import Peaks
from opscope.analyses.roofline import roofline_table

BF16 = '["c10::BFloat16","c10::BFloat16"]'
PEAKS = Peaks(device="test device", tflops={"bf16": 100.0, "fp32": 10.0}, gbps=1000.0, source="drawn")


def drawn():
    """aten::linear (64x128 by 256x128) calls aten::mm, which launches a 10 us gemm; aten::foo (no model) launches
    a 5 us kernel."""
    return make_trace([
        row("user_annotation", "ProfilerStep#1", 0, 100),
        row("cpu_op", "aten::linear", 5, 30, shapes="[[64,128],[256,128]]", dtypes=BF16),
        row("cpu_op", "aten::mm", 6, 20, shapes="[[64,128],[128,256]]", dtypes=BF16),
        row("runtime", "cudaLaunchKernel", 10, 4, correlation=1),
        row("kernel", "gemm_bf16", 16, 10, correlation=1, pid=0, tid=7, stream=7, device=0),
        row("cpu_op", "aten::foo", 40, 20),
        row("runtime", "cudaLaunchKernel", 42, 4, correlation=2),
        row("kernel", "foo_kernel", 50, 5, correlation=2, pid=0, tid=7, stream=7, device=0),
    ])


def test_the_innermost_modelled_op_holds_its_kernels_time():
    table, notes = roofline_table(drawn(), PEAKS)
    assert table.num_rows == 1
    r = table.to_pylist()[0]
    flops = 2 * 64 * 256 * 128                       # 4,194,304
    nbytes = (64 * 128 + 128 * 256 + 64 * 256) * 2   # 114,688
    assert (r["name"], r["calls"], r["flops"], r["bytes"], r["device_ns"]) == ("aten::mm", 1, flops, nbytes, 10_000)
    assert r["achieved_tflops"] == pytest.approx(flops / 10_000 / 1e3)  # 0.419 TFLOP/s
    intensity = flops / nbytes                                              # 36.57 FLOP/B
    assert r["intensity"] == pytest.approx(intensity)
    # the memory roof at that intensity (1000 GB/s x 36.57 = 36.6 TFLOP/s) is below the compute roof (100)
    assert r["bound"] == "memory"
    assert r["pct_of_roof"] == pytest.approx(100 * (flops / 10_000 / 1e3) / (1000 * intensity / 1e3))
    assert r["saving_at_roof_ns"] == round(10_000 * (1 - r["pct_of_roof"] / 100))
    assert notes[0].startswith("ops with a work model hold 66.7% of the device time")
    assert notes[1] == "no model for: aten::foo 33.3%"


def test_by_kernel_and_without_peaks():
    table, _ = roofline_table(drawn(), PEAKS, by="kernel")
    r = table.to_pylist()[0]
    assert (r["name"], r["calls"], r["flops"], r["device_ns"]) == ("gemm_bf16", 1, 2 * 64 * 256 * 128, 10_000)
    bare, _ = roofline_table(drawn(), None)
    assert bare["pct_of_roof"].to_pylist() == [None] and bare["flops"].to_pylist() == [2 * 64 * 256 * 128]


def test_a_compute_bound_row_and_one_above_its_roof():
    # 1024^3 bf16 matmul: 2.147 GFLOP, 6 MiB, intensity 341: compute bound on the drawn device (ridge 100)
    shapes = "[[1024,1024],[1024,1024]]"
    trace = make_trace([
        row("cpu_op", "aten::mm", 0, 100, shapes=shapes, dtypes=BF16),
        row("runtime", "cudaLaunchKernel", 1, 2, correlation=1),
        row("kernel", "gemm", 5, 43, correlation=1, pid=0, tid=7, stream=7, device=0),
        row("cpu_op", "aten::mm", 200, 100, shapes=shapes, dtypes=BF16),
        row("runtime", "cudaLaunchKernel", 201, 2, correlation=2),
        row("kernel", "gemm", 205, 43, correlation=2, pid=0, tid=7, stream=7, device=0),
    ])
    table, notes = roofline_table(trace, PEAKS)
    r = table.to_pylist()[0]
    flops = 2 * 1024 ** 3
    assert r["calls"] == 2 and r["bound"] == "compute"
    assert r["pct_of_roof"] == pytest.approx(100 * (2 * flops / 86_000 / 1e3) / 100.0)  # 49.9%
    faster, notes = roofline_table(trace, Peaks("slow", {"bf16": 10.0}, 1000.0, "drawn"))
    assert faster["pct_of_roof"].to_pylist() == [100.0]
    assert any("faster than their roof" in n for n in notes)


def test_every_matmul_row_of_a_real_h100_trace():
    from opscope.analyses.peaks import trace_peaks
    from opscope.ingest import open_trace

    trace = open_trace(shared_trace("tracelens/traces/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"))
    peaks, how = trace_peaks(trace)
    assert peaks is not None and "H100" in peaks.device, how
    table, _ = roofline_table(trace, peaks)
    pct = table["pct_of_roof"]
    assert pc.min(pct).as_py() > 0 and pc.max(pct).as_py() <= 100
    matmuls = table.filter(pc.equal(table["family"], "matmul")).to_pylist()
    assert len(matmuls) >= 5
    for r in matmuls:
        dims = json.loads(r["shapes"])
        if r["name"] == "aten::addmm":
            (m, k), (_, n) = dims[1], dims[2]
            batch = 1
        elif r["name"] == "aten::mm":
            (m, k), (_, n) = dims[0], dims[1]
            batch = 1
        elif r["name"] == "aten::bmm":
            (batch, m, k), (_, _, n) = dims[0], dims[1]
        else:
            continue
        assert r["flops"] == 2 * m * n * k * batch, r


def test_a_cpu_trace_and_its_depthwise_convolutions_below_the_dense_ones():
    """The torch CPU MobileNetV2 trace (no device work: each innermost modelled op's own time), under this machine's
    roofs as `opscope peaks` measured them (fp32 0.0929 TFLOP/s, 16.79 GB/s): the depthwise 3x3 convolutions
    (memory bound) run further below their roof, weighted by time, than the dense ones."""
    from opscope.ingest import open_trace

    trace = open_trace(shared_trace("generated/torch_cpu_mobilenetv2_train.json"))
    table, notes = roofline_table(trace, Peaks("this CPU", {"fp32": 0.0929}, 16.79, "opscope peaks"))
    assert notes[0].startswith("no device work")
    weighted = {"depthwise": [0.0, 0], "dense": [0.0, 0]}
    for r in table.to_pylist():
        if r["name"] != "aten::mkldnn_convolution":
            continue
        (_, channels, _, _), weight = json.loads(r["shapes"])[:2]
        kind = "depthwise" if weight[1] == 1 and weight[0] == channels else "dense"
        weighted[kind][0] += r["pct_of_roof"] * r["device_ns"]
        weighted[kind][1] += r["device_ns"]
        assert 0 < r["pct_of_roof"] <= 100
    depthwise, dense = (total / ns for total, ns in weighted.values())
    assert weighted["depthwise"][1] and weighted["dense"][1]
    assert depthwise < dense


def test_an_onnx_runtime_cpu_run_in_host_mode():
    """ORT's nodes as ops with their outputs' shapes, no device work: Conv and a Gemm whose B ORT prepacked (left out
    of its record) hold their own time; Flatten (no model) is counted and named."""
    trace = make_trace([
        row("user_annotation", "model_run", 0, 100),
        row("cpu_op", "Conv", 10, 50, shapes="[[8,3,112,112],[32,3,3,3]]", dtypes='["float","float"]',
            output_shapes="[[8,32,56,56]]"),
        row("cpu_op", "Flatten", 60, 10, shapes="[[8,32,1,1]]", dtypes='["float"]', output_shapes="[[8,32]]"),
        row("cpu_op", "Gemm", 70, 10, shapes="[[8,32],[10]]", dtypes='["float","float"]', output_shapes="[[8,10]]"),
    ])
    table, notes = roofline_table(trace, None)
    rows = {r["name"]: r for r in table.to_pylist()}
    assert set(rows) == {"Conv", "Gemm"}
    # Conv: stride 2 read off the output: 2*8*32*3*3*3*56*56; its 50 us of host time
    assert (rows["Conv"]["flops"], rows["Conv"]["device_ns"]) == (2 * 8 * 32 * 3 * 3 * 3 * 56 * 56, 50_000)
    assert rows["Gemm"]["flops"] == 2 * 8 * 10 * 32  # M 8, K 32, N 10 (from Y)
    # (50 + 10) of the outermost ops' 70 us: 85.7%; Flatten's 10 us: 14.3%
    assert "they hold 85.7% of the outermost ops' time" in notes[0] and "70,000 ns" in notes[0]
    assert notes[1] == "no model for (outermost ops without a modelled op in them): Flatten 14.3%"
    assert len(notes) == 2


def test_a_trace_whose_ops_record_no_shapes_says_so():
    trace = make_trace([row("cpu_op", "Conv2D", 0, 10), row("cpu_op", "Relu", 12, 2)])
    table, notes = roofline_table(trace, None)
    assert table.num_rows == 0
    assert notes[-1] == ("none of the trace's 2 ops records its input shapes, which the work models read (the "
                         "profiler records them with PyTorch's record_shapes=True, TensorFlow's host_tracer_level=3)")
    # one op with its shapes: the profile recorded them, no such note
    _, notes = roofline_table(make_trace([row("cpu_op", "Relu", 0, 10, shapes="[[4]]", dtypes='["float"]'),
                                          row("cpu_op", "Conv2D", 12, 2)]), None)
    assert not any("records its input shapes" in n for n in notes)


def test_an_xla_op_is_modelled_from_its_hlo_record_whatever_its_name():
    """A JAX op as the xplane reader writes it: named by its instruction, its record the HLO text."""
    record = json.dumps(["bf16[64,256] fusion(bf16[64,128], bf16[128,256]), kind=kCustom\n"
                         "  bf16[64,256] dot(bf16[64,128], bf16[128,256]), lhs_contracting_dims={1}, "
                         "rhs_contracting_dims={0}"])
    trace = make_trace([
        row("cpu_op", "gemm_fusion", 0, 5, shapes="[[64,128],[128,256]]", dtypes='["bf16","bf16"]',
            concrete_inputs=record),
        row("runtime", "cuLaunchKernel", 1, 2, correlation=1),
        row("kernel", "triton_gemm", 10, 10, correlation=1, pid=0, tid=7, stream=7, device=0),
    ])
    table, notes = roofline_table(trace, PEAKS)
    r = table.to_pylist()[0]
    # 2*64*256*128 = 4,194,304 FLOPs; bytes (64*128 + 128*256 + 64*256) * 2 = 114,688
    assert (r["name"], r["family"], r["flops"], r["bytes"], r["dtype"]) == ("gemm_fusion", "matmul", 4_194_304,
                                                                            114_688, "bf16")
    assert notes[0].startswith("ops with a work model hold 100.0% of the device time")
