"""tools/gpu-check's dry run on the CPU: every step that can run without a GPU runs (record, the op times against
key_averages(), repro, whatif, advise --measure, peaks, roofline) and the GPU-only checks say SKIP with their reason,
so that the script a GPU machine runs unattended keeps working. No timing is asserted: the dry run does not judge
timings either."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.timing import limit

pytestmark = pytest.mark.slow  # a recording, five reproducers and five re-runs of a program: one to three minutes

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "gpu-check"
GPU_ONLY = ("kernel-links", "device-time", "repro-variants", "predict-pinned", "predict-tf32", "peaks-datasheet",
            "roofline")
RAN = ("environment", "install", "record", "op-times", "repro", "repro-check", "whatif", "advise", "rerun-baseline",
       "predict-sync", "advise-measure", "peaks", "roofline-measured")


def test_the_dry_run_passes_or_skips_every_check(tmp_path):
    pytest.importorskip("torch", reason="the dry run records a torch program")
    assert os.access(TOOL, os.X_OK), "tools/gpu-check must be executable"
    out = tmp_path / "out"
    # the budget is the run's own limit; the test's is that plus the time to stop and report
    budget = limit(240)
    r = subprocess.run([sys.executable, str(TOOL), "--dry-run", "--out", str(out), "--budget", str(budget)],
                       capture_output=True, text=True, timeout=budget + limit(60), cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    text = (out / "gpu-check.txt").read_text()
    assert r.stdout == text
    head, *lines = text.splitlines()
    assert "dry run" in head and "0 FAIL" in head
    statuses = {line.split()[1]: line.split()[0] for line in lines}
    assert set(statuses.values()) <= {"PASS", "SKIP"}, text
    for check in GPU_ONLY:
        assert statuses[check] == "SKIP", text
    # what the CPU runs ran (a check the budget left out says so instead: a slow machine is not a failure)
    for check in RAN:
        line = next(ln for ln in lines if ln.split()[1] == check)
        assert statuses[check] == "PASS" or "budget" in line or "not judged" in line, line
    doc = json.loads((out / "gpu-check.json").read_text())
    assert doc["mode"] == "dry-run" and doc["passed"] is True
    assert [(ln["status"], ln["check"]) for ln in doc["lines"]] == [(ln.split()[0], ln.split()[1]) for ln in lines]
    # the recording and torch's own key_averages() of it are kept beside the table
    assert (out / "rec" / "run.json").is_file() and (out / "rec" / "key_averages.json").is_file()
    assert (out / "repro" / "cases.json").is_file()
