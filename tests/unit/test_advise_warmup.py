"""warm-up rule by hand: slow steps (a saving when they recur) and the warm-up step."""

from __future__ import annotations

import pytest
from support.advise_warmup import flags, steps_trace, warmup
from support.tracefiles import write_trace, x

from opscope.advise import advise
from opscope.ingest import open_trace


def slow(findings):
    return [f for f in findings if "over 1.5x the median step" in f.title]


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


def test_without_steps_it_is_not_applicable(tmp_path):
    t = open_trace(write_trace(tmp_path / "t.json", [x("aten::mm", 0, 10)]))
    assert "two ProfilerSteps" in advise(t, only=["warm-up"]).not_applicable["warm-up"]
    one = open_trace(write_trace(tmp_path / "one.json", [x("ProfilerStep#1", 0, 100, cat="user_annotation")]))
    assert "warm-up" in advise(one, only=["warm-up"]).not_applicable
