"""memory rule: peak near capacity and fragmentation, checked against the raw [memory] records."""

from __future__ import annotations

import tracemutate as tm
from conftest import shared_trace
from tracefiles import write_trace, x

from opscope.advise import advise
from opscope.ingest import open_trace


def memory_events(doc: dict, device_id: int) -> list[dict]:
    events = [e for e in doc["traceEvents"] if e.get("name") == "[memory]" and
              e["args"].get("Device Type") in (1, 6) and e["args"].get("Device Id") == device_id]
    return sorted(events, key=lambda e: e["ts"])


def test_peak_close_to_capacity_on_a_vllm_trace():
    path = shared_trace("tracelens/traces/inference/vllm_decode_full/capture_traces/"
                        "graph_capture_rank_0.1773709742341309550.pt.trace.json.gz")
    doc = tm.load(path)
    total = next(p["totalGlobalMem"] for p in doc["deviceProperties"] if p["id"] == 0)
    mem = memory_events(doc, 0)
    held = max(max(e["args"]["Total Allocated"], e["args"]["Total Reserved"]) for e in mem)
    assert held >= 0.9 * total
    f = advise(open_trace(path), only=["memory"]).findings
    near = [x for x in f if "peaks at" in x.title]
    assert len(near) == 1 and near[0].saving_ns is None
    assert f"{100 * held / total:.1f}% of its {total / (1 << 30):.2f} GiB" in near[0].title
    assert near[0].evidence[0]["capacity_bytes"] == total


def test_fragmentation_on_a_real_trace():
    path = shared_trace("hta/df_index_resolver/df_index_resolver.json.gz")
    mem = memory_events(tm.load(path), 1)
    peak = max(e["args"]["Total Reserved"] for e in mem)
    first = next(e for e in mem if e["args"]["Total Reserved"] == peak)
    unused = peak - first["args"]["Total Allocated"]
    f = [x for x in advise(open_trace(path), only=["memory"]).findings if "reserved but not allocated" in x.title]
    assert len(f) == 1
    assert f[0].title.startswith(f"cuda:1: {unused / (1 << 30):.2f} GiB reserved but not allocated")
    assert f[0].evidence[0]["allocated_at_reserved_peak_bytes"] == first["args"]["Total Allocated"]
    assert "expandable_segments" in f[0].change


def test_small_use_of_a_big_gpu_stays_silent_and_no_records_is_not_applicable(tmp_path):
    path = shared_trace("tracelens/traces/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz")
    assert advise(open_trace(path), only=["memory"]).findings == []
    t = open_trace(write_trace(tmp_path / "t.json", [x("aten::mm", 0, 10)]))
    assert "no memory records" in advise(t, only=["memory"]).not_applicable["memory"]
