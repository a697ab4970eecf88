"""The executor on a real local Dask cluster: the same tasks give the local pool's outcomes, a worker that dies
is retried by the scheduler, one that always dies ends as its item's error, and a bad address is one line."""

from __future__ import annotations

import re
import time

import pytest
from support import scale
from support.scale import bounded

from opscope.errors import UsageError
from opscope.scale import executor
from opscope.scale.executor import DaskExecutor, LocalPool, executor_for

distributed = pytest.importorskip("distributed", reason="dask not installed")
psutil = pytest.importorskip("psutil", reason="psutil (a dependency of distributed) not installed")

KEYS = [f"rank {i} (rank-{i}.json)" for i in range(6)]


@pytest.fixture(scope="module")
def dask_local():
    with executor_for(dask="local:2") as ex:
        yield ex


def summary(outcomes):
    return [(o.key, o.value, o.error) for o in outcomes]


def test_local_cluster_is_named_and_sized(dask_local):
    assert isinstance(dask_local, DaskExecutor)
    assert dask_local.name == "Dask local cluster (2 workers)"
    assert dask_local.workers == 2
    # every server it started (scheduler, its HTTP server, nannies, workers) listens on this machine only
    assert dask_local.client.scheduler.address.startswith("tcp://127.0.0.1:")
    me = psutil.Process()
    listening = [(p.pid, c.laddr) for p in [me, *me.children(recursive=True)]
                 for c in p.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]
    assert len(listening) >= 2 + 2 * 2  # scheduler and its HTTP server, a nanny and a worker for each of 2
    assert {laddr.ip for _, laddr in listening} == {"127.0.0.1"}


@pytest.mark.parametrize("fn", [scale.square, scale.raise_on_3], ids=["square", "raise_on_3"])
def test_same_outcomes_as_the_local_pool(dask_local, fn):
    on_dask = bounded(lambda: dask_local.run(fn, list(range(6)), KEYS))
    with LocalPool(2) as pool:
        on_pool = bounded(lambda: pool.run(fn, list(range(6)), KEYS))
    assert summary(on_dask) == summary(on_pool)
    assert [o.attempts for o in on_dask] == [1] * 6


def test_a_task_that_raises_is_reported(dask_local):
    outcomes = bounded(lambda: dask_local.run(scale.raise_on_3, list(range(6)), KEYS))
    assert [o.value for o in outcomes] == [0, 1, 4, None, None, 25]
    assert outcomes[3].error == "rank-3.json: truncated JSON at byte 120 (the file was cut short)"
    assert outcomes[4].error == "ValueError: four is not allowed"


def test_progress_counts_every_task(dask_local):
    seen: list[tuple[int, int]] = []
    bounded(lambda: dask_local.run(scale.square, list(range(4)), KEYS[:4], progress=lambda d, t: seen.append((d, t))))
    assert seen == [(1, 4), (2, 4), (3, 4), (4, 4)]


def test_a_worker_that_dies_once_is_retried_and_succeeds(dask_local, tmp_path):
    marker = tmp_path / "died"
    items = [(0, ""), (1, str(marker)), (2, ""), (3, "")]
    outcomes = bounded(lambda: dask_local.run(scale.die_once, items, KEYS[:4]), 120)
    assert [o.value for o in outcomes] == [0, 1, 4, 9]
    assert all(o.ok for o in outcomes)
    assert outcomes[1].attempts == 2
    assert marker.read_text() == "died once"


def test_a_worker_that_always_dies_ends_as_its_items_error(dask_local):
    outcomes = bounded(lambda: dask_local.run(scale.die_on_2, list(range(6)), KEYS), 120)
    assert [o.value for o in outcomes] == [0, 1, None, 9, 16, 25]
    assert outcomes[2].key == KEYS[2]
    # the scheduler's allowed-failures (3): four workers died running it, the last with KilledWorker
    assert outcomes[2].error == "the worker running it died (Dask KilledWorker), retried 3 time(s)"
    assert outcomes[2].attempts == 4
    # the cluster is whole again: the nannies restarted the workers
    assert [o.value for o in bounded(lambda: dask_local.run(scale.square, [5, 6], KEYS[:2]), 60)] == [25, 36]


def test_workers_get_the_callers_cache_directory(dask_local, cache_dir):
    outcomes = bounded(lambda: dask_local.run(scale.pid_and_cache, [1, 2, 3], KEYS[:3]))
    assert {o.value[2] for o in outcomes} == {str(cache_dir.absolute())}


def test_an_existing_scheduler_by_its_address():
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address="127.0.0.1:0") as cluster:
        with executor_for(dask=cluster.scheduler_address) as ex:
            assert ex.name == f"Dask cluster {cluster.scheduler_address} (1 worker)"
            assert ex.workers == 1
            outcomes = bounded(lambda: ex.run(scale.raise_on_3, [2, 3], KEYS[:2]))
        assert [o.value for o in outcomes] == [4, None]
        assert outcomes[1].error == "rank-3.json: truncated JSON at byte 120 (the file was cut short)"
        # the executor closed only its client: the cluster it did not start is still there
        assert cluster.scheduler_info["workers"]


@pytest.fixture
def short_connect_timeout(monkeypatch):
    """2 s instead of the 10 s a user gets: the same path, a faster test."""
    monkeypatch.setattr(executor, "DASK_CONNECT_TIMEOUT_S", 2)


def test_a_scheduler_without_workers_is_one_line_not_a_hang(short_connect_timeout):
    with distributed.LocalCluster(n_workers=0, processes=True, host="127.0.0.1",
                                  dashboard_address="127.0.0.1:0") as cluster:
        start = time.monotonic()
        with pytest.raises(UsageError) as err:
            bounded(lambda: executor_for(dask=cluster.scheduler_address), 60)
        assert time.monotonic() - start < 10
    assert str(err.value) == (f"--dask {cluster.scheduler_address}: the scheduler there has no workers; start some "
                              f"(dask worker {cluster.scheduler_address}) or use --dask local:N")


def test_a_bad_address_is_one_line_within_seconds(short_connect_timeout):
    start = time.monotonic()
    with pytest.raises(UsageError) as err:
        bounded(lambda: executor_for(dask="tcp://127.0.0.1:9"), 60)  # discard port: nothing listens
    assert time.monotonic() - start < 10
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("--dask tcp://127.0.0.1:9: cannot reach a Dask scheduler there (")
    assert message.endswith("or use --dask local:N")


@pytest.mark.parametrize("spec", ["local:0", "local:two", "local"])
def test_a_bad_local_count_is_a_usage_error(spec):
    with pytest.raises(UsageError, match=re.escape("give the number of local workers, e.g. --dask local:4")):
        executor_for(dask=spec)
