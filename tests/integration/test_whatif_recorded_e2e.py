"""A recorded CPU program with a slow region: whatif without the region predicts each step as the measured step less
the region's time in it (one thread: the region is on the path), read from the raw trace."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from support import tracemutate as tm
from support.timing import limit

PROGRAM = """
import time, torch
model = torch.nn.Linear(64, 64)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(8, 64)
for step in range(8):
    model(x).sum().backward()
    with torch.profiler.record_function("slow_region"):
        time.sleep(0.005)
    opt.step()
    opt.zero_grad()
"""


def test_whatif_removes_the_regions_time_from_each_step(tmp_path):
    pytest.importorskip("torch", reason="recording needs the torch extra")
    script = tmp_path / "program.py"
    script.write_text(PROGRAM)
    out = tmp_path / "rec"
    r = subprocess.run([sys.executable, "-m", "opscope.cli", "record", "--no-memory", "-o", str(out), "--", "python",
                        str(script)], capture_output=True, text=True, timeout=limit(300), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    trace = next(out.glob("*.pt.trace.json.gz"))
    w = subprocess.run([sys.executable, "-m", "opscope.cli", "whatif", str(trace), "-c", "op:slow_region=0", "-f",
                        "json"], capture_output=True, text=True, timeout=limit(120))
    assert w.returncode == 0, w.stderr
    rows = {r["step"]: r for r in json.loads(w.stdout)}
    doc = tm.load(trace)
    steps = tm.steps(doc)
    assert sorted(rows) == sorted(n for n, _, _ in steps)
    for number, start, end in steps:
        region = sum(e["dur"] for e in doc["traceEvents"] if e.get("name") == "slow_region" and e.get("ph") == "X"
                     and start <= e["ts"] < end)
        assert region > 0
        row = rows[number]
        assert row["replayed_ns"] == row["measured_ns"] == round((end - start) * 1000)
        assert row["predicted_ns"] == pytest.approx(row["measured_ns"] - region * 1000, abs=2)
