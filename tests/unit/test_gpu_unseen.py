"""Unseen busy time: a device's first recorded work that waited in the queue long after its launch ran behind work
the trace does not show, so the stretch before it is neither busy nor idle.

Every expected number is worked out by hand from the trace built in the test (times in µs in the trace, ns in the
results); the threshold is 100 µs from the end of the launch call to the work's start.
"""

from __future__ import annotations

from support.gpu import US, analyze, idle_by_cause, kernel, launch, rows_by_stream, step
from support.tracefiles import write_trace, x

from opscope.advise import advise
from opscope.analyses.gpu import GpuAnalysis, step_device_table
from opscope.diff import compare
from opscope.ingest import open_trace


def backlog() -> list[dict]:
    """No steps; the host runs [0, 600). K1 is launched at [50, 60) and starts at 5000: a wait of 4940 µs, longer
    than the 50 µs the trace ran before the launch, so the device was busy with unseen work from 0 to 5000.
    K2 is launched at [100, 110) and runs [6000, 7000) right after K1 [5000, 6000)."""
    return [x("serve", 0, 600), launch(50, 1, dur=10), launch(100, 2, dur=10),
            kernel("k1", 5000, 1000, corr=1), kernel("k2", 6000, 1000, corr=2)]


def test_a_backlog_from_before_the_trace_is_unseen_busy_not_idle(tmp_path):
    a = analyze(tmp_path, backlog())
    unseen = a.work.unseen[0]
    assert (unseen.start, unseen.end, unseen.launch, unseen.wait_ns) == (0, 5000 * US, 50 * US, 4940 * US)
    d0 = rows_by_stream(a)[(0, None)]
    # window [0, 7000) less 5000 unseen: 2000, all of it busy
    assert (d0["busy_ns"], d0["idle_ns"], d0["unseen_busy_ns"], d0["window_ns"], d0["busy_pct"]) == (
        2000 * US, 0, 5000 * US, 2000 * US, 100.0)
    assert sum(idle_by_cause(a).values()) == 0
    assert any("5.000 ms before its first recorded work are unseen_busy" in n for n in a.notes())


def test_a_backlog_is_no_idle_finding(tmp_path):
    trace = open_trace(write_trace(tmp_path / "t.json", backlog()), use_cache=False)
    assert advise(trace, only=["gpu-idle"]).findings == []
    # the same trace with K1 starting right after its launch, [70, 1070): the device idles 7000 - 2000 µs
    prompt = [dict(e, ts=70) if e["name"] == "k1" else e for e in backlog()]
    found = advise(open_trace(write_trace(tmp_path / "p.json", prompt), use_cache=False), only=["gpu-idle"]).findings
    assert len(found) == 1 and found[0].saving_ns == (7000 - 2000) * US


def test_a_wait_shorter_than_the_time_before_the_launch_is_unseen_from_the_launch(tmp_path):
    # the host works [0, 20000); K1 launched at [19000, 19010) starts at 19500 (wait 490 µs < 19000 µs before the
    # launch): unseen [19000, 19500); idle [0, 19000) and [19600, 20000), both with nothing launched: host_wait
    a = analyze(tmp_path, [x("prepare", 0, 20000), launch(19000, 1, dur=10), kernel("k1", 19500, 100, corr=1)])
    d0 = rows_by_stream(a)[(0, None)]
    assert (d0["unseen_busy_ns"], d0["window_ns"], d0["busy_ns"], d0["idle_ns"]) == (
        500 * US, 19500 * US, 100 * US, 19400 * US)
    assert idle_by_cause(a)["host_wait"] == 19400 * US and sum(idle_by_cause(a).values()) == 19400 * US


def test_a_short_wait_is_an_ordinary_launch(tmp_path):
    # K1 launched at [50, 60) starts at 150: 90 µs after the call returned, under the 100 µs threshold
    a = analyze(tmp_path, [x("serve", 0, 300), launch(50, 1, dur=10), kernel("k1", 150, 100, corr=1)])
    assert a.work.unseen == {}
    d0 = rows_by_stream(a)[(0, None)]
    assert (d0["unseen_busy_ns"], d0["window_ns"], d0["idle_ns"]) == (0, 300 * US, 200 * US)


def test_recorded_work_at_the_window_start_leaves_nothing_unseen(tmp_path):
    # K0 runs [0, 100) when the step starts at 50; K1 waits 385 µs after its launch, but the device's first work
    # in the window is K0, which the trace shows
    a = analyze(tmp_path, [step(1, 50, 1000), launch(0, 3, dur=1), kernel("k0", 0, 100, corr=3),
                           launch(10, 1, dur=5), kernel("k1", 400, 500, corr=1)])
    assert a.work.unseen == {}


def stepped(k1_start: int) -> list[dict]:
    """Steps [0, 1000) and [1000, 2000); K1 (500 µs) launched at [10, 15), K2 [1110, 1500) launched at 1100."""
    return [step(1, 0, 1000), step(2, 1000, 1000), launch(10, 1), launch(1100, 2),
            kernel("k1", k1_start, 500, corr=1), kernel("k2", 1110, 390, corr=2)]


def test_steps_and_gpu_leave_unseen_busy_out_of_the_share(tmp_path):
    # K1 starts at 400: a wait of 385 µs, longer than the 10 µs before its launch: unseen [0, 400)
    trace = open_trace(write_trace(tmp_path / "t.json", stepped(400)), use_cache=False)
    table = step_device_table(trace).to_pylist()
    assert [(r["gpu_busy_ns"], r["unseen_busy_ns"], r["gpu_busy_pct"]) for r in table] == [
        (500 * US, 400 * US, round(100 * 500 / 600, 2)), (390 * US, 0, 39.0)]
    d0 = rows_by_stream(GpuAnalysis(trace))[(0, None)]
    assert (d0["window_ns"], d0["busy_ns"], d0["idle_ns"], d0["unseen_busy_ns"]) == (
        1600 * US, 890 * US, 710 * US, 400 * US)


def test_diff_idle_leaves_unseen_busy_out(tmp_path):
    # base: unseen [0, 400), busy 890 of the 2000 µs: idle 710, per step 355; unseen 400, per step 200.
    # new: K1 starts at 20 (a 5 µs wait), same busy time: idle 1110, per step 555; the idle delta is +200 µs,
    # the difference of gpu's idle per step (710 and 1110 over 2 steps)
    tb = open_trace(write_trace(tmp_path / "b.json", stepped(400)), use_cache=False)
    tn = open_trace(write_trace(tmp_path / "n.json", stepped(20)), use_cache=False)
    head = {r["part"]: r for r in compare(tb, tn).headline}
    assert (head["idle"]["base_ns"], head["idle"]["new_ns"], head["idle"]["delta_ns"]) == (
        355 * US, 555 * US, 200 * US)
    assert (head["unseen_busy"]["base_ns"], head["unseen_busy"]["new_ns"]) == (200 * US, 0)

    def gpu_idle_per_step(trace):
        return rows_by_stream(GpuAnalysis(trace))[(0, None)]["idle_ns"] // 2

    assert head["idle"]["delta_ns"] == gpu_idle_per_step(tn) - gpu_idle_per_step(tb)


def test_one_devices_unseen_stretch_under_anothers_work_keeps_the_share_within_100(tmp_path):
    # device 0 runs [0, 1000) from a prompt launch; device 1's first kernel waits 585 µs, so [0, 600) is unseen
    # on device 1 while device 0 is busy: busy 1000 of a 1000 µs step is 100%, not 1000 / (1000 - 600)
    events = [step(1, 0, 1000), launch(0, 1, dur=1), kernel("k0", 0, 1000, corr=1),
              launch(10, 2, dur=5), kernel("k1", 600, 100, corr=2, device=1)]
    trace = open_trace(write_trace(tmp_path / "t.json", events), use_cache=False)
    [row] = step_device_table(trace).to_pylist()
    assert (row["gpu_busy_ns"], row["unseen_busy_ns"], row["gpu_busy_pct"]) == (1000 * US, 600 * US, 100.0)
