"""dominant-op rule: dominating items and known faster alternatives, on real CPU and GPU traces and by hand."""

from __future__ import annotations

import re

import pytest
import tracemutate as tm
from conftest import shared_trace
from tracefiles import write_trace, x

from opscope.advise import advise
from opscope.ingest import open_trace


def by_title(findings, word):
    return [f for f in findings if word in f.title]


def test_depthwise_backward_on_the_cpu_mobilenet_trace():
    path = shared_trace("generated/torch_cpu_mobilenetv2_train.json")
    doc = tm.load(path)
    spans = tm.steps(doc)
    # depthwise: the weight (third input of convolution_backward) has one input channel per group
    dw = [e for e in doc["traceEvents"] if e.get("name") == "aten::convolution_backward" and e.get("ph") == "X"
          and e["args"]["Input Dims"][2][1] == 1 and any(s <= e["ts"] < end for _, s, end in spans)]
    inclusive = sum(e["dur"] for e in dw) * 1000 / len(spans)
    f = by_title(advise(open_trace(path), only=["dominant-op"]).findings, "Depthwise")
    assert len(f) == 1
    matched = sum(r["time_ns"] for r in f[0].evidence)  # self time: inclusive less the few ops inside
    assert 0.97 * inclusive <= matched <= inclusive + len(dw)
    assert all(r["shapes"] and "[1," not in r["shapes"].split("],[")[0] for r in f[0].evidence)
    assert f[0].saving_ns == pytest.approx(matched / 2, abs=len(f[0].evidence))
    assert "channels_last" in f[0].change


def test_fp32_kernels_on_tensor_core_gpus_and_tf32_ones_not():
    slow = shared_trace("hta/trace_diff/test/test.json.gz")  # a V100: fp32 volta_sgemm / scudnn kernels
    fast = shared_trace("hta/trace_diff/control/control.json.gz")  # the same job on A100s, cutlass TF32 kernels
    f = by_title(advise(open_trace(slow), only=["dominant-op"]).findings, "Fp32")
    assert len(f) == 1
    doc = tm.load(slow)
    owner, spans = tm.launch_steps(doc), tm.steps(doc)
    fp32 = sum(e["dur"] for e in tm.device_work(doc) if e["cat"] == "kernel" and
               re.search(r"sgemm|scudnn", e["name"]) and tm.device_step(e, owner, spans) is not None)
    assert f[0].saving_ns == pytest.approx(fp32 * 1000 / len(spans) / 2, abs=2)
    # compute capability 7.0 from the trace's deviceProperties: fp16 tensor cores, no TF32
    assert tm.load(slow)["deviceProperties"][0]["computeMajor"] == 7
    assert "float16" in f[0].change and "tf32" not in f[0].change
    assert by_title(advise(open_trace(fast), only=["dominant-op"]).findings, "Fp32") == []


def gpu_step(kernels: list[tuple[str, float]]) -> list[dict]:
    events = [x("ProfilerStep#1", 0, 10_000, cat="user_annotation")]
    t = 100
    for i, (name, dur) in enumerate(kernels):
        events.append(x("cudaLaunchKernel", 1 + i, 1, cat="cuda_runtime", correlation=i + 1))
        events.append(x(name, t, dur, cat="kernel", pid=0, tid=7, device=0, stream=7, correlation=i + 1))
        t += dur
    return events


def test_dominant_kernel_without_alternative_has_no_estimate(tmp_path):
    events = gpu_step([("attention_kernel", 600), ("gelu_kernel", 200), ("max_pool2d_kernel", 200)])
    found = advise(open_trace(write_trace(tmp_path / "t.json", events)), only=["dominant-op"]).findings
    dominant = by_title(found, "attention_kernel")
    assert len(dominant) == 1 and dominant[0].saving_ns is None
    assert dominant[0].evidence[0]["share_pct"] == 60.0
    pool = by_title(found, "Max pooling")  # 20% of kernel time, all of it saved (upper bound)
    assert len(pool) == 1 and pool[0].saving_ns == 200_000 and pool[0].saving_pct == 2.0
    assert [f.title for f in found if f.saving_ns is None] == [dominant[0].title]


def test_even_kernels_without_alternatives_give_nothing(tmp_path):
    events = gpu_step([(f"k{i}", 100) for i in range(6)])
    assert advise(open_trace(write_trace(tmp_path / "t.json", events)), only=["dominant-op"]).findings == []
