"""tune-threads' pure parts (step timing, the thread grid, pooled runs) and the environment a recording keeps;
the recordings themselves are in tests/integration/test_capture_e2e.py."""

from __future__ import annotations

from support.timing import limit

from opscope.capture.runinfo import perf_environment
from opscope.capture.threads import Setting, step_timing, thread_grid


def test_step_timing_leaves_out_warmup_and_slow_steps():
    # median 12; 100 and 30 are > 1.5x it; the first step is also > 1.2x the others' median (11.5)
    t = step_timing([100, 10, 12, 11, 30])
    assert (t.steps, t.used, t.mean_ns, t.median_ns, t.kept) == (5, 3, 11, 11, (10, 12, 11))
    assert step_timing([5]) is None


def test_thread_grid_is_bounded_by_cores():
    assert thread_grid(1) == [Setting(None, None), Setting(1, 1)]
    assert thread_grid(2) == [Setting(None, None), Setting(1, 1), Setting(1, 2), Setting(2, 1), Setting(2, 2)]
    assert sorted({s.intra for s in thread_grid(6) if s.intra}) == [1, 2, 4, 6]


def test_perf_environment_keeps_knobs_not_secrets():
    env = {"OMP_NUM_THREADS": "2", "NCCL_IB_DISABLE": "1", "HF_TOKEN": "x", "NCCL_SOCKET_PASSWORD": "y",
           "HOME": "/root", "CUDA_VISIBLE_DEVICES": "0"}
    assert perf_environment(env) == {"CUDA_VISIBLE_DEVICES": "0", "NCCL_IB_DISABLE": "1", "OMP_NUM_THREADS": "2"}


def test_pooled_runs_drop_each_runs_warmup():
    from opscope.capture.threads import _pooled

    # each run's first step is a warm-up (> 1.2x the others' median); the rest pool to 10, 12, 11, 11
    t = _pooled([[50, 10, 12], [40, 11, 11]])
    assert (t.steps, t.used, t.mean_ns, t.kept) == (6, 4, 11, (10, 12, 11, 11))


BASE = (100, 110, 120, 130, 140)  # median 120; p10 at position 0.4: 104; p90 at 3.6: 136


def timing(kept: tuple[int, ...]):
    from opscope.capture.threads import StepTiming

    return StepTiming(len(kept), len(kept), round(sum(kept) / len(kept)), sorted(kept)[len(kept) // 2], kept)


def compared(*kept: tuple[int, ...]):
    from opscope.capture.threads import compare_settings

    settings = [Setting(None, None), *(Setting(i + 1, 1) for i in range(len(kept) - 1))]
    return compare_settings(settings, [timing(k) for k in kept], [{"intra_op": 2, "inter_op": 2}] * len(kept))


def test_each_setting_has_its_spread_and_its_verdict_against_the_default():
    from opscope.capture.threads import best_setting

    faster = tuple(v - 60 for v in BASE)  # 40..80: differences 10 (j - i) - 60, interval [-90, -30]
    same = tuple(v + 5 for v in BASE)  # 105..145: differences 10 (j - i) + 5, interval [-25, 35]: holds 0
    table = compared(BASE, faster, same, (40, 50, 60))
    rows = table.to_pylist()
    assert (rows[0]["median_step_ns"], rows[0]["p10_step_ns"], rows[0]["p90_step_ns"]) == (120, 104, 136)
    assert rows[0]["speedup"] == 1.0 and rows[0]["verdict"] is None
    # 120 / (120 - 60) = 2, interval 120 / 90 = 1.333 to 120 / 30 = 4
    assert (rows[1]["speedup"], rows[1]["speedup_low"], rows[1]["speedup_high"], rows[1]["verdict"]) == \
        (2.0, 1.333, 4.0, "faster")
    assert (rows[1]["p10_step_ns"], rows[1]["p90_step_ns"]) == (44, 76)
    assert rows[2]["verdict"] == "no difference" and rows[2]["speedup"] == 0.96  # 120 / 125
    # 3 steps: no interval, the medians' ratio 120 / 50; not a candidate even though its median is the lowest
    assert rows[3]["verdict"] == "too few runs to tell" and rows[3]["speedup"] == 2.4
    assert best_setting(table)["setting"] == "intra=1 inter=1"


def test_the_best_is_named_only_when_its_interval_beats_the_default():
    from opscope.capture.reports import tune_threads_report

    beaten = tune_threads_report(compared(BASE, tuple(v - 60 for v in BASE)), cores=2).sections[0].notes[0]
    assert beaten.startswith("best: intra=1 inter=1 (2 intra-op, 2 inter-op threads): median step 60 ns against the "
                             "default's 120 ns, 2.00x its speed (95% CI 1.33x-4.00x")
    # 10% faster by the medians, but the interval holds no change: no setting is named
    close = tune_threads_report(compared(BASE, tuple(v - 12 for v in BASE)), cores=2)
    assert close.sections[0].notes[0].startswith("best: no difference within the noise")
    few = tune_threads_report(compared(BASE, (40, 50, 60)), cores=2).sections[0].notes[0]
    assert few.startswith("best: no difference within the noise") and "too few steps" in few


def test_progress_lines_while_the_profiler_is_busy(monkeypatch):
    import threading

    from opscope.capture import session

    lines: list[str] = []
    first = threading.Event()

    def say(line: str) -> None:
        lines.append(line)
        first.set()

    monkeypatch.setattr(session, "_say", say)
    monkeypatch.setattr(session._Progress, "QUIET_S", 0.01)
    progress = session._Progress()
    with progress.watch("saving a profiled window"):
        assert first.wait(limit(60))  # a busy watch says so while it lasts (no timing asserted: we wait for the line)
    assert lines[0].startswith("saving a profiled window (the profiler's own work, left out of the step times)")
    assert lines[-1].startswith("saving a profiled window: done in")
    lines.clear()
    monkeypatch.setattr(session._Progress, "QUIET_S", 3600.0)
    with session._Progress().watch("quick"):
        pass
    assert lines == []  # a watch that ends before QUIET_S says nothing
