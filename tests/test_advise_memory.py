"""memory rule: peak near capacity and fragmentation, checked by hand and against the raw [memory] records of
real traces."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from support import tracemutate as tm
from support.shared import shared_trace
from support.tracefiles import write_trace, x
from typer.testing import CliRunner

from opscope.advise import advise
from opscope.cli import app
from opscope.ingest import open_trace

GiB = 1 << 30
MiB = 1 << 20


def m(ts: float, addr: int, nbytes: int, allocated: int, reserved: int, device: int = 0, device_type: int = 1):
    """A Kineto ``[memory]`` instant event as torch writes it."""
    return {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": ts,
            "args": {"Total Reserved": reserved, "Total Allocated": allocated, "Bytes": nbytes,
                     "Device Id": device, "Device Type": device_type, "Addr": addr}}


def props(*totals: int) -> dict:
    return {"deviceProperties": [{"id": i, "name": "GPU", "totalGlobalMem": t, "computeMajor": 8, "computeMinor": 0}
                                 for i, t in enumerate(totals)]}


def memory_events(doc: dict, device_id: int) -> list[dict]:
    events = [e for e in doc["traceEvents"] if e.get("name") == "[memory]" and
              e["args"].get("Device Type") in (1, 6) and e["args"].get("Device Id") == device_id]
    return sorted(events, key=lambda e: e["ts"])


def near(findings):
    return [f for f in findings if "memory peaks at" in f.title]


def fragmented(findings):
    return [f for f in findings if "reserved but not allocated" in f.title]


def hand_trace(tmp_path, header=None):
    """Two 10 GiB GPUs over two 1000 us steps.

    cuda:0 climbs to 9.5 GiB allocated, 9.6 GiB reserved (96% of 10 GiB) at 1200 us, in step 2.
    cuda:1 grows its reserve to 4 GiB at 300 us while 1 GiB is allocated (3 GiB unused, 75% of reserved), then
    allocates up to 2.5 GiB at 600 us (step 1).
    """
    events = [
        x("ProfilerStep#1", 0, 1000, cat="user_annotation"), x("ProfilerStep#2", 1000, 1000, cat="user_annotation"),
        x("aten::empty", 100, 10), x("aten::empty", 1100, 10),
        m(100, 0xA, 5 * GiB, 5 * GiB, 5 * GiB),
        m(1200, 0xB, GiB * 9 // 2, GiB * 19 // 2, GiB * 96 // 10),
        m(1500, 0xB, -(GiB * 9 // 2), 5 * GiB, GiB * 96 // 10),
        m(200, 0xC, GiB, GiB, 2 * GiB, device=1),
        m(300, 0xD, 100 * MiB, GiB + 100 * MiB, 4 * GiB, device=1),
        m(400, 0xD, -100 * MiB, GiB, 4 * GiB, device=1),
        m(600, 0xE, GiB * 3 // 2, GiB * 5 // 2, 4 * GiB, device=1),
    ]
    return open_trace(write_trace(tmp_path / "mem.json", events, header=header))


def test_hand_built_capacity_and_fragmentation(tmp_path):
    found = advise(hand_trace(tmp_path, props(10 * GiB, 10 * GiB)), only=["memory"]).findings
    (f,) = near(found)
    assert f.title == "cuda:0: reserved memory peaks at 96.0% of its 10.00 GiB" and f.saving_ns is None
    assert f.evidence == [{"device": "cuda:0", "capacity_bytes": 10 * GiB, "peak_allocated_bytes": GiB * 19 // 2,
                           "peak_reserved_bytes": GiB * 96 // 10, "allocated_pct": 95.0, "reserved_pct": 96.0,
                           "step": 2, "at_ns": 1_200_000}]  # 1200 us after the trace start (0)
    assert "0.40 GiB are left" in f.estimate and "expandable_segments" in f.change
    (g,) = fragmented(found)
    unused = 4 * GiB - (GiB + 100 * MiB)  # at 300 us, when the reserve grew to 4 GiB
    assert g.title.startswith(f"cuda:1: {unused / GiB:.2f} GiB reserved but not allocated")
    row = g.evidence[0]
    assert (row["reserved_bytes"], row["allocated_bytes"], row["unused_bytes"]) == (4 * GiB, GiB + 100 * MiB, unused)
    assert row["unused_pct"] == round(100 * unused / (4 * GiB), 2) and row["peak_allocated_bytes"] == GiB * 5 // 2
    assert (row["step"], row["at_ns"]) == (1, 300_000)
    assert "1.50 GiB stay unused" in g.estimate  # even at the allocated peak: 4 - 2.5 GiB
    assert g.saving_ns is None and "expandable_segments:True" in g.change


def test_capacity_from_run_json_and_a_bigger_gpu(tmp_path):
    run = {"gpus": [{"index": 0, "name": "GPU", "total_memory": 10 * GiB}]}
    trace = hand_trace(tmp_path)  # no deviceProperties: the capacity comes from run.json
    assert len(near(advise(trace, run=run, only=["memory"]).findings)) == 1
    # unknown capacity: no capacity finding; fragmentation still judged (3 GiB >= 256 MiB)
    found = advise(trace, only=["memory"]).findings
    assert not near(found) and len(fragmented(found)) == 1
    # 80 GiB GPUs: 9.6 GiB is 12%; 3 GiB unused is under 10% of the capacity
    (tmp_path / "mem.json").unlink()
    assert advise(hand_trace(tmp_path, props(80 * GiB, 80 * GiB)), only=["memory"]).findings == []


def test_peak_close_to_capacity_on_a_vllm_trace():
    path = shared_trace("tracelens/traces/inference/vllm_decode_full/capture_traces/"
                        "graph_capture_rank_0.1773709742341309550.pt.trace.json.gz")
    doc = tm.load(path)
    total = next(p["totalGlobalMem"] for p in doc["deviceProperties"] if p["id"] == 0)
    mem = memory_events(doc, 0)
    allocated = max(e["args"]["Total Allocated"] for e in mem)
    reserved = max(e["args"]["Total Reserved"] for e in mem)
    assert max(allocated, reserved) >= 0.9 * total
    (f,) = near(advise(open_trace(path), only=["memory"]).findings)
    assert f.saving_ns is None
    assert f"{100 * max(allocated, reserved) / total:.1f}% of its {total / (1 << 30):.2f} GiB" in f.title
    row = f.evidence[0]
    assert (row["capacity_bytes"], row["peak_allocated_bytes"], row["peak_reserved_bytes"]) == \
        (total, allocated, reserved)


def test_fragmentation_on_a_real_trace():
    path = shared_trace("hta/df_index_resolver/df_index_resolver.json.gz")
    mem = memory_events(tm.load(path), 1)
    peak = max(e["args"]["Total Reserved"] for e in mem)
    first = next(e for e in mem if e["args"]["Total Reserved"] == peak)
    unused = peak - first["args"]["Total Allocated"]
    (f,) = fragmented(advise(open_trace(path), only=["memory"]).findings)
    assert f.title.startswith(f"cuda:1: {unused / (1 << 30):.2f} GiB reserved but not allocated")
    row = f.evidence[0]
    assert (row["reserved_bytes"], row["allocated_bytes"], row["unused_bytes"]) == \
        (peak, first["args"]["Total Allocated"], unused)
    assert row["peak_allocated_bytes"] == max(e["args"]["Total Allocated"] for e in mem)
    assert "expandable_segments" in f.change


@pytest.mark.parametrize("name", ["tracelens/traces/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
                                  "tracelens/traces/mi300/google_owlv2-large-patch14-ensemble__1016001.json.gz"])
def test_small_use_of_a_big_gpu_stays_silent(name):
    path = shared_trace(name)
    doc = tm.load(path)
    total = doc["deviceProperties"][0]["totalGlobalMem"]
    mem = memory_events(doc, 0)
    assert max(e["args"]["Total Reserved"] for e in mem) < 0.1 * total  # the precondition, from the raw JSON
    assert advise(open_trace(path), only=["memory"]).findings == []


def test_cpu_recording_has_only_host_memory(tmp_path):
    pytest.importorskip("torch", reason="recording needs the torch extra")
    script, trace = tmp_path / "rec.py", tmp_path / "cpu.json"
    script.write_text(textwrap.dedent("""
        import sys, torch
        from torch.profiler import ProfilerActivity, profile
        model = torch.nn.Linear(64, 64)
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            for _ in range(3):
                model(torch.randn(32, 64)).sum().backward()
        prof.export_chrome_trace(sys.argv[1])
    """))
    r = subprocess.run([sys.executable, str(script), str(trace)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert any(e.get("name") == "[memory]" for e in tm.load(trace)["traceEvents"])
    a = advise(open_trace(trace), only=["memory"])
    assert a.findings == [] and "only host memory" in a.not_applicable["memory"]


def test_no_records_is_not_applicable(tmp_path):
    t = open_trace(write_trace(tmp_path / "t.json", [x("aten::mm", 0, 10)]))
    assert "no memory records" in advise(t, only=["memory"]).not_applicable["memory"]


def test_explain():
    r = CliRunner().invoke(app, ["advise", "--explain", "memory"])
    assert r.exit_code == 0 and "Fragmentation" in r.stdout and "No time saving is estimated" in r.stdout
