"""Which op calls ``opscope repro`` reproduces: cases built from tiny traces drawn by hand.

Times in the timelines below are µs; expected values are worked out by hand from them.
"""

from __future__ import annotations

import json

import pytest
from support import make_trace, row

from opscope.errors import UsageError
from opscope.repro.cases import select_cases

US = 1000


def op(name: str, ts: float, dur: float, dims=None, strides=None, types=None, concrete=None, **more) -> dict:
    """A cpu_op row with its recorded inputs as the trace's JSON text."""
    columns = {"shapes": dims, "strides": strides, "dtypes": types, "concrete_inputs": concrete}
    return row("cpu_op", name, ts, dur, **{k: json.dumps(v) for k, v in columns.items() if v is not None}, **more)


def mm(ts: float, dur: float, b_strides=(16, 1)) -> dict:
    return op("aten::mm", ts, dur, [[8, 4], [4, 16]], [[4, 1], list(b_strides)], ["float", "float"], ["", ""])


def step(n: int, ts: float, dur: float) -> dict:
    return row("user_annotation", f"ProfilerStep#{n}", ts, dur)


# --- grouping -------------------------------------------------------------------------------------------------

def test_the_same_op_with_the_same_inputs_is_one_case_and_other_strides_another():
    trace = make_trace([step(1, 0, 1000), mm(10, 100), mm(200, 300), mm(600, 50, b_strides=(1, 4))])
    sel = select_cases(trace, top=0)
    assert sel.device == "cpu" and sel.time_is == "host self time" and sel.considered == 2
    first, second = sel.cases
    assert (first.op, first.calls, first.total_ns, first.trace_ns) == ("aten::mm", 2, 400 * US, 200 * US)
    assert first.input_strides == [[4, 1], [16, 1]] and first.input_dims == [[8, 4], [4, 16]]
    assert first.input_types == ["float", "float"] and first.concrete_inputs == ["", ""]
    assert (second.calls, second.total_ns, second.input_strides) == (1, 50 * US, [[4, 1], [1, 4]])
    assert first.share == pytest.approx(400 / 450) and second.share == pytest.approx(50 / 450)
    assert first.steps == [1] and first.first_ts_ns == 10 * US


def test_the_recorded_time_per_call_is_the_median_so_one_slow_step_does_not_move_it():
    trace = make_trace([mm(0, 100), mm(200, 120), mm(400, 9000)])
    (case,) = select_cases(trace, top=0).cases
    assert (case.calls, case.total_ns, case.trace_ns) == (3, 9220 * US, 120 * US)


def test_other_scalar_arguments_make_another_case():
    add = [[[4], [4], []], [[1], [1], []], ["float", "float", "Scalar"]]
    trace = make_trace([op("aten::add", 0, 10, *add, ["", "", "1"]), op("aten::add", 20, 10, *add, ["", "", "2"]),
                        op("aten::add", 40, 10, *add, ["", "", "1"])])
    cases = select_cases(trace, top=0).cases
    assert sorted((c.concrete_inputs[2], c.calls) for c in cases) == [("1", 2), ("2", 1)]


def test_top_keeps_the_biggest_and_says_how_many_there_were():
    trace = make_trace([op("aten::relu", 0, 10, [[4]]), op("aten::relu", 20, 30, [[8]]),
                        op("aten::relu", 60, 20, [[16]])])
    sel = select_cases(trace, top=2)
    assert [c.input_dims for c in sel.cases] == [[[8]], [[16]]] and sel.considered == 3
    # share is of all ops' self time, not of the chosen ones
    assert [c.share for c in sel.cases] == pytest.approx([30 / 60, 20 / 60])


# --- the op the user's code called ----------------------------------------------------------------------------

def test_a_case_climbs_from_addmm_to_linear_and_names_what_ran_under_it():
    trace = make_trace([
        step(1, 0, 1000),
        op("aten::linear", 100, 100, [[8, 32], [16, 32], [16]]),  # self 100 - 5 - 80 = 15
        op("aten::t", 102, 5, [[16, 32]]),
        op("aten::transpose", 103, 2, [[16, 32], [], []]),
        op("aten::addmm", 110, 80, [[16], [8, 32], [32, 16], [], []]),
    ])
    (case,) = select_cases(trace).cases
    assert case.op == "aten::linear" and case.calls == 1 and case.input_dims == [[8, 32], [16, 32], [16]]
    assert case.total_ns == 100 * US and case.trace_ns == 100 * US  # self time of it and all under it; duration
    assert case.recorded_ops == ["aten::t", "aten::transpose", "aten::addmm"]
    assert case.leaf_ops == ["aten::addmm", "aten::linear", "aten::t"]  # most self time first, three at most
    assert case.kernels == []


@pytest.mark.parametrize(("kind", "above"), [
    ("cpu_op", "autograd::engine::evaluate_function: ConvolutionBackward0"),  # an autograd node
    ("python", "torch/nn/modules/conv.py(554): forward"),  # a Python frame
    ("user_annotation", "nn.Module: Conv2d_0"),  # a module annotation
    ("cpu_op", "profiler::_record_function_enter_new"),  # the profiler's own op
])
def test_the_climb_stops_below_anything_that_is_not_a_framework_op(kind, above):
    trace = make_trace([
        row(kind, above, 0, 100),
        op("aten::convolution_backward", 10, 80, [[2, 4, 8, 8], [2, 4, 8, 8], [4, 1, 3, 3]]),
        op("aten::mkldnn_convolution_backward", 20, 60),
    ])
    cases = [c for c in select_cases(trace, top=0).cases if c.op.startswith("aten::")]
    assert [(c.op, c.total_ns) for c in cases] == [("aten::convolution_backward", 80 * US)]
    assert cases[0].recorded_ops == ["aten::mkldnn_convolution_backward"]


def test_two_framework_ops_above_each_other_climb_to_the_outermost():
    trace = make_trace([op("aten::conv2d", 0, 100, [[1, 3, 8, 8]]), op("aten::convolution", 5, 90),
                        op("aten::_convolution", 10, 80), op("aten::mkldnn_convolution", 15, 70)])
    (case,) = select_cases(trace).cases
    assert case.op == "aten::conv2d" and case.leaf_ops[0] == "aten::mkldnn_convolution"
    assert case.recorded_ops == ["aten::convolution", "aten::_convolution", "aten::mkldnn_convolution"]


# --- a GPU trace: device time, --kernel ------------------------------------------------------------------------

def launch(ts: float, corr: int) -> dict:
    return row("runtime", "cudaLaunchKernel", ts, 2, correlation=corr)


def kernel(name: str, ts: float, dur: float, corr: int) -> dict:
    return row("kernel", name, ts, dur, pid=0, tid=7, device=0, stream=7, correlation=corr)


def gpu_trace():
    """Step 1 [0, 1000): linear [100, 300) > addmm [110, 290) > launch (corr 1) -> gemm [150, 250) 100 µs;
    relu [400, 450) > launch (corr 2) -> relu_kernel [460, 480) 20 µs.
    Step 2 [1000, 2000): linear as in step 1 > addmm > launch (corr 3) -> gemm [1150, 1210) 60 µs;
    a kernel without a launch (corr 9) [1500, 1520) 20 µs."""
    lin = [[8, 32], [16, 32], [16]]
    return make_trace([
        step(1, 0, 1000),
        op("aten::linear", 100, 200, lin), op("aten::addmm", 110, 180), launch(120, 1),
        op("aten::relu", 400, 50, [[8, 16]]), launch(410, 2),
        step(2, 1000, 1000),
        op("aten::linear", 1100, 200, lin), op("aten::addmm", 1110, 180), launch(1120, 3),
        kernel("gemm", 150, 100, 1), kernel("relu_kernel", 460, 20, 2), kernel("gemm", 1150, 60, 3),
        kernel("orphan", 1500, 20, 9),
    ])


def test_a_gpu_trace_charges_device_time_to_the_op_the_user_called():
    sel = select_cases(gpu_trace(), top=0)
    assert sel.device == "cuda" and sel.time_is == "device time"
    assert sel.share_of == "device time of all kernels, copies and memsets"
    linear, relu = sel.cases
    assert (linear.op, linear.calls, linear.total_ns, linear.trace_ns) == ("aten::linear", 2, 160 * US, 80 * US)
    assert linear.kernels == ["gemm"] and linear.leaf_ops == ["aten::addmm"] and linear.steps == [1, 2]
    assert (relu.op, relu.calls, relu.total_ns) == ("aten::relu", 1, 20 * US)
    # the share is of all device time (200 µs), the orphan kernel included, which a note accounts for
    assert linear.share == pytest.approx(160 / 200) and relu.share == pytest.approx(20 / 200)
    assert any("10.0% of the device time was launched outside any op" in n for n in sel.notes), sel.notes


def test_kernel_filter_keeps_the_ops_that_launched_a_matching_kernel_and_its_time_only():
    sel = select_cases(gpu_trace(), kernel="relu", top=0)
    assert [(c.op, c.total_ns, c.share) for c in sel.cases] == [("aten::relu", 20 * US, 1.0)]
    assert sel.share_of == "device time of all kernels, copies and memsets matching --kernel"


def test_steps_filter_counts_only_those_steps():
    sel = select_cases(gpu_trace(), steps=[2], top=0)
    (linear,) = [c for c in sel.cases if c.op == "aten::linear"]
    assert (linear.calls, linear.total_ns, linear.steps) == (1, 60 * US, [2])
    assert "aten::relu" not in [c.op for c in sel.cases]
    assert sel.share_of == "device time of all kernels, copies and memsets in steps 2"
    # step 2's device time: a kernel is in the step of its launch, so the orphan (no launch) is in none
    assert linear.share == pytest.approx(60 / 60)

    cpu = make_trace([step(1, 0, 100), mm(10, 50), step(2, 100, 100), mm(110, 30)])
    (case,) = select_cases(cpu, steps=[2]).cases
    assert (case.calls, case.total_ns, case.steps, case.share) == (1, 30 * US, [2], 1.0)


def test_op_filter_is_a_regex_on_the_case_op():
    sel = select_cases(gpu_trace(), op="lin", top=0)
    assert [c.op for c in sel.cases] == ["aten::linear"] and sel.considered == 1
    assert select_cases(gpu_trace(), op="^addmm$").cases == []  # the case's op, not the leaf


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"op": "conv("}, "invalid regular expression"),
    ({"kernel": "[gemm"}, "invalid regular expression"),
])
def test_bad_regexes_are_usage_errors(kwargs, words):
    with pytest.raises(UsageError, match=words):
        select_cases(gpu_trace(), **kwargs)


def test_kernel_filter_on_a_cpu_trace_is_a_usage_error():
    with pytest.raises(UsageError, match="--kernel needs a trace with device kernels"):
        select_cases(make_trace([mm(0, 10)]), kernel="gemm")


def test_unrecorded_or_damaged_inputs_become_none():
    trace = make_trace([op("aten::mm", 0, 10), row("cpu_op", "aten::mm", 20, 10, shapes="[[1, 2]", dtypes='"float"')])
    cases = select_cases(trace, top=0).cases
    assert {(json.dumps(c.input_dims), json.dumps(c.input_types)) for c in cases} == {("null", "null")}
