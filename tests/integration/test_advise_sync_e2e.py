"""host-sync rule on real traces (expected values computed from the raw JSON), and its --explain."""

from __future__ import annotations

import re

import pytest
from support import tracemutate as tm
from support.advise_sync import findings
from support.shared import shared_trace
from typer.testing import CliRunner

import opscope.advise.rules.sync as sync_rule
from opscope.cli import app

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
    assert f[0].estimated_ns == pytest.approx(total * 1000, abs=3)
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
        assert row["wait_ns"] == row["cost_ns"] == f[0].estimated_ns == round(record["dur"] * 1000)
        rows.append(dict(row.items()))
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
