"""communication rule: collectives not hidden by compute, and straggler ranks, on real multi-rank traces and by
hand."""

from __future__ import annotations

import pytest
import tracemutate as tm
from conftest import shared_trace
from tracefiles import write_trace, x

import opscope.advise.rules.communication as comm_rule
from opscope.advise import advise
from opscope.ingest import open_trace


def union(spans):
    out = []
    for s, e in sorted(spans):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return sum(e - s for s, e in out)


def clipped(doc, keep):
    """Kernel spans (µs) inside the step window for which keep(name) holds."""
    steps = tm.steps(doc)
    w0, w1 = steps[0][1], steps[-1][2]
    return [(max(e["ts"], w0), min(e["ts"] + e["dur"], w1)) for e in tm.device_work(doc)
            if e["cat"] == "kernel" and keep(e["name"]) and e["ts"] < w1 and e["ts"] + e["dur"] > w0]


def is_comm(name: str) -> bool:
    return "nccl" in name.lower()


def test_exposed_communication_on_a_real_rank_matches_the_raw_json():
    path = shared_trace("hta/trace_filter/sampled_rank-0.json.gz")
    doc = tm.load(path)
    comm = clipped(doc, is_comm)
    compute = clipped(doc, lambda n: not is_comm(n))
    exposed = union(comm) - (union(comm) + union(compute) - union(comm + compute))  # comm minus its overlap
    f = advise(open_trace(path), only=["communication"]).findings
    assert len(f) == 1
    assert f[0].saving_ns == pytest.approx(exposed * 1000 / len(tm.steps(doc)), rel=0.005)


def step(kernels, rank=None):
    """One 1000 us step, kernels given as (name, start, dur, stream)."""
    events = [x("ProfilerStep#1", 0, 1000, cat="user_annotation")]
    for i, (name, start, dur, stream) in enumerate(kernels):
        events.append(x("cudaLaunchKernel", 1 + i, 1, cat="cuda_runtime", correlation=i + 1))
        events.append(x(name, start, dur, cat="kernel", pid=0, tid=stream, device=0, stream=stream,
                        correlation=i + 1))
    header = {"distributedInfo": {"rank": rank, "world_size": 2, "backend": "nccl"}} if rank is not None else None
    return events, header


def test_hand_built_exposure_and_full_overlap(tmp_path):
    events, _ = step([("gemm", 100, 400, 7), ("ncclKernel_AllReduce", 400, 400, 20)])
    f = advise(open_trace(write_trace(tmp_path / "a.json", events)), only=["communication"]).findings
    assert len(f) == 1 and f[0].saving_ns == 300_000 and f[0].saving_pct == 30.0  # 400 comm, 100 under gemm
    row = f[0].evidence[0]
    assert (row["comm_ns"], row["overlapped_ns"], row["exposed_ns"]) == (400_000, 100_000, 300_000)
    events, _ = step([("gemm", 100, 800, 7), ("ncclKernel_AllReduce", 200, 400, 20)])
    assert advise(open_trace(write_trace(tmp_path / "b.json", events)), only=["communication"]).findings == []


def test_straggler_rank_by_hand(tmp_path):
    fast, h0 = step([("gemm", 100, 300, 7), ("ncclKernel_AllReduce", 400, 50, 7)], rank=0)
    slow, h1 = step([("gemm", 100, 600, 7), ("ncclKernel_AllReduce", 700, 50, 7)], rank=1)
    a = open_trace(write_trace(tmp_path / "r0.json", fast, header=h0))
    b = open_trace(write_trace(tmp_path / "r1.json", slow, header=h1))
    found = [f for f in advise(a, peers=(b,), only=["communication"]).findings if f.title.startswith("Straggler")]
    assert len(found) == 1
    assert found[0].title.startswith("Straggler: rank 1") and found[0].saving_ns == 600_000 - 450_000
    assert [r["rank"] for r in found[0].evidence] == [1, 0]
    assert not [f for f in advise(a, only=["communication"]).findings if f.title.startswith("Straggler")]


def test_real_ranks_straggler_figures(monkeypatch):
    p0 = shared_trace("hta/trace_filter/sampled_rank-0.json.gz")
    p1 = shared_trace("hta/trace_filter/sampled_rank-1.json.gz")
    assert not [f for f in advise(open_trace(p0), peers=(open_trace(p1),), only=["communication"]).findings
                if f.title.startswith("Straggler")]  # 15 ms of a 615 ms step: under the 5% threshold
    monkeypatch.setattr(comm_rule, "STRAGGLER_SHARE", 0.0)
    f = next(f for f in advise(open_trace(p0), peers=(open_trace(p1),), only=["communication"]).findings
             if f.title.startswith("Straggler"))
    per_rank = {}
    for rank, path in ((0, p0), (1, p1)):
        doc = tm.load(path)
        per_rank[rank] = union(clipped(doc, lambda n: not is_comm(n))) * 1000 / len(tm.steps(doc))
    assert f.title.startswith("Straggler: rank 1")
    assert {r["rank"]: r["compute_ns"] for r in f.evidence} == pytest.approx(per_rank, rel=0.005)


def test_no_collectives_is_not_applicable():
    path = shared_trace("kineto/samples/resnet50_num_workers_0/worker0.pt.trace.json.gz")  # one V100, no NCCL
    assert "no collectives" in advise(open_trace(path), only=["communication"]).not_applicable["communication"]
