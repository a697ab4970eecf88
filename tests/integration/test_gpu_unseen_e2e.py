"""Fidelity on a real graph-replay trace without steps (vLLM decode on MI300, from TraceLens): every device op
started long after its launch because the queue held work launched before the profiler started. The stretch
before the first recorded work is unseen busy time, not idle: checked against the raw JSON with exact decimals."""

from __future__ import annotations

from decimal import Decimal

from support.shared import DEVICE_CATEGORIES, raw_events, shared_trace

from opscope.advise import advise
from opscope.analyses.gpu import QUEUED_WAIT_NS, GpuAnalysis
from opscope.ingest import open_trace

VLLM = "tracelens/traces/inference/vllm_decode_full/graph_execution.json.gz"


def ns(value) -> int:
    return int(Decimal(value) * 1000)


def test_graph_replay_backlog_is_unseen_busy_and_idle_is_small():
    path = shared_trace(VLLM)
    raw = [e for e in raw_events(path) if e.get("ph") == "X"]
    w0, w1 = min(ns(e["ts"]) for e in raw), max(ns(e["ts"] + e["dur"]) for e in raw)
    device = sorted((ns(e["ts"]), ns(e["ts"] + e["dur"]), e["args"].get("correlation"))
                    for e in raw if str(e.get("cat", "")).lower() in DEVICE_CATEGORIES)
    calls = {e["args"]["correlation"]: (ns(e["ts"]), ns(e["ts"] + e["dur"]))
             for e in raw if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    # the premise: every device op waited in the queue far beyond a launch's latency
    assert all(start - calls[corr][1] > QUEUED_WAIT_NS for start, _, corr in device)
    first_start, _, first_corr = device[0]
    launch, returned = calls[first_corr]
    wait = first_start - returned
    unseen_from = w0 if wait >= launch - w0 else launch
    busy, reach = 0, w0
    for s, e, _ in device:  # a running union (the stream is one, so no event is cut)
        s = max(s, reach)
        if e > s:
            busy, reach = busy + e - s, e
    window = (w1 - w0) - (first_start - unseen_from)

    analysis = GpuAnalysis(open_trace(path, use_cache=False))
    [(dev, unseen)] = analysis.work.unseen.items()
    assert (unseen.start, unseen.end, unseen.launch, unseen.wait_ns) == (unseen_from, first_start, launch, wait)
    row = next(r for r in analysis.breakdown().to_pylist() if r["device"] == dev and r["stream"] is None)
    assert (row["busy_ns"], row["unseen_busy_ns"], row["window_ns"], row["idle_ns"]) == (
        busy, first_start - unseen_from, window, window - busy)
    assert row["idle_ns"] < 0.05 * row["window_ns"]  # was 8.4 ms of 19.1 ms (44%) before unseen busy time
    idle = sum(r["idle_ns"] for r in analysis.idle().to_pylist() if r["device"] == dev)
    assert idle == row["idle_ns"]


def test_advise_does_not_rank_a_backlog_as_idle_time():
    findings = advise(open_trace(shared_trace(VLLM), use_cache=False)).findings
    assert findings and all(f.rule != "gpu-idle" for f in findings)
