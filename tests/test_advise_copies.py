"""memcpy rule: pageable host->device copies (measured against pinned ones of a similar size, or a stated
assumption) and tiny copies issued back to back, on hand-built and real traces."""

from __future__ import annotations

import statistics
from collections import defaultdict

import pytest
from support import tracemutate as tm
from support.shared import shared_trace
from support.tracefiles import write_trace, x
from typer.testing import CliRunner

from opscope.advise import advise
from opscope.advise.rules.copies import ASSUMED_PINNED_SPEEDUP, BANDWIDTH_BYTES, TINY_BYTES
from opscope.cli import app
from opscope.ingest import open_trace

PAGEABLE = "Memcpy HtoD (Pageable -> Device)"
PINNED = "Memcpy HtoD (Pinned -> Device)"


def copy(name, ts, dur, corr, nbytes, stream=7):
    return x(name, ts, dur, cat="gpu_memcpy", pid=0, tid=stream, device=0, stream=stream, correlation=corr,
             bytes=nbytes)


def call(ts, dur, corr, name="cudaMemcpyAsync"):
    return x(name, ts, dur, cat="cuda_runtime", correlation=corr)


def memcpy_findings(tmp_path, events, title_has=""):
    found = advise(open_trace(write_trace(tmp_path / "t.json", events)), only=["memcpy"]).findings
    return [f for f in found if title_has in f.title]


# --- pageable copies, by hand ----------------------------------------------------------------------------------

def test_pageable_copy_measured_against_pinned_copies_of_a_similar_size(tmp_path):
    # pinned 1 MB in 100 us (10 GB/s) measures the 2 MB pageable copy (500 us): 200 us at 10 GB/s, saves 300 us.
    # The 64 MB pinned copy at 32 GB/s is more than 4x larger: not used.
    events = [x("ProfilerStep#1", 0, 1000, cat="user_annotation"),
              call(1, 1, 1), call(2, 1, 2), call(3, 1, 3),
              copy(PINNED, 100, 100, 1, 1_000_000),
              copy(PAGEABLE, 300, 500, 2, 2_000_000),
              copy(PINNED, 10, 2000, 3, 64_000_000, stream=8)]  # 2000 us: runs past the step, on another stream
    f = memcpy_findings(tmp_path, events, "Pageable")
    assert len(f) == 1
    assert f[0].saving_ns == 300_000 and f[0].saving_pct == 30.0
    row = f[0].evidence[0]
    assert (row["bytes"], row["gbps"], row["pinned_gbps"], row["basis"], row["saving_ns"]) == \
        (2_000_000, 4.0, 10.0, "measured", 300_000)
    assert row["step"] == 1 and row["at_ns"] == 300_000
    assert "measured" in f[0].estimate and "ASSUMED" not in f[0].estimate
    assert "pin_memory" in f[0].change and "non_blocking=True" in f[0].change


def test_without_a_similar_pinned_copy_the_stated_assumption_is_used_for_large_copies_only(tmp_path):
    # 2 MB pageable in 500 us: assumed 2x -> saves 250 us; the 4 KB pageable copy (30 us) is latency: no saving
    events = [x("ProfilerStep#1", 0, 1000, cat="user_annotation"), call(1, 1, 1), call(2, 1, 2),
              copy(PAGEABLE, 300, 500, 1, 2_000_000), copy(PAGEABLE, 850, 30, 2, 4096)]
    f = memcpy_findings(tmp_path, events, "Pageable")
    assert f[0].saving_ns == 500_000 - 500_000 / ASSUMED_PINNED_SPEEDUP
    assert "ASSUMED" in f[0].estimate and f"{ASSUMED_PINNED_SPEEDUP:g}x" in f[0].estimate
    assert [(r["bytes"], r["basis"], r["saving_ns"]) for r in f[0].evidence] == \
        [(2_000_000, "assumed", 250_000), (4096, "latency", 0)]
    assert {tuple(sorted(r)) for r in f[0].evidence} == {tuple(sorted(f[0].evidence[0]))}


def test_pinned_copies_and_small_pageable_ones_stay_silent(tmp_path):
    events = [x("ProfilerStep#1", 0, 1000, cat="user_annotation"), call(1, 1, 1), call(2, 1, 2),
              copy(PINNED, 100, 400, 1, 4_000_000), copy(PAGEABLE, 600, 40, 2, BANDWIDTH_BYTES - 1)]
    assert memcpy_findings(tmp_path, events) == []


# --- pageable copies, real traces -----------------------------------------------------------------------------

def pageable_saving_from_json(path) -> tuple[float, int, int]:
    """(saving per step in ns by the rule's arithmetic, number of steps, pageable copies in the steps), from the
    raw JSON: the trace has no pinned host->device copy, so copies >= 256 KB save half their time."""
    doc = tm.load(path)
    owner, spans = tm.launch_steps(doc), tm.steps(doc)
    assert not [e for e in tm.device_work(doc) if "Pinned -> Device" in e["name"]]
    pageable = [e for e in tm.device_work(doc) if e["name"] == PAGEABLE and tm.device_step(e, owner, spans)]
    saving = sum(e["dur"] * 1000 * (1 - 1 / ASSUMED_PINNED_SPEEDUP) for e in pageable
                 if e["args"]["bytes"] >= BANDWIDTH_BYTES)
    return saving / len(spans), len(spans), len(pageable)


def test_real_trace_with_workers_but_pageable_batches():
    # resnet50 with num_workers=4 but pin_memory=False: each step copies its 19 MB batch from pageable memory
    path = shared_trace("kineto/samples/resnet50_num_workers_4/worker0.pt.trace.json.gz")
    expected, steps, n = pageable_saving_from_json(path)
    f = [f for f in advise(open_trace(path), only=["memcpy"]).findings if "Pageable" in f.title]
    assert len(f) == 1
    assert f[0].saving_ns == pytest.approx(expected, abs=1)
    assert f"{n / steps:g} per step" in f[0].title
    assert {r["basis"] for r in f[0].evidence} == {"assumed", "latency"}
    assert "ASSUMED" in f[0].estimate


def test_real_trace_with_a_small_pageable_share_stays_silent():
    # the same model without workers: the copies save 0.5% of its 214 ms steps, under the rule's 1%
    path = shared_trace("kineto/samples/resnet50_num_workers_0/worker0.pt.trace.json.gz")
    expected, steps, _ = pageable_saving_from_json(path)
    doc = tm.load(path)
    window = tm.steps(doc)[-1][2] - tm.steps(doc)[0][1]
    assert 0 < expected < 0.01 * window * 1000 / steps
    assert advise(open_trace(path), only=["memcpy"]).findings == []


# --- tiny copies ----------------------------------------------------------------------------------------------

def test_tiny_copies_in_back_to_back_batches_by_hand(tmp_path):
    # 20 copies of 8 bytes host->device, each call 10 us; a kernel launch after the 12th splits them into two
    # batches: saving = (20 - 2) x 10 us. Two blocking device->host reads: each call runs 100 us, waiting 90 us
    # for earlier work (its copy starts 90 us in, ends before it returns): host time 10 us each, one batch.
    events = [x("ProfilerStep#1", 0, 10_000, cat="user_annotation")]
    corr = 0
    for i in range(20):
        corr += 1
        t = 100 + 20 * i + (100 if i >= 12 else 0)
        events += [call(t, 10, corr), copy(PINNED, t + 15, 2, corr, 8)]
        if i == 11:
            corr += 1
            events += [call(t + 20, 5, corr, "cudaLaunchKernel"),
                       x("k", t + 30, 50, cat="kernel", pid=0, tid=7, device=0, stream=7, correlation=corr)]
    for t in (2_000, 2_200):
        corr += 1
        events += [call(t, 100, corr), copy("Memcpy DtoH (Device -> Pinned)", t + 90, 2, corr, 4)]
    f = memcpy_findings(tmp_path, events, "tiny")
    assert len(f) == 1
    # 20 + 2 copies: more than TINY_PER_STEP; the saving is 18 x 10 us (host->device) + 1 x 10 us (device->host)
    assert f[0].saving_ns == 18 * 10_000 + 10_000 and f[0].saving_pct == pytest.approx(1.9)
    rows = {r["direction"]: r for r in f[0].evidence}
    assert (rows["htod"]["copies_per_step"], rows["htod"]["batches_per_step"], rows["htod"]["median_call_ns"]) == \
        (20, 2, 10_000)
    assert (rows["dtoh"]["copies_per_step"], rows["dtoh"]["batches_per_step"], rows["dtoh"]["median_call_ns"]) == \
        (2, 1, 10_000)
    assert "22 calls become 3" in f[0].estimate


def test_few_tiny_copies_stay_silent(tmp_path):
    events = [x("ProfilerStep#1", 0, 1000, cat="user_annotation")]
    for i in range(10):
        events += [call(10 + 20 * i, 10, i + 1), copy(PINNED, 25 + 20 * i, 2, i + 1, 8)]
    assert memcpy_findings(tmp_path, events) == []


def test_tiny_device_copies_on_a_real_trace_match_the_raw_json():
    # 1,370 device-to-device copies of 1 KB: batches counted from the raw JSON, independently of opscope
    path = shared_trace("hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz")
    doc = tm.load(path)
    owner, spans = tm.launch_steps(doc), tm.steps(doc)
    work = defaultdict(list)
    for e in tm.device_work(doc):
        work[e["args"].get("correlation")].append(e)
    calls = sorted(((e["pid"], e["tid"], e["ts"], e) for e in doc["traceEvents"]
                   if e.get("ph") == "X" and e.get("cat") == "cuda_runtime" and e["args"].get("correlation") in work),
                   key=lambda t: t[:3])
    tiny, batches, previous = [], 0, None
    for pid, tid, _, c in calls:
        devs = work[c["args"]["correlation"]]
        d = devs[0]
        is_tiny = (len(devs) == 1 and d.get("cat") == "gpu_memcpy" and d["args"].get("bytes") is not None
                   and d["args"]["bytes"] <= TINY_BYTES and c["args"]["correlation"] in owner)
        key = (pid, tid, d["name"], owner.get(c["args"]["correlation"])) if is_tiny else None
        if is_tiny:
            blocking = c["ts"] + c["dur"] >= d["ts"] + d["dur"]
            tiny.append(c["dur"] - (max(0, d["ts"] - c["ts"]) if blocking else 0))
            batches += key != previous
        previous = key
    assert {e["name"] for e in tm.device_work(doc) if e.get("cat") == "gpu_memcpy"} == \
        {"Memcpy DtoD (Device -> Device)"}
    expected = statistics.median(tiny) * 1000 * (len(tiny) - batches) / len(spans)
    f = [f for f in advise(open_trace(path), only=["memcpy"]).findings if "tiny" in f.title]
    assert len(f) == 1
    assert f[0].saving_ns == pytest.approx(expected, abs=1)
    row = f[0].evidence[0]
    assert row["copies_per_step"] == pytest.approx(len(tiny) / len(spans), abs=0.01)
    assert row["batches_per_step"] == pytest.approx(batches / len(spans), abs=0.01)
    assert "_foreach_copy_" in f[0].change


# --- inputs missing, explain ----------------------------------------------------------------------------------

def test_not_applicable_without_gpu_or_copies(tmp_path):
    t = open_trace(write_trace(tmp_path / "t.json", [x("aten::mm", 0, 10)]))
    assert "no GPU" in advise(t, only=["memcpy"]).not_applicable["memcpy"]
    events = [x("ProfilerStep#1", 0, 100, cat="user_annotation"),
              x("cudaLaunchKernel", 1, 1, cat="cuda_runtime", correlation=1),
              x("k", 10, 50, cat="kernel", pid=0, tid=7, device=0, stream=7, correlation=1)]
    t = open_trace(write_trace(tmp_path / "k.json", events))
    assert "no copies" in advise(t, only=["memcpy"]).not_applicable["memcpy"]


def test_copies_without_sizes_or_launches_do_not_crash(tmp_path):
    events = [x("ProfilerStep#1", 0, 1000, cat="user_annotation"),
              x(PAGEABLE, 100, 500, cat="gpu_memcpy", pid=0, tid=7, device=0, stream=7)]
    assert memcpy_findings(tmp_path, events) == []  # no size: no saving claimed


def test_explain():
    r = CliRunner().invoke(app, ["advise", "--explain", "memcpy"])
    assert r.exit_code == 0 and "ASSUMPTION" in r.stdout and "(copies - batches)" in r.stdout
