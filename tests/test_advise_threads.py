"""threads rule: thread settings from run.json against the usable cores, on a real recording and by hand."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from support.tracefiles import write_trace, x
from typer.testing import CliRunner

from opscope.advise import advise
from opscope.advise.context import find_run_info
from opscope.cli import app
from opscope.ingest import open_trace

runner = CliRunner()
LOADER = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"


def cpu_step(mm_us: int = 50) -> list[dict]:
    """One 100 us step on the CPU with an aten::mm of ``mm_us`` in it."""
    return [x("ProfilerStep#1", 0, 100, cat="user_annotation"), x("aten::mm", 10, mm_us)]


def recording(tmp_path, run: dict, events: list[dict] | None = None, header: dict | None = None):
    """A recording directory as opscope record leaves it: a trace and a run.json naming it; returns the trace and
    the run info found beside it."""
    d = tmp_path / "rec"
    d.mkdir()
    trace = write_trace(d / "trace-1.pt.trace.json", events or cpu_step(), header=header)
    (d / "run.json").write_text(json.dumps({"traces": ["trace-1.pt.trace.json"], **run}))
    return open_trace(trace), find_run_info(trace)


def run_json(intra, cores, inter=1, env=None, gpus=0):
    return {"threads": {"intra_op": intra, "inter_op": inter}, "cpu": {"usable_cores": cores, "logical_cores": cores},
            "environment": env or {}, "gpus": [{"index": i, "name": "GPU"} for i in range(gpus)]}


def findings(trace, run):
    return advise(trace, run=run, only=["threads"]).findings


def settings(f):
    return {(e["setting"], e["value"]) for e in f.evidence}


def test_oversubscribed_intra_op_threads(tmp_path):
    trace, run = recording(tmp_path, run_json(16, 4, inter=2))
    (f,) = findings(trace, run)
    assert f.saving_ns is None and f.saving_pct is None
    assert [(e["setting"], e["value"], e["usable_cores"]) for e in f.evidence] == [("intra_op", 16, 4)]
    assert "torch.set_num_threads(4)" in f.change and "opscope tune-threads -- python" in f.change
    assert "tune-threads" in f.estimate
    # the CLI finds run.json beside the trace, and takes a recording directory too
    d = tmp_path / "rec"
    for target in (d / "trace-1.pt.trace.json", d):
        r = runner.invoke(app, ["advise", str(target), "--rules", "threads", "-f", "json"])
        assert r.exit_code == 0 and json.loads(r.stdout)[0]["rule"] == "threads", r.output


def test_disagreeing_environment_and_underuse_on_a_cpu_bound_run(tmp_path):
    # ops run 80 of the 100 us: CPU-bound; 2 threads on 16 cores
    trace, run = recording(tmp_path, run_json(2, 16, env={"OMP_NUM_THREADS": "8"}), cpu_step(80))
    (f,) = findings(trace, run)
    assert settings(f) == {("intra_op", 2), ("OMP_NUM_THREADS", 8)}
    assert "run 80% of the time" in next(e["problem"] for e in f.evidence if e["setting"] == "intra_op")


def test_few_threads_on_a_run_that_mostly_waits_is_not_underuse(tmp_path):
    # ops run 30 of the 100 us: more threads would not help much
    trace, run = recording(tmp_path, run_json(2, 16), cpu_step(30))
    assert findings(trace, run) == []


def test_ranks_sharing_the_host(tmp_path):
    # 16 ranks, 8 GPUs on this host, 32 cores: 8 ranks x 32 threads
    header = {"distributedInfo": {"rank": 0, "world_size": 16, "backend": "nccl"}}
    trace, run = recording(tmp_path, run_json(32, 32, gpus=8), header=header)
    (f,) = findings(trace, run)
    assert settings(f) == {("processes", 8)}
    assert "OMP_NUM_THREADS=4" in f.change  # 32 cores / 8 ranks
    # LOCAL_WORLD_SIZE, when the environment has it, says how many share the host
    (tmp_path / "rec").rename(tmp_path / "old")
    trace, run = recording(tmp_path, run_json(8, 8, env={"LOCAL_WORLD_SIZE": "2"}))
    (f,) = findings(trace, run)
    assert settings(f) == {("processes", 2)} and "OMP_NUM_THREADS=4" in f.change
    # 4 threads each fit: 8 x 4 = 32
    (tmp_path / "rec").rename(tmp_path / "old2")
    trace, run = recording(tmp_path, run_json(4, 32, env={"OMP_NUM_THREADS": "4"}, gpus=8), header=header)
    assert findings(trace, run) == []
    # 1 thread each on a CPU-bound run leaves 24 of the 32 cores idle
    (tmp_path / "rec").rename(tmp_path / "old3")
    trace, run = recording(tmp_path, run_json(1, 32, gpus=8), cpu_step(80), header=header)
    (f,) = findings(trace, run)
    assert settings(f) == {("intra_op", 1)} and "torch.set_num_threads(4)" in f.change


def test_dataloader_workers_beside_a_cpu_bound_main_process(tmp_path):
    events = [x("ProfilerStep#1", 0, 100, cat="user_annotation"), x(LOADER, 2, 8, cat="user_annotation"),
              x("aten::mm", 10, 85)]
    trace, run = recording(tmp_path, run_json(8, 8), events)
    (f,) = findings(trace, run)
    assert settings(f) == {("dataloader_workers", None)}
    assert "torch.set_num_threads(8 - num_workers)" in f.change
    # on a GPU run the main process's threads mostly wait for the device: not flagged
    (tmp_path / "rec").rename(tmp_path / "old")
    gpu = events + [x("cudaLaunchKernel", 20, 2, cat="cuda_runtime", correlation=1),
                    x("k", 30, 50, cat="kernel", pid=0, tid=7, device=0, stream=7, correlation=1)]
    trace, run = recording(tmp_path, run_json(8, 8), gpu)
    assert findings(trace, run) == []


def test_fitting_settings_and_no_run_info(tmp_path):
    trace, run = recording(tmp_path, run_json(4, 4, inter=4, env={"OMP_NUM_THREADS": "4"}))
    assert findings(trace, run) == []
    assert "no run.json" in advise(trace, only=["threads"]).not_applicable["threads"]
    assert "no run.json" in advise(trace, run={"command": ["x"]}, only=["threads"]).not_applicable["threads"]


def test_a_real_recording_with_more_threads_than_cores(tmp_path):
    pytest.importorskip("torch", reason="recording needs the torch extra")
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""
        import torch
        model = torch.nn.Linear(32, 32)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(5):
            model(torch.randn(64, 32)).sum().backward()
            opt.step()
            opt.zero_grad()
    """))
    cores = len(os.sched_getaffinity(0))
    threads = max(cores, os.cpu_count() or 1) * 4
    r = subprocess.run([sys.executable, "-m", "opscope.cli", "record", "-o", str(tmp_path / "rec"),
                        "--intra-op-threads", str(threads), "--", "python", str(script)],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    info = json.loads((tmp_path / "rec" / "run.json").read_text())
    assert info["threads"]["intra_op"] == threads and info["cpu"]["usable_cores"] == cores
    r = subprocess.run([sys.executable, "-m", "opscope.cli", "advise", str(tmp_path / "rec"), "--rules", "threads",
                        "-f", "json"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert len(rows) == 1 and rows[0]["saving_ns"] is None
    # opscope record sets OMP_NUM_THREADS and MKL_NUM_THREADS to the same count: only the oversubscription shows
    assert [(e["setting"], e["value"], e["usable_cores"]) for e in rows[0]["evidence"]] == [
        ("intra_op", threads, cores)]


def test_explain():
    r = runner.invoke(app, ["advise", "--explain", "threads"])
    assert r.exit_code == 0 and "oversubscription" in r.stdout and "tune-threads" in r.stdout
