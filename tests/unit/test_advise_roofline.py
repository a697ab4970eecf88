"""The roofline rule on hand-made traces: an op far below its roof that holds real time is a finding with its numbers
worked out by hand; one near its roof, or too small, or on a device opscope does not know, is not."""

from __future__ import annotations

import pytest
from support.builder import make_trace, row
from typer.testing import CliRunner

from opscope.advise import advise
from opscope.advise.rules.roofline import BELOW_PCT, SHARE, TARGET_PCT
from opscope.cli import app
from opscope.repro.cases import select_cases

BF16 = '["c10::BFloat16","c10::BFloat16"]'
FP32 = '["float","float"]'
MM = "[[4096,4096],[4096,4096]]"
FLOPS = 2 * 4096 ** 3                  # 137.4 GFLOP per call; 96 MiB in bf16: intensity 1365 FLOP/B
H100 = [{"name": "NVIDIA H100 80GB HBM3"}]   # H100 SXM: bf16 989.4 TFLOP/s, fp32 66.9, tf32 494.7; 3350 GB/s


def trace(mm_us: float, other_us: float = 0.0, dtypes: str = BF16, device=H100, steps: int = 1):
    """``steps`` steps of 5000 us; in each, aten::linear calls aten::mm (4096^3), which launches one gemm of
    ``mm_us``; aten::foo (no work model) launches a kernel of ``other_us``."""
    events = []
    for s in range(steps):
        t0 = 5000 * s
        events += [row("user_annotation", f"ProfilerStep#{s + 1}", t0, 5000),
                   row("cpu_op", "aten::linear", t0 + 10, 40, shapes="[[4096,4096],[4096,4096],[]]", dtypes=dtypes),
                   row("cpu_op", "aten::mm", t0 + 12, 30, shapes=MM, dtypes=dtypes),
                   row("runtime", "cudaLaunchKernel", t0 + 14, 2, correlation=10 * s + 1),
                   row("kernel", "gemm", t0 + 100, mm_us, correlation=10 * s + 1, pid=0, tid=7, stream=7, device=0)]
        if other_us:
            events += [row("cpu_op", "aten::foo", t0 + 60, 20),
                       row("runtime", "cudaLaunchKernel", t0 + 62, 2, correlation=10 * s + 2),
                       row("kernel", "foo_kernel", t0 + 100 + mm_us, other_us, correlation=10 * s + 2, pid=0, tid=7,
                           stream=7, device=0)]
    return make_trace(events, metadata={"device_properties": device})


def test_an_op_far_below_its_roof_with_the_numbers_by_hand():
    # per step: the gemm 1000 us, foo 1000 us (2000 us of device time: the mm holds 50%)
    result = advise(trace(1000, other_us=1000, steps=2), only=["roofline"])
    (f,) = result.findings
    achieved = FLOPS / 1_000_000 / 1e3           # 137.4 TFLOP/s
    pct = 100 * achieved / 989.4                 # 13.89% of the bf16 compute roof (the memory roof: 4573 TFLOP/s)
    assert pct < BELOW_PCT
    saving = round(1_000_000 * (1 - pct / TARGET_PCT))   # per step: 722 us at 50% of the roof
    assert f.rule == "roofline" and f.saving_ns == saving and f.saving_method == "estimated"
    assert f.saving_pct == pytest.approx(100 * saving / 5_000_000, abs=0.01)
    assert f.title == f"aten::mm runs at {pct:.1f}% of its roof on the H100 SXM and holds 50.0% of the device time"
    (ev,) = f.evidence
    assert (ev["name"], ev["shapes"], ev["dtype"], ev["bound"], ev["unit"]) == ("aten::mm", MM, "bf16", "compute",
                                                                                 "TFLOP/s")
    assert (ev["calls_per_step"], ev["time_ns"], ev["share_pct"]) == (1.0, 1_000_000, 50.0)
    assert ev["pct_of_roof"] == pytest.approx(pct, rel=1e-5) and ev["achieved"] == pytest.approx(achieved, rel=1e-5)
    assert ev["roof"] == 989.4 and ev["saving_ns"] == saving
    at_roof = round(1_000_000 * (1 - pct / 100))
    assert f"at the roof itself (a bound no kernel reaches) {at_roof / 1000:.3f} us" in f.estimate
    assert "not simulated: the roof is a bound" in f.estimate
    # the remedy reproduces the op the model calls (aten::linear around the aten::mm), which repro does find
    pattern = "^aten::linear$"
    assert f"--op '{pattern}' --variants auto" in f.remedy and "runs inside aten::linear" in f.remedy
    cases = select_cases(trace(1000, other_us=1000, steps=2), top=0, op=pattern).cases
    assert [c.op for c in cases] == ["aten::linear"]


def test_fp32_math_is_offered_tf32_and_autocast():
    (f,) = advise(trace(20_000, dtypes=FP32), only=["roofline"]).findings    # 6.9 TFLOP/s: 10.3% of fp32's 66.9
    assert "--variants tf32,autocast_bf16" in f.remedy
    assert f.evidence[0]["dtype"] == "fp32" and f.evidence[0]["roof"] == 66.9


def test_silent_near_the_roof_and_when_too_small():
    near = 100 * (FLOPS / 400_000 / 1e3) / 989.4     # a 400 us gemm: 34.7% of the roof
    assert near >= BELOW_PCT
    assert advise(trace(400, other_us=100), only=["roofline"]).findings == []
    # 1000 us at 13.9% of the roof beside 20 ms of other work: 4.8% of the device time
    assert SHARE > 1000 / 21_000
    assert advise(trace(1000, other_us=20_000), only=["roofline"]).findings == []


def test_not_applicable_without_a_known_device_or_device_work():
    unknown = advise(trace(1000, device=[{"name": "Some Accelerator 9000"}]), only=["roofline"])
    assert unknown.findings == []
    assert "device not recognised: 'Some Accelerator 9000'" in unknown.not_applicable["roofline"]
    cpu = make_trace([row("cpu_op", "aten::mm", 0, 100, shapes=MM, dtypes=BF16)],
                     metadata={"device_properties": H100})
    assert "no device work" in advise(cpu, only=["roofline"]).not_applicable["roofline"]


def test_explain():
    res = CliRunner().invoke(app, ["advise", "--explain", "roofline"])
    assert res.exit_code == 0, res.output
    assert "below 30% of its roof" in res.output and "opscope" in res.output
