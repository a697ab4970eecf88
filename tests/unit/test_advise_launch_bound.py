"""launch-bound rule on hand-built traces: kernels shorter than their launch calls."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from support.tracefiles import write_trace, x

from opscope.advise import advise
from opscope.advise.context import AdviceContext
from opscope.advise.rules.launch_bound import _repeated, launched_kernels
from opscope.ingest import open_trace


def test_a_slow_first_launch_does_not_count_as_a_per_step_cost(tmp_path):
    # the first launch call takes 5 ms (lazy module loading), the nine others 20 us, each kernel 5 us:
    # L = 10 kernels x the median call (20 us) = 200 us, not 5 ms + 9 x 20 us; the device idles > 4 ms after them
    events = [x("ProfilerStep#1", 0, 10_000, cat="user_annotation"),
              x("cudaLaunchKernel", 10, 5_000, cat="cuda_runtime", correlation=1),
              x("tiny", 5_011, 5, cat="kernel", pid=0, tid=7, device=0, stream=7, correlation=1)]
    for i in range(1, 10):
        events.append(x("cudaLaunchKernel", 5_010 + 30 * i, 20, cat="cuda_runtime", correlation=i + 1))
        events.append(x("tiny", 5_031 + 30 * i, 5, cat="kernel", pid=0, tid=7, device=0, stream=7,
                        correlation=i + 1))
    f = advise(open_trace(write_trace(tmp_path / "t.json", events)), only=["launch-bound"]).findings
    assert len(f) == 1 and f[0].estimated_ns == 10 * 20_000


def test_single_kernel_graph_launches_are_not_counted(tmp_path):
    events = [x("ProfilerStep#1", 0, 1000, cat="user_annotation")]
    for i in range(10):
        events.append(x("cudaGraphLaunch", 10 + 30 * i, 20, cat="cuda_runtime", correlation=i + 1))
        events.append(x("tiny", 31 + 30 * i, 5, cat="kernel", pid=0, tid=7, device=0, stream=7, correlation=i + 1))
    a = advise(open_trace(write_trace(tmp_path / "t.json", events)), only=["launch-bound"])
    assert "graph" in a.not_applicable["launch-bound"]


def test_hand_built_launch_bound_step(tmp_path):
    # one 1000 us step; ten 20 us launch calls every 30 us, each kernel 5 us right after its call
    events = [x("ProfilerStep#1", 0, 1000, cat="user_annotation")]
    for i in range(10):
        events.append(x("cudaLaunchKernel", 10 + 30 * i, 20, cat="cuda_runtime", correlation=i + 1))
        events.append(x("tiny", 31 + 30 * i, 5, cat="kernel", pid=0, tid=7, device=0, stream=7, correlation=i + 1))
    trace = open_trace(write_trace(tmp_path / "t.json", events))
    idle = {r["cause"]: r["idle_ns"] for r in AdviceContext(trace).idle.to_pylist()}
    assert idle["host_wait"] + idle["launch_overhead"] >= 200_000
    f = advise(trace, only=["launch-bound"]).findings
    assert len(f) == 1 and f[0].estimated_ns == 10 * 20_000
    total, row = f[0].evidence[0], f[0].evidence[1]
    assert (total["calls_per_step"], total["shorter_than_launch"], total["short_pct"]) == (10, 10, 100.0)
    assert (row["kernel"], row["calls_per_step"], row["shorter_than_launch"]) == ("tiny", 10, 10)
    assert (row["median_kernel_ns"], row["median_launch_ns"]) == (5_000, 20_000)


def test_long_kernels_are_not_launch_bound(tmp_path):
    events = [x("ProfilerStep#1", 0, 1000, cat="user_annotation")]
    for i in range(4):
        events.append(x("cudaLaunchKernel", 10 + 5 * i, 4, cat="cuda_runtime", correlation=i + 1))
        events.append(x("big", 40 + 200 * i, 190, cat="kernel", pid=0, tid=7, device=0, stream=7,
                        correlation=i + 1))
    assert advise(open_trace(write_trace(tmp_path / "t.json", events)), only=["launch-bound"]).findings == []


def test_not_applicable_on_cpu_traces(tmp_path):
    t = open_trace(write_trace(tmp_path / "t.json", [x("aten::mm", 0, 10)]))
    assert "no GPU" in advise(t, only=["launch-bound"]).not_applicable["launch-bound"]


@pytest.mark.parametrize("native", ["1", "0"])
def test_repeated_ids_are_those_seen_more_than_once(native, monkeypatch):
    monkeypatch.setenv("OPSCOPE_NATIVE", native)  # the bitmaps in C, and the sort
    ids = pa.array([7, 3, 9, 3, None, 7, 7, None, 1], pa.int64())
    assert _repeated(ids).to_pylist() == [3, 7]
    assert _repeated(pa.array([4, 2, 8], pa.int64())).to_pylist() == []
    assert _repeated(pa.array([5], pa.int64())).to_pylist() == []
    assert _repeated(pa.array([None, None], pa.int64())).to_pylist() == []
    far = pa.array([-(2**62), 2**62, 5, -(2**62)], pa.int64())  # a range far over the count: sorted instead
    assert _repeated(far).to_pylist() == [-(2**62)]
    rng = random.Random(3)
    many = [rng.randrange(-500, 500) for _ in range(3000)]
    assert _repeated(pa.array(many, pa.int64())).to_pylist() == sorted({v for v in many if many.count(v) > 1})


def test_kernels_sharing_a_launch_are_left_out_and_a_repeated_call_id_takes_its_longest_call(tmp_path):
    events = [x("ProfilerStep#1", 0, 1000, cat="user_annotation"),
              # one call, two kernels (a library's launch): neither is launched one by one
              x("cudaLaunchKernel", 10, 20, cat="cuda_runtime", correlation=1),
              x("lib_a", 40, 5, cat="kernel", pid=0, tid=7, device=0, stream=7, correlation=1),
              x("lib_b", 50, 5, cat="kernel", pid=0, tid=7, device=0, stream=7, correlation=1),
              # a broken trace: two calls with id 2 (20 and 50 us); the kernel's launch is the longer
              x("cudaLaunchKernel", 100, 20, cat="cuda_runtime", correlation=2),
              x("cudaLaunchKernel", 130, 50, cat="cuda_runtime", correlation=2),
              x("solo", 190, 6, cat="kernel", pid=0, tid=7, device=0, stream=7, correlation=2),
              x("cudaLaunchKernel", 200, 30, cat="cuda_runtime", correlation=3),
              x("next", 240, 7, cat="kernel", pid=0, tid=7, device=0, stream=7, correlation=3)]
    ctx = AdviceContext(open_trace(write_trace(tmp_path / "t.json", events)))
    assert sorted(launched_kernels(ctx).to_pylist(), key=lambda r: r["name"]) == [
        {"name": "next", "dur_ns": 7_000, "launch_ns": 30_000},
        {"name": "solo", "dur_ns": 6_000, "launch_ns": 50_000}]
