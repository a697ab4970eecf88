"""Edges the graph takes from wait calls whose device record the trace lacks, and from threads handed their work by
another thread; the host calls that block on the device under their HIP names. Each value computed by hand, in C and
by the Python definitions."""

from __future__ import annotations

import pyarrow as pa
import pytest
from support import make_trace, row

from opscope.analyses.critical_path import step_path
from opscope.analyses.depgraph import LATENCY_CAP_NS, NONE, ON_AFTER, UNEXPLAINED, dependency_graph
from opscope.analyses.replay import AFTER, replay
from opscope.analyses.sync import blocking_calls

BOTH = pytest.mark.parametrize("native", ["1", "0"])


def _nodes(trace, graph) -> dict[str, int]:
    names = trace.select(["name"])["name"].to_pylist()
    return {names[graph.row[n]]: n for n in range(len(graph)) if graph.row[n] != NONE}


def _wait_call_trace(wait_at: float = 5):
    # a on stream 7 (launched at 0, runs 10-100); a wait call; d on stream 20 (launched at 8-10, starts at 180 on an
    # idle stream): no Stream Wait Event record
    return make_trace([
        row("runtime", "cudaLaunchKernel", 0, 2, correlation=1),
        row("runtime", "cudaStreamWaitEvent", wait_at, 1, correlation=2),
        row("runtime", "cudaLaunchKernel", 8, 2, correlation=3),
        row("kernel", "a", 10, 90, correlation=1, pid=0, tid=7, device=0, stream=7),
        row("kernel", "d", 180, 5, correlation=3, pid=0, tid=20, device=0, stream=20),
    ])


@BOTH
def test_a_wait_call_without_its_record_ties_the_work_to_the_other_streams_work(native, monkeypatch):
    monkeypatch.setenv("OPSCOPE_NATIVE", native)
    trace = _wait_call_trace()
    graph = dependency_graph(trace)
    node = _nodes(trace, graph)
    d, a = node["d"], node["a"]
    # d started 80 after a ended (100 -> 180): 30 beyond the cap unexplained, on that edge; its launch (ended at 10)
    # no longer binds (its lag kept to the cap)
    assert graph.after[d] == a and graph.after_lag[d] == 80_000
    assert graph.unexplained[d] == 30_000 and graph.unexplained_on[d] == ON_AFTER
    assert graph.extra_lag[d] == LATENCY_CAP_NS
    run = replay(graph)
    assert run.bound_by[d] == AFTER and run.start[d] - graph.origin == 180_000
    slower = replay(graph, [2.0 if n == a else 1.0 for n in range(len(graph))])
    assert slower.start[d] - graph.origin == 270_000  # a ends at 190
    no_lag = replay(graph, None, [0.0 if n == d else 1.0 for n in range(len(graph))])
    assert no_lag.start[d] - graph.origin == 150_000  # 100 + the 50 of the cap
    # the path from a's launch to d's end: only the 30 beyond the cap is unexplained (before: d's 170 after its
    # launch, less the 50 of the cap)
    first = graph.extra[a]
    path = step_path(graph, run, None, first, d)
    assert path.length == 185_000 and path.categories[UNEXPLAINED] == 30_000


@BOTH
def test_a_wait_call_after_the_other_work_was_launched_only(native, monkeypatch):
    """A call made before a was launched cannot have waited for it: d keeps its launch edge and its lag."""
    monkeypatch.setenv("OPSCOPE_NATIVE", native)
    trace = make_trace([
        row("runtime", "cudaStreamWaitEvent", 0, 1, correlation=2),
        row("runtime", "cudaLaunchKernel", 3, 2, correlation=1),
        row("runtime", "cudaLaunchKernel", 8, 2, correlation=3),
        row("kernel", "a", 10, 90, correlation=1, pid=0, tid=7, device=0, stream=7),
        row("kernel", "d", 180, 5, correlation=3, pid=0, tid=20, device=0, stream=20),
    ])
    graph = dependency_graph(trace)
    d = _nodes(trace, graph)["d"]
    assert graph.after[d] == NONE and graph.unexplained[d] == 170_000 - LATENCY_CAP_NS


def _handoff_trace(worker_at: float = 300):
    return make_trace([
        row("cpu_op", "main", 0, 100, pid=1, tid=1),
        row("cpu_op", "worker", worker_at, 50, pid=1, tid=2),
        row("cpu_op", "elsewhere", 0, 250, pid=2, tid=3),  # another process: cannot hand work over
    ])


@BOTH
def test_a_thread_that_starts_late_was_handed_its_work_by_another_thread(native, monkeypatch):
    monkeypatch.setenv("OPSCOPE_NATIVE", native)
    trace = _handoff_trace()
    graph = dependency_graph(trace)
    node = _nodes(trace, graph)
    worker, main = node["worker"], node["main"]
    assert graph.chain[worker] == NONE and graph.after[worker] == main
    assert graph.after_lag[worker] == 200_000 and graph.chain_lag[worker] == 0
    assert graph.unexplained[worker] == 150_000 and graph.unexplained_on[worker] == ON_AFTER
    run = replay(graph)
    assert run.bound_by[worker] == AFTER and run.start[worker] - graph.origin == 300_000
    faster = replay(graph, [0.5 if n == main else 1.0 for n in range(len(graph))])
    assert faster.start[worker] - graph.origin == 250_000
    # before the edge, all 300 before the worker's start were unexplained: now the 150 beyond the cap
    path = step_path(graph, run, None, main, worker)
    assert path.length == 350_000 and path.categories[UNEXPLAINED] == 150_000


@BOTH
def test_a_thread_there_from_the_start_has_no_handoff(native, monkeypatch):
    monkeypatch.setenv("OPSCOPE_NATIVE", native)
    trace = _handoff_trace(worker_at=0.04)  # 40 ns after the trace's start: within the cap
    graph = dependency_graph(trace)
    assert graph.after[_nodes(trace, graph)["worker"]] == NONE


def test_the_hip_forms_of_the_blocking_calls_are_syncs():
    """Names as ROCm traces in ../shared/traces write them (hipMemcpyWithStream: PyTorch's blocking copy on ROCm);
    TensorFlow's host MemcpyD2H returns before its copy runs (GPU-multi-worker xplane): not a sync."""
    names = ["hipMemcpyWithStream", "hipDeviceSynchronize", "hipStreamSynchronize", "hipEventSynchronize",
             "hipMemcpy", "hipMemcpyAsync", "hipLaunchKernel", "MemcpyD2H", "hipStreamWaitEvent"]
    ev = pa.table({"kind": ["runtime"] * len(names), "name": names, "correlation": pa.array([None] * len(names),
                                                                                            pa.int64())})
    assert [names[i] for i in blocking_calls(ev).to_pylist()] == names[:5]


@pytest.mark.parametrize("seed", range(5))
def test_handoffs_read_in_time_order_are_the_definitions(seed, monkeypatch):
    # rows in time order take the short way (a thread's first row is its earliest, the rows begun by a time a prefix);
    # the definition groups every thread: both on the same random events (late threads, ties, null tids)
    import random

    from opscope.analyses import depgraph

    rng = random.Random(seed)
    rows = []
    for _ in range(rng.randint(1, 400)):
        pid, tid = rng.choice([1, 2]), rng.choice([1, 2, 3, None])
        at = rng.randrange(0, 1000) * 1000 + (rng.randrange(0, 3) * 200_000 if tid == 3 else 0)
        rows.append({"kind": rng.choice(["cpu_op", "runtime", "user_annotation", "kernel"]), "ts_ns": at,
                     "dur_ns": rng.choice([None, 0, 500, rng.randrange(0, 50_000)]), "pid": pid, "tid": tid})
    rows.sort(key=lambda r: r["ts_ns"])
    ev = pa.Table.from_pylist(rows, schema=pa.schema([("kind", pa.string()), ("ts_ns", pa.int64()),
                                                      ("dur_ns", pa.int64()), ("pid", pa.int64()),
                                                      ("tid", pa.int64())]))
    fast = depgraph._handoffs(ev, 0)
    monkeypatch.setattr(depgraph, "is_sorted", lambda values: False)
    assert fast == depgraph._handoffs(ev, 0)
