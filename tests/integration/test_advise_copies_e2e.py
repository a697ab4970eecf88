"""memcpy rule on real traces (expected values computed from the raw JSON), and its --explain."""

from __future__ import annotations

import statistics
from collections import defaultdict

import pytest
from support import tracemutate as tm
from support.advise_copies import PAGEABLE
from support.shared import shared_trace
from typer.testing import CliRunner

from opscope.advise import advise
from opscope.advise.rules.copies import ASSUMED_PINNED_SPEEDUP, BANDWIDTH_BYTES, TINY_BYTES
from opscope.cli import app
from opscope.ingest import open_trace

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
    assert "_foreach_copy_" in f[0].remedy


# --- inputs missing, explain ----------------------------------------------------------------------------------

def test_explain():
    r = CliRunner().invoke(app, ["advise", "--explain", "memcpy"])
    assert r.exit_code == 0 and "ASSUMPTION" in r.stdout and "(copies - batches)" in r.stdout
