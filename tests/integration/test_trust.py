"""Trust: change a real trace in a known way and check that diff and advise find exactly that change.

The expected figures are computed from the raw JSON (tests/support/tracemutate.py), not by opscope.
"""

from __future__ import annotations

import itertools
import json

import pytest
from support import tracemutate as tm
from support.shared import shared_trace
from typer.testing import CliRunner

from opscope.cli import app

REAL = "hta/trace_diff/control/control.json.gz"
runner = CliRunner()


@pytest.fixture(scope="module")
def real_doc() -> dict:
    return tm.load(shared_trace(REAL))


def test_diff_puts_a_kernel_made_twice_as_long_first_with_its_delta(tmp_path, real_doc):
    doc = json.loads(json.dumps(real_doc))
    kernels = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "kernel"]
    # a kernel in the middle of the ranking (not already the biggest): the 5th by total time
    totals: dict[str, int] = {}
    for e in kernels:
        totals[e["name"]] = totals.get(e["name"], 0) + e["dur"]
    name = sorted(totals, key=lambda n: -totals[n])[4]
    owner, steps = tm.launch_steps(doc), tm.steps(doc)
    in_steps = sum(e["dur"] for e in kernels if e["name"] == name and tm.device_step(e, owner, steps) is not None)
    base = tm.save(real_doc, tmp_path / "base.json")
    assert tm.double_kernel(doc, name) > 0
    new = tm.save(doc, tmp_path / "new.json")

    r = runner.invoke(app, ["diff", str(base), str(new), "--format", "json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    first = rows[0]
    assert (first["kind"], first["name"]) == ("kernel", name)
    # per step: the added time (= its own duration again) over the steps that own it
    assert first["delta_ns"] == pytest.approx(in_steps * 1000 / len(steps), abs=1)
    assert first["new_ns"] == pytest.approx(2 * first["base_ns"], abs=1)
    assert first["calls_base"] == first["calls_new"]
    # nothing else changed on the device
    assert all(r["delta_ns"] == 0 for r in rows if r["kind"] == "kernel" and r["name"] != name)

    r = runner.invoke(app, ["diff", str(base), str(new), "--format", "json", "--whole-trace"])
    assert r.exit_code == 0, r.output
    whole = json.loads(r.stdout)[0]
    assert whole["name"] == name and whole["delta_ns"] == totals[name] * 1000


def test_advise_finds_an_injected_idle_gap_with_its_size(tmp_path, real_doc):
    doc = json.loads(json.dumps(real_doc))
    steps = tm.steps(doc)
    number, s0, s1 = steps[2]
    busy = [iv for iv in tm.busy_union(doc, 3) if s0 < iv[0] and iv[1] < s1]
    # the first gap on the device after the middle of the step: stretch time at its start
    mid = (s0 + s1) / 2
    before, after = next((a, b) for a, b in itertools.pairwise(busy) if a[1] >= mid)
    at, old_gap = before[1], after[0] - before[1]
    longest_before = max(b[0] - a[1] for a, b in zip(tm.busy_union(doc, 3), tm.busy_union(doc, 3)[1:]))
    inject = 100_000  # 100 ms, longer than any gap the trace has
    assert inject > longest_before
    tm.insert_gap(doc, at, inject)
    base = tm.save(real_doc, tmp_path / "base.json")
    new = tm.save(doc, tmp_path / "gap.json")

    def finding(path):
        r = runner.invoke(app, ["advise", str(path), "--rules", "gpu-idle", "--format", "json"])
        assert r.exit_code == 0, r.output
        return json.loads(r.stdout)[0]

    f = finding(new)
    gap = next(e for e in f["evidence"] if e["what"] == "gap")  # the longest gap comes first
    assert gap["idle_ns"] == (old_gap + inject) * 1000
    assert gap["step"] == number and gap["at_ns"] == (at - s0) * 1000
    # the idle time per step grew by exactly the injected gap spread over the steps
    assert f["saving_ns"] - finding(base)["saving_ns"] == pytest.approx(inject * 1000 / len(steps), abs=2)
