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


# Steps 1..7: step 1 warm-up (profiled), 2-4 recorded, 5-7 unprofiled (as opscope record's defaults make them).
SLOW = run_json([90, 200, 210, 190, 100, 98, 102], [2, 3, 4], [0, 1, 2, 3, 4])
QUIET = run_json([90, 104, 101, 103, 100, 98, 102], [2, 3, 4], [0, 1, 2, 3, 4])


def trace():
    return make_trace([row("user_annotation", f"ProfilerStep#{n}", 1000 * n, 900) for n in (2, 3, 4)]
                      + [row("cpu_op", "aten::mm", 1000 * n + 10, 500) for n in (2, 3, 4)])


def test_recorded_steps_twice_as_slow_are_inflation():
    inf = step_inflation(SLOW)
    # medians by hand: recorded 190, 200, 210 -> 200 ms; unprofiled 98, 100, 102 -> 100 ms
    assert inf.recorded_ns == 200 * MS and inf.unrecorded_ns == 100 * MS
    assert inf.ratio == 2.0 and inf.inflated
    assert inf.recorded == 3 and inf.unrecorded == 3
    assert "recorded steps ran 2.0x slower than unrecorded ones" in inf.line()


def test_within_noise_is_not_inflation():
    inf = step_inflation(QUIET)
    assert inf.recorded_ns == 103 * MS and inf.unrecorded_ns == 100 * MS and inf.ratio == 1.03
    assert not inf.inflated and "within the noise" in inf.line()


def test_noisy_baseline_raises_the_threshold():
    # unprofiled 60, 100, 140: spread (140 - 60) / 100 = 0.8, so 1.5x is within the noise
    run = run_json([90, 150, 150, 150, 60, 100, 140], [2, 3, 4], [0, 1, 2, 3, 4])
    inf = step_inflation(run)
    assert inf.ratio == 1.5 and inf.noise == 0.8 and not inf.inflated


def test_old_run_json_uses_the_schedule_and_nothing_to_compare_is_none():
    old = dict(SLOW)
    del old["profiled_steps"]
    assert unprofiled_steps(old) == [5, 6, 7]  # torch's schedule(1..7) with wait 1, warmup 1, active 3, repeat 1
    assert step_inflation(old).ratio == 2.0
    assert step_inflation(run_json([90, 200, 210, 190], [2, 3, 4], [0, 1, 2, 3, 4])) is None  # no unprofiled step
    assert step_inflation(None) is None and step_inflation({"steps": 0}) is None
    # a schedule that is not counts reads as the defaults
    odd = dict(old, options={"wait": "1", "warmup": None, "active": True, "repeat": -2})
    assert unprofiled_steps(odd) == [5, 6, 7]


def test_the_runner_step_times_are_the_unprofiled_steps_after_the_first():
    assert runner_step_times(SLOW) == [100 * MS, 98 * MS, 102 * MS]  # steps 5-7
    unprofiled = dict(SLOW, profiled_steps=[])
    assert runner_step_times(unprofiled) == [round(t * MS) for t in (200, 210, 190, 100, 98, 102)]  # steps 2-7
    assert runner_step_times(None) == [] and runner_step_times({"traces": []}) == []


def test_summary_and_advise_say_so_only_when_inflated():
    t = trace()
    said = summary_report(t, run=SLOW)
    fields = dict(said.sections[1].fields)
    assert fields["recording"].startswith("recorded steps ran 2.0x slower")
    assert any("2.0x slower" in n for n in said.sections[0].said)
    ratio = [r for r in said.sections[0].records if r["metric"] == "recorded_vs_unrecorded_step_ratio"]
    assert ratio[0]["value"] == 2.0
    for quiet in (summary_report(t, run=QUIET), summary_report(t)):
        assert "recording" not in dict(quiet.sections[1].fields)
        assert not any("slower" in n for n in quiet.sections[0].said)
    assert any("2.0x slower" in line and "savings" in line for line in advise(t, run=SLOW).window)
    assert not any("slower" in line for line in advise(t, run=QUIET).window)


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
    assert any("2.0x slower" in n for n in steps_report(t, None, run=SLOW).sections[0].said)
    assert not any("slower" in n for n in steps_report(t, None, run=QUIET).sections[0].said)
