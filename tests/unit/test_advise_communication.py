"""communication rule on hand-built traces: collectives not hidden by compute, and straggler ranks, with exact
numbers."""

from __future__ import annotations

from support.advise_communication import stragglers
from support.tracefiles import write_trace, x

import opscope.advise.rules.communication as comm_rule
from opscope.advise import advise
from opscope.ingest import open_trace


def step(kernels, rank=None):
    """One 1000 us step, kernels given as (name, start, dur, stream)."""
    events = [x("ProfilerStep#1", 0, 1000, cat="user_annotation")]
    for i, (name, start, dur, stream) in enumerate(kernels):
        events.append(x("cudaLaunchKernel", 1 + i, 1, cat="cuda_runtime", correlation=i + 1))
        events.append(x(name, start, dur, cat="kernel", pid=0, tid=stream, device=0, stream=stream,
                        correlation=i + 1))
    header = {"distributedInfo": {"rank": rank, "world_size": 2, "backend": "nccl"}} if rank is not None else None
    return events, header


def comm_findings(tmp_path, kernels, name="t.json"):
    events, _ = step(kernels)
    return advise(open_trace(write_trace(tmp_path / name, events)), only=["communication"]).findings


def test_hand_built_exposure_and_full_overlap(tmp_path):
    # gemm [100, 500), all-reduce [400, 800) on another stream: comm 400, overlapped 100, exposed 300; compute
    # not under comm 300 -> hideable min(300, 300)
    f = comm_findings(tmp_path, [("gemm", 100, 400, 7), ("ncclKernel_AllReduce", 400, 400, 20)])
    assert len(f) == 1 and f[0].saving_ns == 300_000 and f[0].saving_pct == 30.0
    row = f[0].evidence[0]
    assert (row["comm_ns"], row["compute_ns"], row["overlapped_ns"], row["exposed_ns"]) == \
        (400_000, 400_000, 100_000, 300_000)
    assert row["exposed_pct"] == 75.0
    # the all-reduce entirely under a longer gemm: nothing exposed
    assert comm_findings(tmp_path, [("gemm", 100, 800, 7), ("ncclKernel_AllReduce", 200, 400, 20)], "b.json") == []


def test_saving_is_bounded_by_the_compute_there_is(tmp_path):
    # gemm [100, 200), all-reduce [300, 900): 600 exposed, but only 100 of compute to hide it under
    f = comm_findings(tmp_path, [("gemm", 100, 100, 7), ("ncclKernel_AllReduce", 300, 600, 20)])
    assert len(f) == 1
    assert f[0].evidence[0]["exposed_ns"] == 600_000 and f[0].saving_ns == 100_000 and f[0].saving_pct == 10.0
    assert "600.000 us per step of collectives" in f[0].title


def test_small_exposure_stays_silent(tmp_path, monkeypatch):
    # 40 us of 1000 exposed: under the 5% threshold
    kernels = [("gemm", 100, 500, 7), ("ncclKernel_AllReduce", 560, 80, 20)]
    assert comm_findings(tmp_path, kernels) == []
    monkeypatch.setattr(comm_rule, "EXPOSED_SHARE", 0.0)
    assert comm_findings(tmp_path, kernels, "b.json")[0].saving_ns == 40_000


def ranks(tmp_path, *kernel_sets):
    traces = []
    for rank, kernels in enumerate(kernel_sets):
        events, header = step(kernels, rank=rank)
        traces.append(open_trace(write_trace(tmp_path / f"r{rank}.json", events, header=header)))
    return traces


def test_straggler_rank_by_hand(tmp_path):
    # rank 0 computes 300 us and waits 300 us in the all-reduce; rank 1 computes 600 us and all-reduces 50 us
    a, b = ranks(tmp_path, [("gemm", 100, 300, 7), ("ncclKernel_AllReduce", 400, 350, 7)],
                 [("gemm", 100, 600, 7), ("ncclKernel_AllReduce", 700, 50, 7)])
    found = stragglers(advise(a, peers=(b,), only=["communication"]).findings)
    assert len(found) == 1
    f = found[0]
    assert f.title.startswith("Straggler: rank 1")
    assert f.saving_ns == 600_000 - 450_000 and f.saving_pct == 15.0  # median of 300 and 600 us: 450 us
    assert [(r["rank"], r["compute_ns"], r["comm_ns"], r["compute_vs_median_ns"]) for r in f.evidence] == \
        [(1, 600_000, 50_000, 150_000), (0, 300_000, 350_000, -150_000)]
    assert "also spends the least time in collectives" in f.estimate
    # without the other ranks the straggler part says nothing
    assert not stragglers(advise(a, only=["communication"]).findings)
    # the straggler seen from the slow rank's trace is the same rank
    assert stragglers(advise(b, peers=(a,), only=["communication"]).findings)[0].title.startswith("Straggler: rank 1")


def test_straggler_whose_collectives_are_not_the_shortest_is_flagged_with_a_caveat(tmp_path):
    a, b, c = ranks(tmp_path, [("gemm", 100, 300, 7), ("ncclKernel_AllReduce", 400, 100, 7)],
                    [("gemm", 100, 600, 7), ("ncclKernel_AllReduce", 700, 200, 7)],
                    [("gemm", 100, 300, 7), ("ncclKernel_AllReduce", 400, 150, 7)])
    f = stragglers(advise(a, peers=(b, c), only=["communication"]).findings)[0]
    assert f.title.startswith("Straggler: rank 1") and f.saving_ns == 300_000  # 600 - median(300, 600, 300)
    assert "rank 0, not it, spends the least time in collectives" in f.estimate


def test_balanced_ranks_have_no_straggler(tmp_path):
    a, b = ranks(tmp_path, [("gemm", 100, 500, 7), ("ncclKernel_AllReduce", 600, 100, 7)],
                 [("gemm", 100, 520, 7), ("ncclKernel_AllReduce", 620, 80, 7)])
    assert not stragglers(advise(a, peers=(b,), only=["communication"]).findings)  # 10 us over the median


def test_trace_without_steps_is_one_window(tmp_path):
    # no ProfilerStep: the window is the trace, [100, 900) us; 300 us of the all-reduce exposed
    events = [x("cudaLaunchKernel", 100, 1, cat="cuda_runtime", correlation=1),
              x("cudaLaunchKernel", 101, 1, cat="cuda_runtime", correlation=2),
              x("gemm", 100, 500, cat="kernel", pid=0, tid=7, device=0, stream=7, correlation=1),
              x("ncclKernel_AllGather", 300, 600, cat="kernel", pid=0, tid=20, device=0, stream=20, correlation=2)]
    a = advise(open_trace(write_trace(tmp_path / "t.json", events)), only=["communication"])
    assert a.unit == "trace" and a.findings[0].saving_ns == 200_000  # min(exposed 300, compute not under comm 200)
