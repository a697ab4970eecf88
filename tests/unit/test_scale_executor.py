"""The executor seam: the in-process executor and the local pool run module-level tasks, report each failure on
its own item (a raise, a worker that dies) and never hang."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from support import scale
from support.scale import bounded
from support.timing import limit

from opscope.errors import UsageError
from opscope.scale.executor import InProcess, LocalPool, TaskOutcome, default_workers, executor_for, peak_rss_bytes

KEYS = [f"rank {i} (rank-{i}.json)" for i in range(6)]
TRACE_ERROR = "rank-3.json: truncated JSON at byte 120 (the file was cut short)"


@pytest.fixture
def pool():
    with LocalPool(2, max_tasks_per_child=4) as p:
        yield p


def values(outcomes: list[TaskOutcome]) -> list:
    return [o.value for o in outcomes]


@pytest.mark.parametrize("make", [InProcess, lambda: LocalPool(2)], ids=["in-process", "pool"])
def test_values_in_the_order_of_items(make):
    with make() as ex:
        outcomes = bounded(lambda: ex.run(scale.square, [5, 1, 4, 2, 3, 0], KEYS))
    assert values(outcomes) == [25, 1, 16, 4, 9, 0]
    assert [o.key for o in outcomes] == KEYS
    assert all(o.ok and o.attempts == 1 and o.seconds is not None for o in outcomes)


@pytest.mark.parametrize("make", [InProcess, lambda: LocalPool(2)], ids=["in-process", "pool"])
def test_a_task_that_raises_is_its_items_error_and_the_others_go_on(make):
    with make() as ex:
        outcomes = bounded(lambda: ex.run(scale.raise_on_3, list(range(6)), KEYS))
    assert values(outcomes) == [0, 1, 4, None, None, 25]
    assert outcomes[3].error == TRACE_ERROR  # opscope's own error as it is: it already names the file
    assert outcomes[4].error == "ValueError: four is not allowed"  # others: type and first line
    assert [o.error is None for o in outcomes] == [True, True, True, False, False, True]
    assert all(o.attempts == 1 for o in outcomes)  # a raise is the file's fault: not retried


def test_progress_is_reported_as_tasks_finish(pool):
    seen: list[tuple[int, int]] = []
    bounded(lambda: pool.run(scale.square, list(range(5)), KEYS[:5], progress=lambda d, t: seen.append((d, t))))
    assert seen == [(1, 5), (2, 5), (3, 5), (4, 5), (5, 5)]


def test_workers_are_replaced_after_max_tasks_per_child(pool):
    outcomes = bounded(lambda: pool.run(scale.pid_and_cache, list(range(10)), [str(i) for i in range(10)]))
    pids = [o.value[1] for o in outcomes]
    assert os.getpid() not in pids
    assert max(pids.count(p) for p in set(pids)) <= 4  # no worker ran more than its 4 tasks
    assert len(set(pids)) >= 3  # 10 tasks, 4 a process: at least 3 processes
    assert pool.processes_started == len(set(pids))


def test_a_worker_that_always_dies_is_retried_once_then_named(pool):
    outcomes = bounded(lambda: pool.run(scale.die_on_2, list(range(6)), KEYS))
    assert values(outcomes) == [0, 1, None, 9, 16, 25]
    assert outcomes[2].key == KEYS[2]
    assert outcomes[2].error == "the worker running it died (exit code 9), retried 1 time(s)"
    assert outcomes[2].attempts == 2
    assert [o.attempts for i, o in enumerate(outcomes) if i != 2] == [1] * 5  # bystanders are not rerun
    # the pool survives: the next run works with fresh workers
    assert values(bounded(lambda: pool.run(scale.square, [7, 8], KEYS[:2]))) == [49, 64]


def test_a_worker_killed_by_a_signal_says_so(pool):
    outcomes = bounded(lambda: pool.run(scale.sigkill_on_1, [0, 1, 2], KEYS[:3]))
    assert values(outcomes) == [0, None, 4]
    assert outcomes[1].error == "the worker running it died (killed by signal 9, SIGKILL), retried 1 time(s)"


def test_a_worker_that_dies_once_is_retried_and_succeeds(pool, tmp_path):
    marker = tmp_path / "died"
    items = [(0, ""), (1, str(marker)), (2, ""), (3, "")]
    outcomes = bounded(lambda: pool.run(scale.die_once, items, KEYS[:4]))
    assert values(outcomes) == [0, 1, 4, 9]
    assert [o.attempts for o in outcomes] == [1, 2, 1, 1]
    assert all(o.ok for o in outcomes)
    assert marker.read_text() == "died once"  # it did die the first time


def test_one_worker_and_every_task_dying_still_ends(tmp_path):
    with LocalPool(1) as pool:
        outcomes = bounded(lambda: pool.run(scale.die_on_2, [2, 2, 2], KEYS[:3]))
    assert [o.error for o in outcomes] == ["the worker running it died (exit code 9), retried 1 time(s)"] * 3
    assert pool.processes_started == 6  # each item: its run and its one retry, each in a fresh worker


def test_a_task_that_cannot_be_pickled_is_its_items_error(pool):
    outcomes = bounded(lambda: pool.run(lambda x: x, [1], KEYS[:1]))
    assert outcomes[0].error is not None
    assert outcomes[0].error.startswith("the task cannot be sent to a worker: ")
    assert outcomes[0].attempts == 0
    # an item that cannot be sent beside one that can: each gets its own outcome
    mixed = bounded(lambda: pool.run(scale.square, [3, lambda: 0], KEYS[:2]))
    assert mixed[0].value == 9 and mixed[1].error is not None and "cannot be sent" in mixed[1].error


def test_workers_get_the_callers_cache_directory_on_every_run(pool, tmp_path, monkeypatch):
    first = tmp_path / "first"
    monkeypatch.setenv("OPSCOPE_CACHE_DIR", str(first))
    assert {o.value[2] for o in bounded(lambda: pool.run(scale.pid_and_cache, [1, 2], KEYS[:2]))} == {str(first)}
    # the same live workers, a new setting in the caller: the workers follow (a forkserver or a worker keeps
    # the environment it started with, so it is sent with each task)
    second = tmp_path / "second"
    monkeypatch.setenv("OPSCOPE_CACHE_DIR", str(second))
    assert {o.value[2] for o in bounded(lambda: pool.run(scale.pid_and_cache, [1, 2], KEYS[:2]))} == {str(second)}


def test_task_seconds_are_measured_in_the_worker(pool):
    outcomes = bounded(lambda: pool.run(scale.sleep_then_square, [3], KEYS[:1]))
    assert outcomes[0].value == 9
    assert outcomes[0].seconds is not None and 0.2 <= outcomes[0].seconds < limit(5)


def test_keys_must_match_items():
    with pytest.raises(ValueError, match="3 items but 2 keys"):
        InProcess().run(scale.square, [1, 2, 3], ["a", "b"])


def test_no_items_no_outcomes(pool):
    assert pool.run(scale.square, [], []) == []


def test_executor_for_picks_the_executor():
    with executor_for(workers=0) as ex:
        assert isinstance(ex, InProcess)
    with executor_for(workers=3) as ex:
        assert isinstance(ex, LocalPool) and ex.workers == 3 and ex.name == "local pool (3 workers)"
    with executor_for() as ex:
        assert ex.workers == default_workers() == len(os.sched_getaffinity(0))
    assert LocalPool(1).name == "local pool (1 worker)"
    with pytest.raises(UsageError, match="--workers must be 0"):
        executor_for(workers=-1)


def test_dask_without_the_extra_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed now raises ImportError
    with pytest.raises(UsageError, match=r"^--dask needs the dask extra: pip install 'opscope\[dask\]'$"):
        executor_for(dask="local:2")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmHWM from /proc (Linux)")
def test_peak_rss_is_the_kernels_high_water_mark():
    block = bytearray(64 << 20)  # raise the high-water mark well above noise
    peak = peak_rss_bytes()
    hwm = next(int(line.split()[1]) * 1024 for line in Path("/proc/self/status").read_text().splitlines()
               if line.startswith("VmHWM:"))
    assert abs(peak - hwm) < (4 << 20)
    assert peak > len(block)


def test_workers_that_cannot_start_end_the_item_not_loop_forever():
    class StillbornPool(LocalPool):
        def _spawn(self):
            worker = super()._spawn()
            worker.proc.kill()  # as a worker whose interpreter cannot start would
            worker.proc.join()
            return worker

    with StillbornPool(2) as pool:
        outcomes = bounded(lambda: pool.run(scale.square, [1, 2], KEYS[:2]), 30)
    assert [o.error for o in outcomes] == ["the worker running it died (killed by signal 9, SIGKILL), "
                                           "retried 1 time(s)"] * 2
    assert [o.attempts for o in outcomes] == [2, 2]
