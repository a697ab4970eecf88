"""opscope memory through the CLI, against the raw JSON of real traces and against torch's own per-op memory
figures."""

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
from support.memory import hand_trace
from support.shared import shared_trace
from support.timing import limit
from support.tracefiles import small_gpu_trace, write_trace

from opscope.analyses import memory as mem
from opscope.ingest import open_trace


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "opscope.cli", *args], capture_output=True, text=True,
                          env=dict(os.environ), timeout=limit(120))


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
