"""warm-up rule: a slow first step (one-time cost, inflated mean) on a real Kineto trace and on a torch.compile
run recorded here, and its --explain."""

from __future__ import annotations

import statistics
import subprocess
import sys
import textwrap

import pytest
from support import tracemutate as tm
from support.advise_warmup import flags, steps_trace, warmup
from support.shared import shared_trace
from support.timing import limit
from typer.testing import CliRunner

from opscope.advise import advise
from opscope.cli import app
from opscope.ingest import open_trace


def test_real_warm_up_step_and_the_mean_it_inflates():
    path = shared_trace("kineto/samples/resnet50_num_workers_4/worker0.pt.trace.json.gz")
    durs = [(n, (e - s) * 1000) for n, s, e in tm.steps(tm.load(path))]
    assert flags([d for _, d in durs]) == ["warm-up"] + [None] * 5  # the precondition, from the raw JSON
    first, rest = durs[0], [d for _, d in durs[1:]]
    f = advise(open_trace(path), only=["warm-up"]).findings
    assert len(f) == 1 and f[0].saving_ns is None and f[0].saving_pct is None
    row = f[0].evidence[0]
    assert (row["step"], row["dur_ns"]) == (first[0], first[1])
    assert row["x_median"] == round(first[1] / statistics.median(rest), 2)
    inflation = statistics.mean(d for _, d in durs) - statistics.mean(rest)
    assert row["inflates_mean_ns"] == pytest.approx(inflation, abs=1)
    assert f"({100 * inflation / statistics.mean(rest):.1f}%)" in f[0].estimate
    assert "measurement distortion" in f[0].estimate
    assert "ProfilerStep" not in row["extra_in"]


COMPILED = textwrap.dedent("""
    import sys, torch
    from torch.profiler import ProfilerActivity, profile, schedule
    torch.manual_seed(0)
    model = torch.compile(torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8)),
                          backend="aot_eager")  # compiles on the first call, no C++ compiler needed
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=0, active=6, repeat=1),
                 on_trace_ready=lambda p: p.export_chrome_trace(sys.argv[1])) as prof:
        for _ in range(6):
            model(torch.randn(16, 32)).sum().backward()
            opt.step()
            opt.zero_grad()
            prof.step()
""")


def test_first_step_compiling_recorded_here(tmp_path):
    pytest.importorskip("torch", reason="recording needs the torch extra")
    script, trace = tmp_path / "compiled.py", tmp_path / "compiled.json"
    script.write_text(COMPILED)
    r = subprocess.run([sys.executable, str(script), str(trace)], capture_output=True, text=True, timeout=limit(300))
    assert r.returncode == 0, r.stderr
    doc = tm.load(trace)
    durs = [(n, (e - s) * 1000) for n, s, e in tm.steps(doc)]
    expected = flags([d for _, d in durs])
    assert expected[0] == "warm-up"  # compiling takes far longer than a step of this tiny model
    typical = [d for (_, d), flag in zip(durs, expected) if flag is None]
    f = warmup(advise(open_trace(trace), only=["warm-up"]).findings)
    assert len(f) == 1 and f[0].saving_ns is None
    row = f[0].evidence[0]
    assert row["step"] == durs[0][0] and row["dur_ns"] == pytest.approx(durs[0][1], abs=1)
    assert row["inflates_mean_ns"] == pytest.approx((durs[0][1] - statistics.mean(typical)) / len(durs), abs=1)
    # the compile phases TorchDynamo records (dynamo_timed regions) are where the extra time went
    assert row["cause"] == "compilation" and "(dynamo_timed)" in row["extra_in"]
    assert f[0].title.endswith("in compilation")


def test_even_steps_stay_silent(tmp_path):
    path = shared_trace("kineto/samples/resnet50_num_workers_0/worker0.pt.trace.json.gz")
    durs = [(e - s) * 1000 for _, s, e in tm.steps(tm.load(path))]
    assert flags(durs) == [None] * len(durs)
    assert advise(open_trace(path), only=["warm-up"]).findings == []
    assert advise(steps_trace(tmp_path, (1000, 1100, 1000, 1050)), only=["warm-up"]).findings == []


def test_explain():
    r = CliRunner().invoke(app, ["advise", "--explain", "warm-up"])
    assert r.exit_code == 0 and "measurement distortion" in r.stdout and "one-time cost" in r.stdout
