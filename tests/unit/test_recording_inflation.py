"""Recorded vs unrecorded step times of a recording (run.json), and where the inflation is said."""

from __future__ import annotations

from support import make_trace, row

from opscope.advise import advise
from opscope.analyses.recording import runner_step_times, step_inflation, unprofiled_steps
from opscope.analyses.reports import summary_report
from opscope.analyses.summary import summarize
from opscope.capture.session import StepClock

MS = 1_000_000


def run_json(times_ms: list[float], recorded: list[int], profiled: list[int] | None) -> dict:
    run = {"step_times_ns": [round(t * MS) for t in times_ms], "recorded_steps": recorded, "traces": ["t.json"],
           "options": {"wait": 1, "warmup": 1, "active": 3, "repeat": 1}}
    if profiled is not None:
        run["profiled_steps"] = profiled
    return run


# Steps 1..9: step 1 warm-up (profiled), 2-4 recorded, 5-9 unprofiled (as opscope record's defaults make them).
UNRECORDED = [100, 98, 102, 99, 101]  # median 100
SLOW = run_json([90, 200, 210, 190, *UNRECORDED], [2, 3, 4], [0, 1, 2, 3, 4])
QUIET = run_json([90, 104, 101, 103, *UNRECORDED], [2, 3, 4], [0, 1, 2, 3, 4])


def trace():
    return make_trace([row("user_annotation", f"ProfilerStep#{n}", 1000 * n, 900) for n in (2, 3, 4)]
                      + [row("cpu_op", "aten::mm", 1000 * n + 10, 500) for n in (2, 3, 4)])


def test_recorded_steps_twice_as_slow_are_inflation():
    inf = step_inflation(SLOW)
    # medians by hand: recorded 190, 200, 210 -> 200 ms; unprofiled 98, 99, 100, 101, 102 -> 100 ms
    assert inf.recorded_ns == 200 * MS and inf.unrecorded_ns == 100 * MS
    assert inf.ratio == 2.0 and inf.recorded == 3 and inf.unrecorded == 5
    # 3 against 5: the 95% interval is the whole range of the 15 pairwise differences, 190 - 102 to 210 - 98
    assert (inf.shift.low, inf.shift.high) == (88 * MS, 112 * MS)
    assert inf.verdict == "slower" and inf.inflated
    assert inf.line().startswith("recorded steps ran 2.00x the time of unrecorded ones (median 200.000 ms over 3 "
                                 "recorded steps vs 100.000 ms over 5 unrecorded steps; 95% CI of the difference "
                                 "+88.000 ms..+112.000 ms): slower, so this recording's times are inflated by the "
                                 "profiler")


def test_an_interval_holding_no_change_is_not_inflation():
    inf = step_inflation(QUIET)
    # recorded 101, 103, 104 -> 103; the differences run from 101 - 102 = -1 to 104 - 98 = 6 ms: they hold 0
    assert inf.recorded_ns == 103 * MS and inf.unrecorded_ns == 100 * MS and inf.ratio == 1.03
    assert (inf.shift.low, inf.shift.high) == (-1 * MS, 6 * MS)
    assert inf.verdict == "no difference" and not inf.inflated
    assert inf.line().endswith(": no difference within the noise")


def test_recorded_steps_far_faster_are_not_within_the_noise_nor_the_profilers_doing():
    # 0.06x and 0.35x: the recorded steps ran faster than every unrecorded one; neither is noise, neither inflation
    for recorded, ratio in (([6, 6, 6], "0.06x"), ([35, 34, 36], "0.35x")):
        inf = step_inflation(run_json([90, *recorded, *UNRECORDED], [2, 3, 4], [0, 1, 2, 3, 4]))
        assert inf.verdict == "faster" and not inf.inflated
        line = inf.line()
        assert line.startswith(f"recorded steps ran {ratio} the time of unrecorded ones")
        assert "faster, which the profiler does not cause" in line and "noise" not in line


def test_too_few_steps_give_no_judgement():
    # 3 recorded against 3 unrecorded: no ordering of 6 steps is rarer than 1 in 20, so no 95% interval exists
    inf = step_inflation(run_json([90, 200, 210, 190, 100, 98, 102], [2, 3, 4], [0, 1, 2, 3, 4]))
    assert inf.ratio == 2.0 and inf.shift is None and inf.verdict == "too few runs to tell" and not inf.inflated
    assert "too few steps to tell" in inf.line() and "inflated" not in inf.line()


def test_old_run_json_uses_the_schedule_and_nothing_to_compare_is_none():
    old = dict(SLOW)
    del old["profiled_steps"]
    assert unprofiled_steps(old) == [5, 6, 7, 8, 9]  # torch's schedule(1..9) with wait 1, warmup 1, active 3, repeat 1
    assert step_inflation(old).ratio == 2.0
    assert step_inflation(run_json([90, 200, 210, 190], [2, 3, 4], [0, 1, 2, 3, 4])) is None  # no unprofiled step
    assert step_inflation(None) is None and step_inflation({"steps": 0}) is None
    # a schedule that is not counts reads as the defaults
    odd = dict(old, options={"wait": "1", "warmup": None, "active": True, "repeat": -2})
    assert unprofiled_steps(odd) == [5, 6, 7, 8, 9]


def test_the_runner_step_times_are_the_unprofiled_steps_after_the_first():
    assert runner_step_times(SLOW) == [v * MS for v in UNRECORDED]  # steps 5-9
    unprofiled = dict(SLOW, profiled_steps=[])
    assert runner_step_times(unprofiled) == [round(t * MS) for t in (200, 210, 190, *UNRECORDED)]  # steps 2-9
    assert runner_step_times(None) == [] and runner_step_times({"traces": []}) == []


def test_summary_and_advise_say_so_only_when_inflated():
    t = trace()
    said = summary_report(t, run=SLOW)
    fields = dict(said.sections[1].fields)
    assert fields["recording"].startswith("recorded steps ran 2.00x the time")
    assert any("2.00x the time" in n for n in said.sections[0].said)
    ratio = [r for r in said.sections[0].records if r["metric"] == "recorded_vs_unrecorded_step_ratio"]
    assert ratio[0]["value"] == 2.0
    for quiet in (summary_report(t, run=QUIET), summary_report(t)):
        assert "recording" not in dict(quiet.sections[1].fields)
        assert not any("recorded steps ran" in n for n in quiet.sections[0].said)
    assert any("2.00x the time" in line and "savings" in line for line in advise(t, run=SLOW).window)
    assert not any("recorded steps ran" in line for line in advise(t, run=QUIET).window)


def test_step_clock_leaves_the_profilers_work_out():
    clock = StepClock(boundaries_ns=[100, 300, 1300, 1500], resumed_ns=[100, 1000, 1300, 1500])
    # step 1 ran 300 - 100 = 200; step 2 from the end of the profiler's work (1000) to 1300 = 300; step 3 = 200
    assert clock.durations_ns() == [200, 300, 200]
    assert clock.profiler_ns() == 700


def test_wall_time_leaves_the_profilers_markers_out():
    t = make_trace([row("cpu_op", "aten::mm", 0, 100), row("profiler", "PyTorch Profiler (0)", 0, 100),
                    row("marker", "Record Window End", 5000, 0)])
    assert summarize(t).wall_ns == 100_000  # 0..100 µs, not to the marker at 5 ms


def test_steps_table_notes_inflation():
    from opscope.analyses.reports import steps_report

    t = trace()
    assert any("2.00x the time" in n for n in steps_report(t, None, run=SLOW).sections[0].said)
    assert not any("recorded steps ran" in n for n in steps_report(t, None, run=QUIET).sections[0].said)
