"""The advice framework (registry, ranking) and the gpu-idle rule on hand-built traces."""

from __future__ import annotations

import pytest
from support import make_trace, row
from support.tracefiles import small_gpu_trace, write_trace, x

from opscope.advise import advise, all_rules
from opscope.advise.finding import Finding, ranked
from opscope.ingest import open_trace


def test_every_rule_has_an_id_title_explanation_and_its_own_module():
    rules = all_rules()
    ids = [r.id for r in rules]
    assert len(ids) == len(set(ids))
    for r in rules:
        assert r.title and len(r.explain) > 200, r.id
        assert r.check.__module__.startswith("opscope.advise.rules."), r.id
    assert "gpu-idle" in ids


def test_ranking_puts_the_largest_saving_first_and_unestimated_last():
    def f(rule, saving):
        return Finding(rule, rule, saving, None, "", "")

    order = [x.rule for x in ranked([f("a", 5), f("b", None), f("c", 50), f("d", 0)])]
    assert order == ["c", "a", "d", "b"]


def test_gpu_idle_on_a_hand_built_trace(tmp_path):
    # small_gpu_trace: steps [0, 1000) and [1000, 3000) us; kernels [150, 350), [1200, 1260) and [2950, 3050),
    # the last clipped at the window's end (3000). Busy = 200 + 60 + 50 = 310 us of 3000 -> idle 2690 us.
    t = open_trace(write_trace(tmp_path / "t.json", small_gpu_trace()))
    found = advise(t, only=["gpu-idle"]).findings
    assert len(found) == 1
    f = found[0]
    assert f.saving_ns == 2_690_000 // 2  # per step: 2 steps
    assert f.saving_pct == pytest.approx(100 * 1_345_000 / 1_500_000, abs=0.01)
    gaps = [e for e in f.evidence if e["what"] == "gap"]
    # longest gap: [1260, 2950) us, in step 2 (starts at 1000): 260 us into it
    assert (gaps[0]["step"], gaps[0]["at_ns"], gaps[0]["idle_ns"]) == (2, 260_000, 1_690_000)
    # then [350, 1000) up to step 2's start and beyond: the gap [350, 1200) spans the step boundary
    assert (gaps[1]["step"], gaps[1]["at_ns"], gaps[1]["idle_ns"]) == (1, 350_000, 850_000)
    # what the host did meanwhile (step markers aside). Gap 1: conv2d [1100, 1300) covers 40 us of it and a launch
    # [1400, 1410) 10 us: 50 of 1690 us. Gap 2: conv2d [100, 400) 50 us, relu [500, 600) 100 us, conv2d
    # [1100, 1300) 100 us (its launch inside it): 250 of 850 us; relu and the second conv2d tie, relu is shorter.
    assert (gaps[0]["host_busy_pct"], gaps[0]["host_op"]) == (round(100 * 50 / 1690, 2), "aten::conv2d")
    assert (gaps[1]["host_busy_pct"], gaps[1]["host_op"]) == (round(100 * 250 / 850, 2), "aten::relu")
    # a gap's share is of the step it names: gap 1 lies inside step 2 (2000 us): 1690 / 2000; gap 2 runs past
    # step 1's end (1000 us): only its 650 us inside step 1 count
    assert (gaps[0]["in_step_ns"], gaps[0]["step_pct"]) == (1_690_000, 84.5)
    assert (gaps[1]["in_step_ns"], gaps[1]["step_pct"]) == (650_000, 65.0)
    causes = sum(e["idle_ns"] for e in f.evidence if e["what"].startswith("idle:"))
    assert abs(causes - 1_345_000) <= 3  # the per-cause rows add up to the idle time (rounded per row)
    # a cause's share is of the window (3000 us); together they are the idle time's: 2690 of 3000 us
    shares = sum(e["step_pct"] for e in f.evidence if e["what"].startswith("idle:"))
    assert shares == pytest.approx(100 * 2690 / 3000, abs=0.02)


def _kernel(ts_us: float, dur_us: float) -> dict:
    return row("kernel", "k", ts_us, dur_us, pid=0, tid=7, device=0, stream=7)


def test_gpu_idle_gap_shares_are_of_the_step_they_name():
    # steps [0, 3000), [3000, 3500), [3500, 4000) us: the mean step is 4000/3 = 1333.3 us. Kernels [0, 100),
    # [2800, 3200), [3700, 3800). Gaps: [100, 2800) = 2700 us in step 1, which a share of the mean step made
    # 202.5%; [3200, 3700) = 500 us from step 2 into step 3, of which 300 us are in step 2 (of 500);
    # [3800, 4000) = 200 us in step 3 (of 500).
    t = make_trace([row("user_annotation", f"ProfilerStep#{n}", ts, dur)
                    for n, ts, dur in ((1, 0, 3000), (2, 3000, 500), (3, 3500, 500))]
                   + [_kernel(0, 100), _kernel(2800, 400), _kernel(3700, 100)])
    f = advise(t, only=["gpu-idle"]).findings[0]
    gaps = [(e["step"], e["at_ns"], e["idle_ns"], e["in_step_ns"], e["step_pct"])
            for e in f.evidence if e["what"] == "gap"]
    assert gaps == [(1, 100_000, 2_700_000, 2_700_000, 90.0), (2, 200_000, 500_000, 300_000, 60.0),
                    (3, 300_000, 200_000, 200_000, 40.0)]
    assert all(e["step_pct"] <= 100 for e in f.evidence)


def test_gpu_idle_gap_between_steps_names_no_step_and_no_share():
    # steps [0, 1000) and [2000, 3000) us with nothing between them; kernels [0, 100), [2900, 3000): the gap
    # [100, 2900) starts in step 1 and runs through the time between the steps: 900 us of step 1's 1000.
    # Kernels [0, 1000) and [1500, 3000): the gap [1000, 1500) starts between the steps: no step, no share.
    # The causes' shares are of the window (3000 us), which a share of the mean step (1000 us) made 140%.
    steps = [row("user_annotation", "ProfilerStep#1", 0, 1000), row("user_annotation", "ProfilerStep#2", 2000, 1000)]
    f = advise(make_trace(steps + [_kernel(0, 100), _kernel(2900, 100)]), only=["gpu-idle"]).findings[0]
    gap = next(e for e in f.evidence if e["what"] == "gap")
    assert (gap["step"], gap["idle_ns"], gap["in_step_ns"], gap["step_pct"]) == (1, 2_800_000, 900_000, 90.0)
    shares = [e["step_pct"] for e in f.evidence if e["what"].startswith("idle:")]
    assert sum(shares) == pytest.approx(100 * 2800 / 3000, abs=0.02) and max(shares) <= 100
    # the finding's saving is per step of the window (3000 us / 2 steps = 1500 us a step), never over 100% of it:
    # a share of the mean step (1000 us) made it 140%
    assert f.saving_pct == pytest.approx(100 * f.saving_ns / 1_500_000, abs=0.01) and f.saving_pct <= 100
    g = advise(make_trace(steps + [_kernel(0, 1000), _kernel(1500, 1500)]), only=["gpu-idle"]).findings[0]
    gap = next(e for e in g.evidence if e["what"] == "gap")
    assert (gap["step"], gap["at_ns"], gap["idle_ns"], gap["in_step_ns"], gap["step_pct"]) == \
        (None, 1_000_000, 500_000, None, None)


def test_gpu_idle_gap_share_without_steps_is_of_the_window():
    # no steps: the window is the trace, [0, 1000) us; kernels [0, 100) and [900, 1000): the gap [100, 900)
    f = advise(make_trace([_kernel(0, 100), _kernel(900, 100)]), only=["gpu-idle"]).findings[0]
    gap = next(e for e in f.evidence if e["what"] == "gap")
    assert (gap["step"], gap["at_ns"], gap["in_step_ns"], gap["step_pct"]) == (None, 100_000, 800_000, 80.0)


def test_gpu_idle_stays_silent_on_a_busy_device(tmp_path):
    # one step of 1000 us with kernels covering 950 us of it: idle 5% < 10%
    events = [x("ProfilerStep#1", 0, 1000, cat="user_annotation"),
              x("cudaLaunchKernel", 1, 2, cat="cuda_runtime", correlation=1),
              x("k", 20, 950, cat="kernel", pid=0, tid=7, device=0, stream=7, correlation=1)]
    t = open_trace(write_trace(tmp_path / "t.json", events))
    assert advise(t, only=["gpu-idle"]).findings == []


def test_gpu_idle_is_not_applicable_without_gpu(tmp_path):
    t = open_trace(write_trace(tmp_path / "t.json", [x("ProfilerStep#1", 0, 100, cat="user_annotation"),
                                                     x("aten::mm", 10, 50)]))
    a = advise(t, only=["gpu-idle"])
    assert a.findings == [] and "no GPU" in a.not_applicable["gpu-idle"]
