"""memcpy rule: pageable host->device copies (measured against pinned ones, or an assumed ratio) and tiny copies."""

from __future__ import annotations

import statistics

import pytest
import tracemutate as tm
from conftest import shared_trace
from tracefiles import write_trace, x

from opscope.advise import advise
from opscope.advise.rules.copies import ASSUMED_PINNED_SPEEDUP, TINY_BYTES
from opscope.ingest import open_trace


def copy(name, ts, dur, corr, nbytes):
    return x(name, ts, dur, cat="gpu_memcpy", pid=0, tid=7, device=0, stream=7, correlation=corr, bytes=nbytes)


def step_with(*events):
    return [x("ProfilerStep#1", 0, 1000, cat="user_annotation"),
            *[x("cudaMemcpyAsync", 1 + i, 1, cat="cuda_runtime", correlation=i + 1) for i in range(len(events))],
            *events]


def test_pageable_copy_measured_against_the_pinned_rate(tmp_path):
    # pinned: 1 MB in 100 us (10 bytes/ns); pageable: 2 MB in 500 us -> 200 us at the pinned rate
    events = step_with(copy("Memcpy HtoD (Pinned -> Device)", 100, 100, 1, 1_000_000),
                       copy("Memcpy HtoD (Pageable -> Device)", 300, 500, 2, 2_000_000))
    f = advise(open_trace(write_trace(tmp_path / "t.json", events)), only=["memcpy"]).findings
    assert len(f) == 1
    assert f[0].saving_ns == 300_000 and f[0].saving_pct == 30.0
    assert f[0].evidence[0]["bytes"] == 2_000_000 and f[0].evidence[0]["gbps"] == 4.0
    assert "pin_memory" in f[0].change


def test_pageable_copy_without_a_pinned_one_uses_the_stated_assumption(tmp_path):
    events = step_with(copy("Memcpy HtoD (Pageable -> Device)", 300, 500, 1, 2_000_000))
    f = advise(open_trace(write_trace(tmp_path / "t.json", events)), only=["memcpy"]).findings
    assert f[0].saving_ns == 500_000 - 500_000 / ASSUMED_PINNED_SPEEDUP
    assert "assumed" in f[0].estimate


def test_tiny_device_copies_on_a_real_trace_match_the_raw_json():
    path = shared_trace("hta/trace_diff/test/test.json.gz")
    doc = tm.load(path)
    owner, spans = tm.launch_steps(doc), tm.steps(doc)
    tiny = [e for e in tm.device_work(doc) if e.get("cat") == "gpu_memcpy" and e["args"].get("bytes") is not None
            and e["args"]["bytes"] <= TINY_BYTES and tm.device_step(e, owner, spans) is not None]
    names = {e["name"] for e in tiny}
    total = sum(e["dur"] for e in tiny) * 1000
    median = statistics.median(e["dur"] for e in tiny) * 1000
    expected = (total - median * len(spans) * len(names)) / len(spans)
    found = [f for f in advise(open_trace(path), only=["memcpy"]).findings if "tiny" in f.title]
    assert len(found) == 1
    assert found[0].saving_ns == pytest.approx(expected, abs=1)
    assert sum(r["copies_per_step"] for r in found[0].evidence) == pytest.approx(len(tiny) / len(spans), abs=0.01)


def test_small_pageable_share_stays_silent():
    # resnet50 on a V100: 12 pageable copies, 2.3 ms per 214 ms step; halving them saves 0.5% < 1%
    path = shared_trace("kineto/samples/resnet50_num_workers_0/worker0.pt.trace.json.gz")
    assert advise(open_trace(path), only=["memcpy"]).findings == []


def test_not_applicable_without_gpu_or_copies(tmp_path):
    t = open_trace(write_trace(tmp_path / "t.json", [x("aten::mm", 0, 10)]))
    assert "no GPU" in advise(t, only=["memcpy"]).not_applicable["memcpy"]
    events = [x("ProfilerStep#1", 0, 100, cat="user_annotation"),
              x("cudaLaunchKernel", 1, 1, cat="cuda_runtime", correlation=1),
              x("k", 10, 50, cat="kernel", pid=0, tid=7, device=0, stream=7, correlation=1)]
    t = open_trace(write_trace(tmp_path / "k.json", events))
    assert "no host<->device copies" in advise(t, only=["memcpy"]).not_applicable["memcpy"]
