"""opscope memory: peaks, holders at the peak, allocations by op, timeline; checked by hand, against the raw
JSON of real traces and against torch's own per-op memory figures."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pyarrow.compute as pc
import pytest
from support.shared import shared_trace
from support.tracefiles import small_gpu_trace, write_trace, x

from opscope.analyses import memory as mem
from opscope.ingest import open_trace

US = 1000
CUDA, CPU = (1, 0), (0, -1)


def m(ts: float, addr: int, nbytes: int, allocated: int, reserved: int = 0, device=CUDA, tid=1) -> dict:
    """A Kineto ``[memory]`` instant event as torch writes it."""
    return {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": tid, "ts": ts,
            "args": {"Total Reserved": reserved, "Total Allocated": allocated, "Bytes": nbytes,
                     "Device Id": device[1], "Device Type": device[0], "Addr": addr}}


MiB = 1 << 20


def hand_trace() -> list[dict]:
    """One step [0, 1000) us on thread 1; 300 bytes of cuda:0 were allocated before the trace.

    ops: aten::empty [100, 200); aten::conv2d [300, 600) > aten::empty [310, 320); aten::relu [700, 800)
    cuda:0 records (total after each):
      50   +1000 @A (no op)           1300
      150  +4000 @B aten::empty       5300
      315  +2000 @C inner aten::empty 7300
      400  +8000 @D aten::conv2d     15300  <- peak; reserved grows 2 -> 4 MiB here
      500  -2000 @C                  13300
      750  -4000 @B                   9300
      760  +500  @E aten::relu        9800
      900  -300  @F (no alloc seen)   9500
    cpu records: 160 +64 @B aten::empty (64), 170 -64 @B (0): the same address as a cuda allocation.
    """
    return [
        x("ProfilerStep#1", 0, 1000, cat="user_annotation"),
        x("aten::empty", 100, 100),
        x("aten::conv2d", 300, 300),
        x("aten::empty", 310, 10),
        x("aten::relu", 700, 100),
        m(50, 0xA, 1000, 1300, 2 * MiB),
        m(150, 0xB, 4000, 5300, 2 * MiB),
        m(160, 0xB, 64, 64, device=CPU),
        m(170, 0xB, -64, 0, device=CPU),
        m(315, 0xC, 2000, 7300, 2 * MiB),
        m(400, 0xD, 8000, 15300, 4 * MiB),
        m(500, 0xC, -2000, 13300, 4 * MiB),
        m(750, 0xB, -4000, 9300, 4 * MiB),
        m(760, 0xE, 500, 9800, 4 * MiB),
        m(900, 0xF, -300, 9500, 4 * MiB),
    ]


@pytest.fixture
def hand(tmp_path):
    return open_trace(write_trace(tmp_path / "mem.json", hand_trace()), use_cache=False)


def test_peak_per_device(hand):
    rec = mem.memory_records(hand)
    peaks = {r["device"]: r for r in mem.peak_table(rec).to_pylist()}
    assert set(peaks) == {"cpu", "cuda:0"}
    cuda = peaks["cuda:0"]
    assert cuda["peak_allocated_bytes"] == 15300 and cuda["peak_at_ns"] == 400 * US and cuda["peak_step"] == 1
    assert cuda["peak_reserved_bytes"] == 4 * MiB and cuda["reserved_at_ns"] == 400 * US
    assert cuda["end_allocated_bytes"] == 9500
    assert (cuda["allocs"], cuda["frees"], cuda["alloc_bytes"]) == (5, 3, 1000 + 4000 + 2000 + 8000 + 500)
    cpu = peaks["cpu"]
    assert (cpu["peak_allocated_bytes"], cpu["peak_at_ns"], cpu["allocs"], cpu["frees"]) == (64, 160 * US, 1, 1)
    assert rec.problems["frees without an allocation in the trace (made before it started)"] == 1


def test_holders_at_the_peak_add_up(hand):
    holders = mem.holders_table(mem.memory_records(hand)).to_pylist()
    cuda = {r["op"]: (r["bytes"], r["allocations"]) for r in holders if r["device"] == "cuda:0"}
    # alive at 400: A (no op), B and C (aten::empty), D (aten::conv2d); 300 bytes from before the trace
    assert cuda == {"aten::conv2d": (8000, 1), "aten::empty": (6000, 2), mem.NO_OP: (1000, 1),
                    mem.BEFORE_TRACE: (300, None)}
    assert [r["op"] for r in holders if r["device"] == "cuda:0"][0] == "aten::conv2d"  # largest first
    top = next(r for r in holders if r["op"] == "aten::conv2d")
    assert top["peak_pct"] == round(100 * 8000 / 15300, 2)
    # the cpu allocation at the same address is a different device: alive at the cpu peak, freed at 170
    assert [(r["op"], r["bytes"]) for r in holders if r["device"] == "cpu"] == [("aten::empty", 64)]


def test_allocations_by_op(hand):
    rows = mem.allocation_table(mem.memory_records(hand, devices=["cuda:0"])).to_pylist()
    assert [(r["op"], r["allocations"], r["bytes"], r["max_bytes"], r["avg_bytes"]) for r in rows] == [
        ("aten::conv2d", 1, 8000, 8000, 8000),
        ("aten::empty", 2, 6000, 4000, 3000),
        (mem.NO_OP, 1, 1000, 1000, 1000),
        ("aten::relu", 1, 500, 500, 500),
    ]
    by_count = mem.allocation_table(mem.memory_records(hand, devices=["cuda:0"]), sort="-allocations")
    assert by_count["allocations"].to_pylist()[0] == 1


def test_timeline_carries_the_level_between_records(hand):
    line = mem.timeline_table(mem.memory_records(hand, devices=["cuda:0"]), buckets=4).to_pylist()
    # buckets of 250 us; the level before the first record is 1300 - 1000 = 300
    assert [r["allocated_bytes"] for r in line] == [5300, 15300, 15300, 13300]
    assert [r["start_ns"] for r in line] == [0, 250 * US, 500 * US, 750 * US]
    assert [r["reserved_bytes"] for r in line] == [2 * MiB, 4 * MiB, 4 * MiB, 4 * MiB]


def test_steps_window_and_unknown_device(hand, tmp_path):
    rec = mem.memory_records(hand, steps=[2])
    assert rec.table.num_rows == 0 and mem.peak_table(rec).num_rows == 0
    from opscope.errors import UsageError

    with pytest.raises(UsageError, match="cuda:0"):
        mem.memory_records(hand, devices=["cuda:3"])


def test_negative_totals_and_missing_totals(tmp_path):
    events = [x("aten::empty", 0, 100), m(10, 1, 100, -5), m(20, 2, 50, 40), m(30, 1, -100, -60)]
    rec = mem.memory_records(open_trace(write_trace(tmp_path / "neg.json", events), use_cache=False))
    assert rec.problems["records with a negative total allocated (ignored for peaks)"] == 2
    assert mem.peak_table(rec).to_pylist()[0]["peak_allocated_bytes"] == 40
    # no totals at all: the level is rebuilt from the bytes
    bare = [x("aten::empty", 0, 100)] + [dict(e, args={k: v for k, v in e["args"].items() if k != "Total Allocated"})
                                         for e in (m(10, 1, 100, 0), m(20, 2, 50, 0), m(30, 1, -100, 0))]
    rec = mem.memory_records(open_trace(write_trace(tmp_path / "bare.json", bare), use_cache=False))
    assert mem.peak_table(rec).to_pylist()[0]["peak_allocated_bytes"] == 150
    assert any("without totals" in n for n in rec.notes())


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "opscope.cli", *args], capture_output=True, text=True,
                          env=dict(os.environ), timeout=120)


def test_cli_views_and_no_memory(tmp_path):
    path = write_trace(tmp_path / "mem.json", hand_trace())
    res = run("memory", str(path))
    assert res.returncode == 0, res.stderr
    assert "Peak memory per device" in res.stdout and "aten::conv2d" in res.stdout and "14.94 KiB" in res.stdout
    assert "1 frees without an allocation" in res.stdout
    holders = json.loads(run("memory", str(path), "--view", "holders", "-f", "json", "--device", "cuda:0").stdout)
    assert sum(r["bytes"] for r in holders) == 15300
    line = json.loads(run("memory", str(path), "--timeline", "4", "-f", "json", "--device", "cuda:0").stdout)
    assert [r["allocated_bytes"] for r in line] == [5300, 15300, 15300, 13300]
    res = run("memory", str(path), "--device", "cuda:7")
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "cuda:0" in res.stderr
    empty = write_trace(tmp_path / "none.json", small_gpu_trace())
    res = run("memory", str(empty))
    assert res.returncode == 0 and "profile_memory=True" in res.stdout
    res = run("memory", str(empty), "-f", "json")
    assert res.returncode == 0 and json.loads(res.stdout) == [] and "profile_memory=True" in res.stderr


# --- real traces ---------------------------------------------------------------------------------------------

def _raw_peaks(path: Path) -> dict[str, int]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        doc = json.load(f)
    peaks: dict[str, int] = defaultdict(lambda: -1)
    for e in doc["traceEvents"]:
        if e.get("name") == "[memory]":
            a = e["args"]
            label = mem.device_label(a["Device Type"], a["Device Id"])
            peaks[label] = max(peaks[label], a["Total Allocated"])
    return dict(peaks)


@pytest.mark.parametrize("relative", ["generated/torch_cpu_mobilenetv2_train.json",
                                      "hta/df_index_resolver/df_index_resolver.json.gz",
                                      "tracelens/traces/h100/gaunernst_bert-small-uncased__1016001.json.gz"])
def test_real_trace_peak_is_the_largest_total(relative):
    path = shared_trace(relative)
    rec = mem.memory_records(open_trace(path))
    peaks = {r["device"]: r["peak_allocated_bytes"] for r in mem.peak_table(rec).to_pylist()}
    assert peaks == _raw_peaks(path)
    holders = mem.holders_table(rec).to_pylist()
    for device, peak in peaks.items():
        assert sum(r["bytes"] for r in holders if r["device"] == device) == peak


def test_torch_recording_matches_torch_own_per_op_memory(tmp_path):
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    data = torch.randn(128, 64)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        for _ in range(2):
            model(data).sum().backward()
    path = tmp_path / "torch_mem.json"
    prof.export_chrome_trace(str(path))
    rec = mem.memory_records(open_trace(path, use_cache=False))
    # torch charges each record to the innermost op running when it was made: key_averages()'s
    # self_cpu_memory_usage (records outside every op show as '[memory]')
    theirs = {e.key: e.self_cpu_memory_usage for e in prof.key_averages() if e.self_cpu_memory_usage}
    by_op = rec.table.group_by("op").aggregate([("bytes", "sum")])
    ours = {(k if k is not None else "[memory]"): v
            for k, v in zip(by_op["op"].to_pylist(), by_op["bytes_sum"].to_pylist()) if v}
    assert ours == theirs
    assert mem.peak_table(rec).to_pylist()[0]["peak_allocated_bytes"] == _raw_peaks(path)["cpu"]
    assert pc.sum(rec.table["bytes"]).as_py() == sum(theirs.values())
