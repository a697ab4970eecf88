"""host-sync rule: blocking calls inside steps, their cost, and the op and Python frame that made them."""

from __future__ import annotations

import pytest
import tracemutate as tm
from conftest import shared_trace
from tracefiles import write_trace, x

import opscope.advise.rules.sync as sync_rule
from opscope.advise import advise
from opscope.ingest import open_trace


def all_busy(doc: dict) -> list[tuple[float, float]]:
    spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in tm.device_work(doc))
    out: list[list[float]] = []
    for s, e in spans:
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def test_hand_built_item_sync(tmp_path):
    # step [0, 1000) us; python frame train.py(12) [0, 900) > aten::item [55, 405) > cudaStreamSynchronize
    # [60, 400); kernel A [100, 400) launched at 50; the next kernel B [510, 600) launched at 500.
    events = [
        x("ProfilerStep#1", 0, 1000, cat="user_annotation"),
        x("train.py(12): step", 0, 900, cat="python_function"),
        x("cudaLaunchKernel", 50, 4, cat="cuda_runtime", correlation=1),
        x("aten::item", 55, 350),
        x("cudaStreamSynchronize", 60, 340, cat="cuda_runtime"),
        x("cudaLaunchKernel", 500, 5, cat="cuda_runtime", correlation=2),
        x("A", 100, 300, cat="kernel", pid=0, tid=7, device=0, stream=7, correlation=1),
        x("B", 510, 90, cat="kernel", pid=0, tid=7, device=0, stream=7, correlation=2),
    ]
    f = advise(open_trace(write_trace(tmp_path / "t.json", events)), only=["host-sync"]).findings
    assert len(f) == 1
    row = f[0].evidence[0]
    # busy during the wait: [100, 400) = 300; idle during it 340 - 300 = 40; idle after until B: 110
    assert (row["wait_ns"], row["device_busy_ns"], row["idle_after_ns"]) == (340_000, 300_000, 110_000)
    assert row["cost_ns"] == 40_000 + 110_000 == f[0].saving_ns
    assert (row["op"], row["python"], row["step"], row["at_ns"]) == ("aten::item", "train.py(12): step", 1, 60_000)
    assert f[0].saving_pct == 15.0


def test_blocking_copy_on_a_real_rocm_trace_matches_the_raw_json():
    path = shared_trace("tracelens/traces/inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz")
    doc = tm.load(path)
    call = next(e for e in doc["traceEvents"] if e.get("name") == "hipMemcpyWithStream")
    s, e = call["ts"], call["ts"] + call["dur"]
    busy = all_busy(doc)
    during = sum(max(0, min(b, e) - max(a, s)) for a, b in busy)
    after = next((a - e for a, b in busy if a >= e), 0) if not any(a <= e < b for a, b in busy) else 0
    expected = (call["dur"] - during) + min(after, during)
    f = advise(open_trace(path), only=["host-sync"]).findings
    assert len(f) == 1
    row = f[0].evidence[0]
    assert row["call"] == "hipMemcpyWithStream" and row["op"] == "aten::copy_"
    assert row["cost_ns"] == pytest.approx(expected * 1000, abs=3)
    assert f[0].saving_ns == pytest.approx(expected * 1000, abs=3)


def test_small_syncs_stay_below_the_threshold_but_are_attributed(monkeypatch):
    path = shared_trace("hta/critical_path/cuda_event_sync/event_sync_trace.json.gz")
    assert advise(open_trace(path), only=["host-sync"]).findings == []  # 22 us of a 3.2 ms step: under 1%
    monkeypatch.setattr(sync_rule, "SAVING_SHARE", 0.0)
    f = advise(open_trace(path), only=["host-sync"]).findings[0]
    calls = {r["call"]: r for r in f.evidence}
    assert set(calls) == {"cudaStreamSynchronize", "cudaEventSynchronize", "cudaDeviceSynchronize"}
    # .item() -> aten::_local_scalar_dense -> cudaStreamSynchronize, as nested in the raw JSON
    doc = tm.load(path)
    sync = next(e for e in doc["traceEvents"] if e.get("name") == "cudaStreamSynchronize")
    enclosing = [e for e in doc["traceEvents"] if e.get("cat") == "cpu_op" and e.get("tid") == sync["tid"]
                 and e["ts"] <= sync["ts"] and sync["ts"] + sync["dur"] <= e["ts"] + e["dur"]]
    innermost = min(enclosing, key=lambda e: e["dur"])["name"]
    assert calls["cudaStreamSynchronize"]["op"] == innermost == "aten::_local_scalar_dense"


def test_no_sync_no_finding_and_cpu_traces_not_applicable(tmp_path):
    path = shared_trace("kineto/samples/resnet50_num_workers_4/worker0.pt.trace.json.gz")
    assert advise(open_trace(path), only=["host-sync"]).findings == []
    t = open_trace(write_trace(tmp_path / "t.json", [x("aten::mm", 0, 10)]))
    assert "no GPU" in advise(t, only=["host-sync"]).not_applicable["host-sync"]
