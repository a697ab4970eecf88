"""communication rule on real multi-rank traces (expected values computed from the raw JSON), and its --explain."""

from __future__ import annotations

import pytest
from support import tracemutate as tm
from support.advise_communication import stragglers
from support.shared import shared_trace
from support.tracefiles import write_trace, x
from typer.testing import CliRunner

import opscope.advise.rules.communication as comm_rule
from opscope.advise import advise
from opscope.cli import app
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


def expected_from_json(path):
    """(exposed, hideable) µs per step of a one-GPU trace, from the raw JSON: comm minus its overlap with compute,
    and min(exposed, compute not under comm)."""
    doc = tm.load(path)
    comm = clipped(doc, is_comm)
    compute = clipped(doc, lambda n: not is_comm(n))
    overlapped = union(comm) + union(compute) - union(comm + compute)
    exposed = union(comm) - overlapped
    n = len(tm.steps(doc))
    return exposed / n, min(exposed, union(compute) - overlapped) / n


@pytest.mark.parametrize("name", ["hta/trace_filter/sampled_rank-0.json.gz", "hta/trace_filter/sampled_rank-1.json.gz",
                                  "hta/nccl_parser_config/nccl_data.json.gz"])
def test_exposed_communication_on_real_ranks_matches_the_raw_json(name):
    path = shared_trace(name)
    exposed, hideable = expected_from_json(path)
    f = advise(open_trace(path), only=["communication"]).findings
    assert len(f) == 1
    assert f[0].saving_ns == pytest.approx(hideable * 1000, rel=0.005)
    assert f[0].evidence[0]["exposed_ns"] == pytest.approx(exposed * 1000, rel=0.005)
    assert "straggler check did not run" in f[0].estimate  # no other ranks given


def test_real_rank_where_compute_bounds_the_saving():
    # rank 0 spends more time in collectives than computing: overlap can hide only as much as there is compute
    path = shared_trace("hta/trace_filter/sampled_rank-0.json.gz")
    exposed, hideable = expected_from_json(path)
    assert hideable < 0.6 * exposed  # the precondition, from the raw JSON
    f = advise(open_trace(path), only=["communication"]).findings[0]
    assert f.evidence[0]["hideable_ns"] == f.saving_ns < f.evidence[0]["exposed_ns"]


def test_real_ranks_straggler_figures(monkeypatch):
    p0 = shared_trace("hta/trace_filter/sampled_rank-0.json.gz")
    p1 = shared_trace("hta/trace_filter/sampled_rank-1.json.gz")
    assert not stragglers(advise(open_trace(p0), peers=(open_trace(p1),), only=["communication"]).findings)
    monkeypatch.setattr(comm_rule, "STRAGGLER_SHARE", 0.0)  # 15 ms of a 615 ms step: under the 5% threshold
    f = stragglers(advise(open_trace(p0), peers=(open_trace(p1),), only=["communication"]).findings)[0]
    per_rank = {}
    for rank, path in ((0, p0), (1, p1)):
        doc = tm.load(path)
        n = len(tm.steps(doc))
        per_rank[rank] = (union(clipped(doc, lambda n: not is_comm(n))) * 1000 / n,
                          union(clipped(doc, is_comm)) * 1000 / n)
    assert f.title.startswith("Straggler: rank 1")
    assert {r["rank"]: (r["compute_ns"], r["comm_ns"]) for r in f.evidence} == {
        k: pytest.approx(v, rel=0.005) for k, v in per_rank.items()}
    assert f.saving_ns == pytest.approx((per_rank[1][0] - per_rank[0][0]) / 2, rel=0.01)
    assert "also spends the least time in collectives" in f.estimate  # rank 1: more compute, less comm


def test_no_collectives_or_no_gpu_is_not_applicable(tmp_path):
    path = shared_trace("kineto/samples/resnet50_num_workers_0/worker0.pt.trace.json.gz")  # one V100, no NCCL
    assert "no collectives" in advise(open_trace(path), only=["communication"]).not_applicable["communication"]
    cpu = open_trace(write_trace(tmp_path / "cpu.json", [x("ProfilerStep#1", 0, 100, cat="user_annotation"),
                                                         x("aten::mm", 10, 50)]))
    assert "no GPU" in advise(cpu, only=["communication"]).not_applicable["communication"]


def test_explain():
    r = CliRunner().invoke(app, ["advise", "--explain", "communication"])
    assert r.exit_code == 0 and "min(exposed, compute not yet" in r.stdout and "Stragglers" in r.stdout
