"""threads rule through the CLI and on a real recording made here, and its --explain."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from support.advise_threads import findings, recording, run_json
from support.timing import limit
from typer.testing import CliRunner

from opscope.cli import app

runner = CliRunner()


def test_oversubscribed_intra_op_threads(tmp_path):
    trace, run = recording(tmp_path, run_json(16, 4, inter=2))
    (f,) = findings(trace, run)
    assert f.saving_ns is None and f.saving_pct is None
    assert [(e["setting"], e["value"], e["usable_cores"]) for e in f.evidence] == [("intra_op", 16, 4)]
    assert "torch.set_num_threads(4)" in f.remedy and "opscope tune-threads -- python" in f.remedy
    assert "tune-threads" in f.estimate
    # the CLI finds run.json beside the trace, and takes a recording directory too
    d = tmp_path / "rec"
    for target in (d / "trace-1.pt.trace.json", d):
        r = runner.invoke(app, ["advise", str(target), "--rules", "threads", "-f", "json"])
        assert r.exit_code == 0 and json.loads(r.stdout)[0]["rule"] == "threads", r.output


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
                       capture_output=True, text=True, timeout=limit(300), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    info = json.loads((tmp_path / "rec" / "run.json").read_text())
    assert info["threads"]["intra_op"] == threads and info["cpu"]["usable_cores"] == cores
    r = subprocess.run([sys.executable, "-m", "opscope.cli", "advise", str(tmp_path / "rec"), "--rules", "threads",
                        "-f", "json"], capture_output=True, text=True, timeout=limit(120), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert len(rows) == 1 and rows[0]["saving_ns"] is None
    # opscope record sets OMP_NUM_THREADS and MKL_NUM_THREADS to the same count: only the oversubscription shows
    assert [(e["setting"], e["value"], e["usable_cores"]) for e in rows[0]["evidence"]] == [
        ("intra_op", threads, cores)]


def test_explain():
    r = runner.invoke(app, ["advise", "--explain", "threads"])
    assert r.exit_code == 0 and "oversubscription" in r.stdout and "tune-threads" in r.stdout
