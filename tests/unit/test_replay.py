"""The dependency graph, its replay, the critical path and what-if, on timelines drawn by hand (microseconds).

Step 1 (0-100): the host enters aten::mm at 5, launches gemm at 10-14 (the kernel runs 16-85 on stream 7), leaves
aten::mm at 20 and waits in cudaDeviceSynchronize from 30 to 90 (5 after the kernel ended); then 10 more of its own.
"""

from __future__ import annotations

import pytest
from support import make_trace, row
from support.replay import one_step

from opscope.analyses.critical_path import breakdown_table, on_path_table
from opscope.analyses.depgraph import (
    DEVICE_COMPUTE,
    HOST_COMPUTE,
    LATENCY_CAP_NS,
    LAUNCH,
    SYNC_WAIT,
    UNEXPLAINED,
    UNTRACED,
    dependency_graph,
)
from opscope.analyses.replay import replay, step_times
from opscope.analyses.whatif import parse_change, whatif_table
from opscope.errors import UsageError

US = 1000


def _by_category(trace):
    return {r["category"]: r["ns"] for r in breakdown_table(trace).to_pylist()}


def test_the_replay_gives_back_the_measuredone_step():
    trace = one_step()
    table = step_times(trace, dependency_graph(trace)).to_pylist()
    assert table == [{"step": 1, "measured_ns": 100 * US, "replayed_ns": 100 * US, "predicted_ns": 100 * US}]


def test_the_critical_path_runs_through_the_wait_into_the_kernel_and_its_launch():
    # back from 100: own time 90-100 (10), the wait's wake-up 85-90 (5), gemm 16-85 (69), its launch latency 14-16 (2),
    # the launch call 10-14 (4), aten::mm 5-10 (5), the step's own 0-5 (5): 100 in all
    assert _by_category(one_step()) == {UNTRACED: 15 * US, SYNC_WAIT: 5 * US, DEVICE_COMPUTE: 69 * US,
                                     LAUNCH: 6 * US, HOST_COMPUTE: 5 * US}
    rows = {r["name"]: r["path_ns"] for r in on_path_table(one_step()).to_pylist()}
    # a node holds its own time and the lag charged to it: gemm 69 and its launch latency 2
    assert rows["gemm"] == 71 * US and rows["cudaLaunchKernel"] == 4 * US and rows["cudaDeviceSynchronize"] == 5 * US


def test_whatif_halving_the_kernel_or_removing_the_wait():
    trace = one_step()
    halved, picked = whatif_table(trace, [parse_change("kernel:gemm=0.5")])
    # gemm 16 + 34.5 (rounded to the ns) = 50.5, the wait returns 5 later, then 10: 65.5
    assert picked == [1] and halved["predicted_ns"].to_pylist() == [65_500]
    no_wait, _ = whatif_table(trace, [parse_change("sync=0")])
    assert no_wait["predicted_ns"].to_pylist() == [40 * US]  # 0-30, the call returns at once, then 10
    host, _ = whatif_table(trace, [parse_change("op:aten::mm=0")])
    # aten::mm's 15 (its launch inside) gone: the kernel starts 2 after the launch that now ends at 5... the wait
    # still ends 5 after it: 5 + 2 + 69 + 5 + 10 = 91
    assert host["predicted_ns"].to_pylist() == [91 * US]


def test_whatif_removes_only_the_waits_inside_a_named_region():
    # one_step's timeline with the wait inside a record_function region "fetch" (28-91)
    trace = make_trace([
        row("user_annotation", "ProfilerStep#1", 0, 100),
        row("cpu_op", "aten::mm", 5, 15),
        row("runtime", "cudaLaunchKernel", 10, 4, correlation=1),
        row("user_annotation", "fetch", 28, 63),
        row("runtime", "cudaDeviceSynchronize", 30, 60),
        row("kernel", "gemm", 16, 69, correlation=1, pid=0, tid=7, stream=7, device=0),
    ])
    inside, picked = whatif_table(trace, [parse_change("sync:^fetch$=0")])
    assert picked == [1] and inside["predicted_ns"].to_pylist() == [40 * US]  # as sync=0: the one wait is in it
    elsewhere, picked = whatif_table(trace, [parse_change("sync:^aten::mm$=0")])
    assert picked == [0] and elsewhere["predicted_ns"].to_pylist() == [100 * US]


def test_a_kernel_that_starts_long_after_its_launch_on_an_idle_stream_is_unexplained():
    late = one_step(late_start_us=16)  # 2 after the launch: explained
    assert UNEXPLAINED not in _by_category(late)
    waiting = make_trace([
        row("user_annotation", "ProfilerStep#1", 0, 1000),
        row("runtime", "cudaLaunchKernel", 10, 4, correlation=1),
        row("runtime", "cudaStreamSynchronize", 20, 970),
        row("kernel", "gemm", 800, 180, correlation=1, pid=0, tid=7, stream=7, device=0),
    ])
    lag = 800 * US - 14 * US
    assert _by_category(waiting)[UNEXPLAINED] == lag - LATENCY_CAP_NS
    replayed, _ = whatif_table(waiting, [parse_change("idle=0")])
    assert replayed["replayed_ns"].to_pylist() == [1000 * US]
    assert replayed["predicted_ns"].to_pylist() == [1000 * US - (lag - LATENCY_CAP_NS)]


def test_the_replay_derives_starts_from_the_edges_not_the_timestamps():
    graph = dependency_graph(one_step())
    doubled = replay(graph, factor=[2.0] * len(graph))
    # every duration doubled, the lags kept: 0-28 to the launch's end (5+5+4, doubled), the kernel 2 later runs
    # 138 to 168, the wait returns at 173, then 20: 193
    assert max(doubled.end) == 193 * US


@pytest.mark.parametrize("text", ["kernel=0.5", "bogus=1", "op:(=1", "sync=-1", "sync=x", "kernel:=2"])
def test_bad_changes_are_usage_errors(text):
    with pytest.raises(UsageError):
        parse_change(text)


def test_the_critical_path_of_each_instance_of_a_region():
    # two instances of "fwd" (10-40, 60-80) inside the step, an op in each; the path of each is its own length
    trace = make_trace([
        row("user_annotation", "ProfilerStep#1", 0, 100),
        row("user_annotation", "fwd", 10, 30),
        row("cpu_op", "aten::mm", 15, 20),
        row("user_annotation", "fwd", 60, 20),
        row("cpu_op", "aten::add", 62, 10),
    ])
    from opscope.analyses.critical_path import breakdown_table, on_path_table

    rows = breakdown_table(trace, region="^fwd$").to_pylist()
    by_instance: dict[int, dict[str, int]] = {}
    for r in rows:
        by_instance.setdefault(r["step"], {})[r["category"]] = r["ns"]
    # instance 1: aten::mm 20 of host compute, 10 of the annotation's own time; instance 2: 10 and 10
    assert by_instance == {1: {HOST_COMPUTE: 20 * US, UNTRACED: 10 * US}, 2: {HOST_COMPUTE: 10 * US, UNTRACED: 10 * US}}
    top = {(r["step"], r["name"]): (r["path_ns"], r["own_ns"])
           for r in on_path_table(trace, region="^fwd$").to_pylist()}
    assert top[(1, "aten::mm")] == (20 * US, 20 * US) and top[(2, "aten::add")] == (10 * US, 10 * US)
    assert breakdown_table(trace, region="^nothing$").num_rows == 0


def test_the_names_on_each_steps_path_are_counted_per_step(monkeypatch):
    # step 1 (0-100): aten::mm twice (10-30, 40-50), aten::add 60-70, the rest the step's own time in four pieces;
    # step 2 (100-150): aten::add 110-140, the step's own time in two pieces
    trace = make_trace([
        row("user_annotation", "ProfilerStep#1", 0, 100),
        row("cpu_op", "aten::mm", 10, 20),
        row("cpu_op", "aten::mm", 40, 10),
        row("cpu_op", "aten::add", 60, 10),
        row("user_annotation", "ProfilerStep#2", 100, 50),
        row("cpu_op", "aten::add", 110, 30),
    ])
    from opscope.analyses import critical_path
    from opscope.analyses.critical_path import on_path_table

    rows = [(r["step"], r["name"], r["path_ns"] // US, r["own_ns"] // US, r["pieces"])
            for r in on_path_table(trace).to_pylist()]
    assert rows == [(1, "ProfilerStep#1", 60, 60, 4), (1, "aten::mm", 30, 30, 2), (1, "aten::add", 10, 10, 1),
                    (2, "aten::add", 30, 30, 1), (2, "ProfilerStep#2", 20, 20, 2)]
    assert [(r["step"], r["name"]) for r in on_path_table(trace, top=1).to_pylist()] == [
        (1, "ProfilerStep#1"), (2, "aten::add")]
    # grouped a path at a time (a batch smaller than each path), the same rows
    monkeypatch.setattr(critical_path, "BATCH_NODES", 1)
    assert [(r["step"], r["name"], r["path_ns"] // US, r["own_ns"] // US, r["pieces"])
            for r in on_path_table(trace).to_pylist()] == rows
