"""threads rule: thread settings from run.json against the usable cores, on a real recording and by hand."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from tracefiles import write_trace, x
from typer.testing import CliRunner

from opscope.advise import advise
from opscope.advise.context import find_run_info
from opscope.cli import app
from opscope.ingest import open_trace

runner = CliRunner()


def recording(tmp_path, run: dict):
    """A recording directory as opscope record leaves it: a trace and a run.json naming it."""
    d = tmp_path / "rec"
    d.mkdir()
    write_trace(d / "trace-1.pt.trace.json", [x("ProfilerStep#1", 0, 100, cat="user_annotation"),
                                              x("aten::mm", 10, 50)])
    (d / "run.json").write_text(json.dumps({"traces": ["trace-1.pt.trace.json"], **run}))
    return d


def test_oversubscribed_intra_op_threads(tmp_path):
    d = recording(tmp_path, {"threads": {"intra_op": 16, "inter_op": 2}, "cpu": {"usable_cores": 4},
                             "environment": {}})
    run = find_run_info(d / "trace-1.pt.trace.json")
    f = advise(open_trace(d / "trace-1.pt.trace.json"), run=run, only=["threads"]).findings
    assert len(f) == 1 and f[0].saving_ns is None
    assert f[0].evidence == [{"setting": "intra_op", "value": 16, "usable_cores": 4,
                              "problem": f[0].evidence[0]["problem"]}]
    assert "tune-threads" in f[0].change
    # the CLI finds run.json beside the trace, and takes a recording directory too
    for target in (d / "trace-1.pt.trace.json", d):
        r = runner.invoke(app, ["advise", str(target), "--rules", "threads", "-f", "json"])
        assert r.exit_code == 0 and json.loads(r.stdout)[0]["rule"] == "threads", r.output


def test_disagreeing_environment_and_underuse(tmp_path):
    d = recording(tmp_path, {"threads": {"intra_op": 2, "inter_op": 2}, "cpu": {"usable_cores": 16},
                             "environment": {"OMP_NUM_THREADS": "8"}})
    f = advise(open_trace(d / "trace-1.pt.trace.json"), run=find_run_info(d / "trace-1.pt.trace.json"),
               only=["threads"]).findings
    assert {(e["setting"], e["value"]) for e in f[0].evidence} == {("intra_op", 2), ("OMP_NUM_THREADS", 8)}


def test_fitting_settings_and_no_run_info(tmp_path):
    d = recording(tmp_path, {"threads": {"intra_op": 4, "inter_op": 4}, "cpu": {"usable_cores": 4},
                             "environment": {"OMP_NUM_THREADS": "4"}})
    trace = open_trace(d / "trace-1.pt.trace.json")
    assert advise(trace, run=find_run_info(d / "trace-1.pt.trace.json"), only=["threads"]).findings == []
    assert "run.json" in advise(trace, only=["threads"]).not_applicable["threads"]


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
    threads = cores * 4
    r = subprocess.run([sys.executable, "-m", "opscope.cli", "record", "-o", str(tmp_path / "rec"),
                        "--intra-op-threads", str(threads), "--", "python", str(script)],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([sys.executable, "-m", "opscope.cli", "advise", str(tmp_path / "rec"), "--rules", "threads",
                        "-f", "json"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert rows and {"setting": "intra_op", "value": threads} == {k: rows[0]["evidence"][0][k]
                                                                   for k in ("setting", "value")}
    assert rows[0]["evidence"][0]["usable_cores"] == cores
