"""memory rule against the raw [memory] records of real traces and on a CPU recording made here, and its
--explain."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from support import tracemutate as tm
from support.advise_memory import fragmented, near
from support.shared import shared_trace
from support.timing import limit
from typer.testing import CliRunner

from opscope.advise import advise
from opscope.cli import app
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
    allocated = max(e["args"]["Total Allocated"] for e in mem)
    reserved = max(e["args"]["Total Reserved"] for e in mem)
    assert max(allocated, reserved) >= 0.9 * total
    (f,) = near(advise(open_trace(path), only=["memory"]).findings)
    assert f.saving_ns is None
    assert f"{100 * max(allocated, reserved) / total:.1f}% of its {total / (1 << 30):.2f} GiB" in f.title
    row = f.evidence[0]
    assert (row["capacity_bytes"], row["peak_allocated_bytes"], row["peak_reserved_bytes"]) == \
        (total, allocated, reserved)


def test_a_reservation_that_never_grows_is_not_called_fragmentation():
    # this trace holds 12 GiB reserved on cuda:1 from its first memory record to its last, with 4-12 GiB allocated:
    # a reservation made before the trace. Nothing in it shows the allocator growing while its cache had room, so
    # the rule claims no fragmentation (it once did, from reserved minus allocated at the peak alone)
    path = shared_trace("hta/df_index_resolver/df_index_resolver.json.gz")
    mem = memory_events(tm.load(path), 1)
    assert len(mem) > 1000 and len({e["args"]["Total Reserved"] for e in mem}) == 1  # the precondition, raw JSON
    assert fragmented(advise(open_trace(path), only=["memory"]).findings) == []


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
    r = subprocess.run([sys.executable, str(script), str(trace)], capture_output=True, text=True, timeout=limit(300))
    assert r.returncode == 0, r.stderr
    assert any(e.get("name") == "[memory]" for e in tm.load(trace)["traceEvents"])
    a = advise(open_trace(trace), only=["memory"])
    assert a.findings == [] and "only host memory" in a.not_applicable["memory"]


def test_explain():
    r = CliRunner().invoke(app, ["advise", "--explain", "memory"])
    assert r.exit_code == 0 and "Fragmentation" in r.stdout and "No time saving is estimated" in r.stdout
