"""host-sync rule: blocking calls inside steps, what they cost, and the op and Python frame that made them; on
hand-built traces with exact numbers and on real traces (expected values computed from the raw JSON)."""

from __future__ import annotations

import re

import pytest
from support import tracemutate as tm
from support.shared import shared_trace
from support.tracefiles import write_trace, x
from typer.testing import CliRunner

import opscope.advise.rules.sync as sync_rule
from opscope.advise import advise
from opscope.cli import app
from opscope.ingest import open_trace


def findings(path):
    return advise(open_trace(path), only=["host-sync"]).findings


# --- hand-built, exact ------------------------------------------------------------------------------------------

def item_step() -> list[dict]:
    """Step [0, 1000) µs. Kernel A [20, 300) (launched at 10), kernel B [510, 600) (launched at 500).
    `if t:` at train.py(12) -> aten::is_nonzero > aten::item > aten::_local_scalar_dense > cudaStreamSynchronize
    [60, 340) (its Stream Sync record names device 0); torch.cuda.synchronize() at train.py(20) ->
    cudaDeviceSynchronize [450, 460). Not counted: a cudaEventQuery with its Event Sync record (a query does not
    block), a Stream Wait Event record (the device waits, not the host), a sync after the step."""
    return [
        x("ProfilerStep#1", 0, 1000, cat="user_annotation"),
        x("train.py(12): step", 0, 900, cat="python_function"),
        x("torch/_tensor.py(1087): __bool__", 50, 300, cat="python_function"),
        x("<built-in method item of Tensor object at 0x7f>", 53, 295, cat="python_function"),
        x("cudaLaunchKernel", 10, 2, cat="cuda_runtime", correlation=1),
        x("aten::is_nonzero", 54, 292),
        x("aten::item", 55, 290),
        x("aten::_local_scalar_dense", 56, 288),
        x("cudaStreamSynchronize", 60, 280, cat="cuda_runtime", correlation=10),
        x("Stream Sync", 61, 278, cat="cuda_sync", pid=0, tid=7, device=0, stream=7, correlation=10),
        x("train.py(20): log", 440, 40, cat="python_function"),
        x("cudaDeviceSynchronize", 450, 10, cat="cuda_runtime", correlation=11),
        x("cudaEventQuery", 470, 2, cat="cuda_runtime", correlation=12),
        x("Event Sync", 470, 2, cat="cuda_sync", pid=0, tid=7, device=0, stream=-1, correlation=12),
        x("Stream Wait Event", 480, 1, cat="cuda_sync", pid=0, tid=7, device=0, stream=7, correlation=13),
        x("cudaLaunchKernel", 500, 5, cat="cuda_runtime", correlation=2),
        x("A", 20, 280, cat="kernel", pid=0, tid=7, device=0, stream=7, correlation=1),
        x("B", 510, 90, cat="kernel", pid=0, tid=7, device=0, stream=7, correlation=2),
        x("cudaDeviceSynchronize", 1100, 10, cat="cuda_runtime", correlation=14),
    ]


def test_hand_built_syncs_exact(tmp_path):
    f = findings(write_trace(tmp_path / "t.json", item_step()))
    assert len(f) == 1
    first, second = f[0].evidence
    # cudaStreamSynchronize [60, 340): the device ran A until 300 (drained 240), then idled to 340 with nothing
    # queued (40); idle after it from 340 until B at 510, cut at the next sync (450): 110, at most 240 -> 150
    assert first == {"step": 1, "at_ns": 60_000, "device": 0, "call": "cudaStreamSynchronize",
                     "op": "aten::is_nonzero > aten::item > aten::_local_scalar_dense",
                     "python": "train.py(12): step",  # not the built-in method nor torch/_tensor.py
                     "wait_ns": 280_000, "drained_ns": 240_000, "idle_during_ns": 40_000, "idle_after_ns": 110_000,
                     "cost_ns": 150_000}
    # cudaDeviceSynchronize [450, 460): nothing running or queued (B is launched at 500): 10 idle; it drained
    # nothing, so none of the 50 idle after it counts
    assert (second["call"], second["op"], second["python"]) == ("cudaDeviceSynchronize", None, "train.py(20): log")
    assert (second["drained_ns"], second["idle_during_ns"], second["idle_after_ns"], second["cost_ns"]) == \
        (0, 10_000, 50_000, 10_000)
    # [300, 340) + [340, 450) + [450, 460): 160 µs of the 1000 µs step
    assert f[0].saving_ns == 160_000 and f[0].saving_pct == 16.0
    assert "1 blocking call" not in f[0].title and "2 blocking call(s) per step" in f[0].title
    assert f[0].change.index(".item()") < f[0].change.index("torch.cuda.synchronize()")


def test_queued_work_waiting_on_something_else_is_not_blamed_on_the_sync(tmp_path):
    # kernel A is launched at 10 but starts only at 400 (waiting on another stream, say): the host's
    # cudaStreamSynchronize [60, 500) waits for it, yet a sync-free host could not have fed the device sooner
    events = [x("ProfilerStep#1", 0, 1000, cat="user_annotation"),
              x("cudaLaunchKernel", 10, 2, cat="cuda_runtime", correlation=1),
              x("cudaStreamSynchronize", 60, 440, cat="cuda_runtime", correlation=10),
              x("cudaLaunchKernel", 600, 5, cat="cuda_runtime", correlation=2),
              x("A", 400, 100, cat="kernel", pid=0, tid=7, device=0, stream=7, correlation=1),
              x("B", 620, 100, cat="kernel", pid=0, tid=7, device=0, stream=7, correlation=2)]
    f = findings(write_trace(tmp_path / "t.json", events))
    row = f[0].evidence[0]
    assert (row["drained_ns"], row["idle_during_ns"], row["idle_after_ns"]) == (100_000, 0, 120_000)
    assert row["cost_ns"] == f[0].saving_ns == 100_000  # min(120, 100): the drained queue only


def test_the_record_names_the_device_waited_for(tmp_path):
    # device 0 idles through the sync, device 1 is busy; the Stream Sync record says the host waited for device 1
    events = [x("ProfilerStep#1", 0, 1000, cat="user_annotation"),
              x("cudaLaunchKernel", 10, 2, cat="cuda_runtime", correlation=1),
              x("cudaLaunchKernel", 15, 2, cat="cuda_runtime", correlation=2),
              x("cudaStreamSynchronize", 100, 300, cat="cuda_runtime", correlation=10),
              x("Stream Sync", 101, 298, cat="cuda_sync", pid=1, tid=9, device=1, stream=9, correlation=10),
              x("a0", 20, 30, cat="kernel", pid=0, tid=7, device=0, stream=7, correlation=1),
              x("a1", 20, 350, cat="kernel", pid=1, tid=9, device=1, stream=9, correlation=2),
              x("cudaLaunchKernel", 500, 5, cat="cuda_runtime", correlation=3),
              x("b1", 520, 100, cat="kernel", pid=1, tid=9, device=1, stream=9, correlation=3)]
    f = findings(write_trace(tmp_path / "t.json", events))
    row = f[0].evidence[0]
    # device 1: busy [100, 370) of the wait, idle [370, 400); idle after until b1 at 520: 120, at most 270
    assert (row["device"], row["drained_ns"], row["idle_during_ns"], row["idle_after_ns"], row["cost_ns"]) == \
        (1, 270_000, 30_000, 120_000, 150_000)
    assert f[0].saving_ns == 150_000 and "on GPU 1" in f[0].title


def test_no_sync_inside_the_steps_no_finding_and_cpu_traces_not_applicable(tmp_path):
    events = [e for e in item_step() if not re.search(r"Synchronize|Sync$", e["name"])]
    events.append(x("cudaDeviceSynchronize", 1100, 10, cat="cuda_runtime", correlation=14))  # after the step
    assert findings(write_trace(tmp_path / "t.json", events)) == []
    t = open_trace(write_trace(tmp_path / "c.json", [x("ProfilerStep#1", 0, 100, cat="user_annotation"),
                                                     x("aten::item", 10, 5)]))
    assert "no GPU" in advise(t, only=["host-sync"]).not_applicable["host-sync"]


# --- real traces -------------------------------------------------------------------------------------------

SYNC = re.compile(r"^(cuda|hip|cu)(Stream|Device|Event|Ctx|Thread)Synchronize|^(cuda|hip|cu)Memcpy(?!\w*Async)")


def merged(spans):
    out = []
    for s, e in sorted(spans):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        elif e > s:
            out.append([s, e])
    return out


def overlap(spans, a, b):
    return sum(max(0, min(e, b) - max(s, a)) for s, e in spans)


def raw_costs(doc: dict, device: int) -> tuple[list[dict], float]:
    """The rule's arithmetic done on the raw JSON (µs): per call (drained, idle_during, idle_after, cost) and the
    union total, for the blocking calls inside the steps on one device."""
    spans = tm.steps(doc)
    w0, w1 = min(s for _, s, _ in spans), max(e for _, _, e in spans)
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    runtime = [e for e in events if e.get("cat") == "cuda_runtime"]
    launch = {e["args"]["correlation"]: e["ts"] for e in runtime if "correlation" in e["args"]}
    work = [e for e in tm.device_work(doc) if e["args"].get("device") == device]
    busy = merged((max(e["ts"], w0), min(e["ts"] + e["dur"], w1)) for e in work)
    queued = [(launch[e["args"]["correlation"]], e["ts"]) for e in work
              if e["args"].get("correlation") in launch and launch[e["args"]["correlation"]] < e["ts"]]
    blocked = merged([tuple(b) for b in busy] + queued)
    pageable = {e["args"]["correlation"] for e in work if "Device -> Pageable" in e["name"]}
    calls = sorted((e for e in runtime if any(s <= e["ts"] < end for _, s, end in spans)
                    and (SYNC.search(e["name"]) or (e["name"] == "cudaMemcpyAsync"
                                                    and e["args"].get("correlation") in pageable))),
                   key=lambda e: e["ts"])
    rows, free = [], []
    for c in calls:
        a, b = c["ts"], c["ts"] + c["dur"]
        drained = overlap(busy, a, b)
        during = (b - a) - overlap(blocked, a, b)
        nxt = next((s for s, e in busy if s >= b), None)
        after = 0 if nxt is None or any(s <= b < e for s, e in busy) else nxt - b
        later = [d["ts"] for d in calls if d["ts"] >= b]
        if later:
            after = min(after, max(0, later[0] - b))
        counted = min(after, drained)
        free += [(a, b)] + ([(b, b + counted)] if counted else [])
        rows.append({"call": c, "drained": drained, "during": during, "after": after, "cost": during + counted})
    # the union of the calls' spans, less the blocked time inside them (the after parts are idle throughout)
    total = sum((e - s) - overlap(blocked, s, e) for s, e in merged(free))
    return rows, total


def enclosing_ops(doc: dict, call: dict) -> list[str]:
    ops = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "cpu_op"
           and e["tid"] == call["tid"] and e["ts"] <= call["ts"] and call["ts"] + call["dur"] <= e["ts"] + e["dur"]]
    return [e["name"] for e in sorted(ops, key=lambda e: (e["ts"], -e["dur"]))]


def test_hta_event_sync_trace_matches_the_raw_json():
    path = shared_trace("hta/critical_path/cuda_event_sync/event_sync_trace.json.gz")
    doc = tm.load(path)
    rows, total = raw_costs(doc, device=0)
    assert {r["call"]["name"] for r in rows} == {"cudaMemcpyAsync", "cudaStreamSynchronize", "cudaEventSynchronize",
                                                 "cudaDeviceSynchronize"}
    step_us = tm.steps(doc)[0][2] - tm.steps(doc)[0][1]
    assert total >= 0.01 * step_us  # over the rule's 1% threshold
    f = findings(path)
    assert len(f) == 1
    assert f[0].saving_ns == pytest.approx(total * 1000, abs=3)
    got = {r["call"]: r for r in f[0].evidence}
    for r in rows:
        e = got[r["call"]["name"]]
        assert (e["wait_ns"], e["drained_ns"], e["idle_during_ns"], e["idle_after_ns"], e["cost_ns"]) == \
            pytest.approx((r["call"]["dur"] * 1000, r["drained"] * 1000, r["during"] * 1000, r["after"] * 1000,
                           r["cost"] * 1000), abs=3)
    # .item() -> aten::_local_scalar_dense -> the pageable copy and cudaStreamSynchronize, as nested in the JSON
    sync = next(r["call"] for r in rows if r["call"]["name"] == "cudaStreamSynchronize")
    assert got["cudaStreamSynchronize"]["op"] == " > ".join(enclosing_ops(doc, sync)) == \
        "aten::is_nonzero > aten::item > aten::_local_scalar_dense"
    assert got["cudaStreamSynchronize"]["step"] == 100 and got["cudaDeviceSynchronize"]["op"] is None


def test_kineto_sync_records_without_their_runtime_call():
    # Kineto's test traces before and after its fix of cuda_sync links hold one Event Sync record and no runtime
    # call for it; the op with its External id made it
    rows = []
    for name in ("before_fix_trace.json", "after_fix_trace.json"):
        path = shared_trace(f"kineto/traces/{name}")
        doc = tm.load(path)
        record = next(e for e in doc["traceEvents"] if e.get("name") == "Event Sync")
        op = next(e for e in doc["traceEvents"] if e.get("cat") == "cpu_op"
                  and e["args"].get("External id") == record["args"]["External id"])
        kernels_end = max(e["ts"] + e["dur"] for e in tm.device_work(doc))
        assert kernels_end <= record["ts"]  # the device is idle all through the wait, and never busy again
        f = findings(path)
        assert len(f) == 1
        row = f[0].evidence[0]
        assert row["op"] == op["name"] == "op_evt_sync" and row["call"].startswith("Event Sync (record")
        assert row["wait_ns"] == row["cost_ns"] == f[0].saving_ns == round(record["dur"] * 1000)
        rows.append({k: v for k, v in row.items()})
    assert rows[0] == rows[1]  # the fix changed what the record links to, not what it costs


def test_python_frame_of_a_real_sync_is_the_users_code():
    path = shared_trace("tracelens/traces/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz")
    doc = tm.load(path)
    call = next(e for e in doc["traceEvents"] if e.get("name") == "cudaStreamSynchronize")
    frames = [e for e in doc["traceEvents"] if e.get("cat") == "python_function" and e["tid"] == call["tid"]
              and e["ts"] <= call["ts"] < e["ts"] + e["dur"]
              and not re.search(r"^<built-in|(^|/)torch/", e["name"])]
    innermost = max(frames, key=lambda e: (e["ts"], -e["dur"]))["name"]
    f = findings(path)
    row = next(r for r in f[0].evidence if r["call"] == "cudaStreamSynchronize")
    assert row["python"] == innermost and innermost.startswith("transformers/")
    assert row["op"] == " > ".join(enclosing_ops(doc, call))


def test_a_long_wait_on_queued_work_is_not_a_sync_saving(monkeypatch):
    # sglang decode on an MI300X: a 463 ms blocking hipMemcpyWithStream during which the kernels it waits for were
    # queued (launched before it) but had not started: the device was held up elsewhere, not by the sync
    path = shared_trace("tracelens/traces/inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz")
    doc = tm.load(path)
    call = next(e for e in doc["traceEvents"] if e.get("name") == "hipMemcpyWithStream")
    a, b = call["ts"], call["ts"] + call["dur"]
    launch = {e["args"]["correlation"]: e["ts"] for e in doc["traceEvents"]
              if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    during = [e for e in tm.device_work(doc) if e["ts"] < b and e["ts"] + e["dur"] > a]
    assert during and all(launch[e["args"]["correlation"]] < a for e in during if "Memcpy" not in e["name"])
    assert findings(path) == []
    monkeypatch.setattr(sync_rule, "SAVING_SHARE", 0.0)
    row = findings(path)[0].evidence[0]
    assert row["wait_ns"] > 400_000_000 and row["idle_during_ns"] < 0.001 * row["wait_ns"]
    assert row["cost_ns"] == row["idle_during_ns"] + min(row["idle_after_ns"], row["drained_ns"])


def test_no_sync_inside_the_steps_of_a_real_trace():
    path = shared_trace("hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz")
    doc = tm.load(path)
    spans = tm.steps(doc)
    syncs = [e for e in doc["traceEvents"] if e.get("cat") == "cuda_runtime" and SYNC.search(e["name"])]
    assert syncs and not any(s <= e["ts"] < end for e in syncs for _, s, end in spans)
    pageable = [e for e in tm.device_work(doc) if "Pageable" in e["name"]]
    assert not pageable  # its copies are device to device: none blocks the host
    assert findings(path) == []


def test_explain():
    r = CliRunner().invoke(app, ["advise", "--explain", "host-sync"])
    assert r.exit_code == 0
    for text in ("cudaStreamSynchronize", "pageable", "Stream Wait Event", "idle_during + min(idle_after, drained)",
                 "1%"):
        assert text in r.stdout, text
