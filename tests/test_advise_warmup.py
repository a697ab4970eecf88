"""warm-up rule: a slow first step (one-time cost, inflated mean) and recurring slow steps (a real saving)."""

from __future__ import annotations

import statistics

import pytest
import tracemutate as tm
from conftest import shared_trace
from tracefiles import write_trace, x

from opscope.advise import advise
from opscope.ingest import open_trace


def test_real_warm_up_step_and_the_mean_it_inflates():
    path = shared_trace("kineto/samples/resnet50_num_workers_4/worker0.pt.trace.json.gz")
    durs = [(n, (e - s) * 1000) for n, s, e in tm.steps(tm.load(path))]
    first, rest = durs[0], [d for _, d in durs[1:]]
    assert first[1] > 1.2 * statistics.median(rest)  # the precondition, from the raw JSON
    f = advise(open_trace(path), only=["warm-up"]).findings
    assert len(f) == 1 and f[0].saving_ns is None
    row = f[0].evidence[0]
    assert (row["step"], row["dur_ns"]) == (first[0], first[1])
    assert row["x_median"] == round(first[1] / statistics.median(rest), 2)
    inflation = statistics.mean(d for _, d in durs) - statistics.mean(rest)
    assert f"mean of these {len(durs)} steps" in f[0].estimate
    assert f"({100 * inflation / statistics.mean(rest):.1f}%)" in f[0].estimate
    assert "ProfilerStep" not in row["extra_in"]


def test_recurring_slow_step_is_a_saving(tmp_path):
    # steps of 3000 (warm-up), 1000, 1000, 2000 (slow: > 1.5 x median 1000), 1000 us; aten::save in step 4
    events, t = [], 0
    for n, dur in enumerate((3000, 1000, 1000, 2000, 1000), start=1):
        events.append(x(f"ProfilerStep#{n}", t, dur, cat="user_annotation"))
        events.append(x("aten::mm", t + 10, 500))
        if n == 4:
            events.append(x("aten::save", t + 600, 1000))
        t += dur
    found = advise(open_trace(write_trace(tmp_path / "t.json", events)), only=["warm-up"]).findings
    warm = [f for f in found if f.title.startswith("Warm-up")]
    slow = [f for f in found if "over 1.5x" in f.title]
    assert len(warm) == 1 and len(slow) == 1
    assert slow[0].saving_ns == (2000 - 1000) * 1000 // 5 and slow[0].saving_pct == pytest.approx(12.5)
    assert slow[0].evidence[0]["step"] == 4 and slow[0].evidence[0]["extra_in"].startswith("aten::save: +1.000 ms")


def test_even_steps_and_no_steps(tmp_path):
    path = shared_trace("kineto/samples/resnet50_num_workers_0/worker0.pt.trace.json.gz")
    assert advise(open_trace(path), only=["warm-up"]).findings == []
    t = open_trace(write_trace(tmp_path / "t.json", [x("aten::mm", 0, 10)]))
    assert "two ProfilerSteps" in advise(t, only=["warm-up"]).not_applicable["warm-up"]
