"""tune-threads' pure parts (step timing, the thread grid, pooled runs) and the environment a recording keeps;
the recordings themselves are in tests/integration/test_capture_e2e.py."""

from __future__ import annotations

from support.timing import limit

from opscope.capture.runinfo import perf_environment
from opscope.capture.threads import Setting, step_timing, thread_grid


def test_step_timing_leaves_out_warmup_and_slow_steps():
    # median 12; 100 and 30 are > 1.5x it; the first step is also > 1.2x the others' median (11.5)
    t = step_timing([100, 10, 12, 11, 30])
    assert (t.steps, t.used, t.mean_ns, t.median_ns) == (5, 3, 11, 11)
    assert t.spread_pct == round(100 * 1.0 / 11, 1)  # stdev of 10, 12, 11 is 1
    assert step_timing([5]) is None


def test_thread_grid_is_bounded_by_cores():
    assert thread_grid(1) == [Setting(None, None), Setting(1, 1)]
    assert thread_grid(2) == [Setting(None, None), Setting(1, 1), Setting(1, 2), Setting(2, 1), Setting(2, 2)]
    assert sorted({s.intra for s in thread_grid(6) if s.intra}) == [1, 2, 4, 6]


def test_perf_environment_keeps_knobs_not_secrets():
    env = {"OMP_NUM_THREADS": "2", "NCCL_IB_DISABLE": "1", "HF_TOKEN": "x", "NCCL_SOCKET_PASSWORD": "y",
           "HOME": "/root", "CUDA_VISIBLE_DEVICES": "0"}
    assert perf_environment(env) == {"CUDA_VISIBLE_DEVICES": "0", "NCCL_IB_DISABLE": "1", "OMP_NUM_THREADS": "2"}


def test_pooled_runs_drop_each_runs_warmup_and_noise_is_flagged():
    from opscope.capture.threads import _pooled, within_noise

    # each run's first step is a warm-up (> 1.2x the others' median); the rest pool to 10, 12, 11, 11
    t = _pooled([[50, 10, 12], [40, 11, 11]])
    assert (t.steps, t.used, t.mean_ns) == (6, 4, 11)
    assert within_noise({"mean_step_ns": 100, "spread_pct": 5.0}, {"mean_step_ns": 105, "spread_pct": 3.0})
    assert not within_noise({"mean_step_ns": 100, "spread_pct": 2.0}, {"mean_step_ns": 130, "spread_pct": 3.0})


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
