"""warm-up rule: a slow first step (one-time cost, inflated mean) and slow steps (a saving when they recur), on a
real Kineto trace, a torch.compile run recorded here, and by hand."""

from __future__ import annotations

import statistics
import subprocess
import sys
import textwrap

import pytest
from support import tracemutate as tm
from support.shared import shared_trace
from support.tracefiles import write_trace, x
from typer.testing import CliRunner

from opscope.advise import advise
from opscope.cli import app
from opscope.ingest import open_trace


def flags(durs):
    """The step table's outlier flags, written out: slow > 1.5x the median of all, warm-up (first step only)
    > 1.2x the median of the others."""
    median = statistics.median(durs)
    out = ["slow" if d > 1.5 * median else None for d in durs]
    if durs[0] > 1.2 * statistics.median(durs[1:]):
        out[0] = "warm-up"
    return out


def warmup(findings):
    return [f for f in findings if f.title.startswith("Warm-up")]


def slow(findings):
    return [f for f in findings if "over 1.5x the median step" in f.title]


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
    r = subprocess.run([sys.executable, str(script), str(trace)], capture_output=True, text=True, timeout=300)
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


def steps_trace(tmp_path, durs, extra=None):
    """Steps of the given durations (us), each running aten::mm for 500 us; ``extra`` maps a step number to
    (op name, dur) run after it."""
    events, t = [], 0
    for n, dur in enumerate(durs, start=1):
        events.append(x(f"ProfilerStep#{n}", t, dur, cat="user_annotation"))
        events.append(x("aten::mm", t + 10, 500))
        if extra and n in extra:
            name, length = extra[n]
            events.append(x(name, t + 600, length))
        t += dur
    return open_trace(write_trace(tmp_path / "t.json", events))


def test_recurring_slow_steps_are_a_saving_and_the_warm_up_is_not(tmp_path):
    # 3000 (warm-up: a 2 ms compile), then 1000 us steps, two of them 2000 us (a 1 ms aten::save): typical
    # steps are the four 1000 us ones
    durs = (3000, 1000, 1000, 2000, 1000, 2000, 1000)
    assert flags(list(durs)) == ["warm-up", None, None, "slow", None, "slow", None]
    trace = steps_trace(tmp_path, durs, {1: ("_compile.compile_inner (dynamo_timed)", 2000),
                                         4: ("aten::save", 1000), 6: ("aten::save", 1000)})
    found = advise(trace, only=["warm-up"]).findings
    (warm,), (slowf,) = warmup(found), slow(found)
    assert warm.saving_ns is None
    assert warm.evidence[0]["cause"] == "compilation"
    assert warm.evidence[0]["extra_in"] == "_compile.compile_inner (dynamo_timed): +2.000 ms"
    assert warm.evidence[0]["inflates_mean_ns"] == round(2_000_000 / 7)
    # two slow steps, 1000 us over the typical mean each, over 7 steps; the mean step is 11000 / 7 us
    assert slowf.saving_ns == round(2_000_000 / 7)
    assert slowf.saving_pct == pytest.approx(100 * round(2_000_000 / 7) / (11_000_000 // 7), abs=0.01)
    assert [e["step"] for e in slowf.evidence] == [4, 6]
    assert all(e["extra_in"] == "aten::save: +1.000 ms" and e["cause"] is None for e in slowf.evidence)
    # both estimates give the total inflation of the mean: 11000 / 7 - 1000 us
    assert "raise the mean step by 571.429 us" in warm.estimate and "571.429 us" in slowf.estimate


def test_one_slow_step_may_be_a_one_off(tmp_path):
    # step 3 takes 1500 us more with no op to show for it (a time.sleep, say): outside any op
    trace = steps_trace(tmp_path, (1000, 1000, 2500, 1000, 1000))
    (f,) = advise(trace, only=["warm-up"]).findings
    assert f.saving_ns is None and "seen once in 5 steps" in f.estimate
    assert "costs 300.000 us per step" in f.estimate  # 1500 us / 5 steps, if it recurs every 5 steps
    assert f.evidence[0]["extra_in"] == "(in the step, outside any op): +1.500 ms"


def test_even_steps_stay_silent(tmp_path):
    path = shared_trace("kineto/samples/resnet50_num_workers_0/worker0.pt.trace.json.gz")
    durs = [(e - s) * 1000 for _, s, e in tm.steps(tm.load(path))]
    assert flags(durs) == [None] * len(durs)
    assert advise(open_trace(path), only=["warm-up"]).findings == []
    assert advise(steps_trace(tmp_path, (1000, 1100, 1000, 1050)), only=["warm-up"]).findings == []


def test_without_steps_it_is_not_applicable(tmp_path):
    t = open_trace(write_trace(tmp_path / "t.json", [x("aten::mm", 0, 10)]))
    assert "two ProfilerSteps" in advise(t, only=["warm-up"]).not_applicable["warm-up"]
    one = open_trace(write_trace(tmp_path / "one.json", [x("ProfilerStep#1", 0, 100, cat="user_annotation")]))
    assert "warm-up" in advise(one, only=["warm-up"]).not_applicable


def test_explain():
    r = CliRunner().invoke(app, ["advise", "--explain", "warm-up"])
    assert r.exit_code == 0 and "measurement distortion" in r.stdout and "one-time cost" in r.stdout
