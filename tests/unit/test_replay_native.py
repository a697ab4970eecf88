"""The dependency graph's build and replay in C (``analyses/_graph.c``) against their Python definitions
(``OPSCOPE_NATIVE=0``): every field of the graph, the replays (with and without changed durations and lags), the
step nodes, step times, the critical paths' tables and what-if tables are the same, on timelines drawn by hand, on
random ones (threads, nesting, launches, queues, waits, cross-stream waits, cycles of inferred edges) and on real
traces from ../shared/traces."""

from __future__ import annotations

import random
from array import array

import pytest
from support import make_trace, row
from support.shared import shared_trace

from opscope.analyses import depgraph
from opscope.analyses.critical_path import breakdown_table, on_path_table, step_paths
from opscope.analyses.depgraph import DepGraph
from opscope.analyses.replay import bounds, replay, step_nodes, step_times
from opscope.analyses.whatif import parse_change, whatif_table
from opscope.ingest import open_trace

pytestmark = pytest.mark.skipif(depgraph._graph is None, reason="opscope.analyses._graph is not built here")

FIELDS = ("kind", "category", "row", "lane", "dur", "chain", "chain_lag", "link", "extra", "extra_lag", "after",
          "after_lag", "unexplained", "unexplained_on", "start", "end")
CHANGES = ("sync=0", "kernel:gemm|conv=0.5", "kernel:.=2", "op:aten::.*=0.7", "op:DataLoader=0", "idle=0",
           "idle=0.5", "launch=0", "copy=2", "comm=0", "loader=0")


def plain(graph: DepGraph) -> dict:
    """Every field of a graph as plain lists (the thread dict's order kept)."""
    out = {f: list(getattr(graph, f)) for f in FIELDS}
    out["origin"] = graph.origin
    out["threads"] = [(lane, list(nodes)) for lane, nodes in graph.threads.items()]
    return out


def assert_threads_follow_chains(graph: DepGraph) -> None:
    """Each host thread's nodes (``graph.threads``, found from the lanes) are its lane's host nodes, each chained to
    the one before it from the thread's first, and every host node is in its thread: what the build's chains say,
    independently of how the threads' lists are made."""
    host = [n for n in range(len(graph)) if graph.kind[n] != depgraph.DEVICE]
    for lane, nodes in graph.threads.items():
        nodes = list(nodes)
        assert all(graph.lane[n] == lane and graph.kind[n] != depgraph.DEVICE for n in nodes)
        assert [graph.chain[n] for n in nodes] == [depgraph.NONE, *nodes[:-1]][:len(nodes)]
    assert sorted(n for nodes in graph.threads.values() for n in nodes) == host


def everything(make, monkeypatch, native: bool) -> dict:
    """What the graph's users see of a fresh trace, built and replayed in C or by the definitions."""
    monkeypatch.setenv("OPSCOPE_NATIVE", "1" if native else "0")
    trace = make()
    graph = depgraph._build(trace)
    inputs = depgraph._inputs_for_c(trace, trace.select(["kind", "name", "ts_ns", "dur_ns", "pid", "tid", "device",
                                                         "stream", "correlation"]))
    built_in_c = depgraph._build_in_c(inputs, depgraph._recorded_waits(trace, trace.select(["kind", "name"])),
                                      depgraph.thread_handoffs(trace), trace.num_events,
                                      graph.origin) if inputs is not None else None
    assert (built_in_c is not None) == native  # the C part ran where asked (and only there)
    for built in (graph, built_in_c):
        if built is not None:
            assert_threads_follow_chains(built)
    rng = random.Random(len(graph))
    factor = [rng.choice([0.0, 0.5, 1.0, 1.5, 3.0]) for _ in range(len(graph))]
    lag = [rng.choice([-0.5, 0.0, 0.25, 1.0]) for _ in range(len(graph))]  # < 0: cuts beyond the excess
    runs = [replay(graph), replay(graph, factor), replay(graph, None, lag), replay(graph, factor, lag)]
    assert list(bounds(graph)) == list(runs[0].bound_by)  # made without the starts (in C), the same bounds
    nodes = step_nodes(trace, graph)
    return {
        "graph": plain(graph),
        "replays": [(list(r.start), list(r.end), list(r.bound_by)) for r in runs],
        "step_nodes": (nodes.steps, nodes.measured, list(nodes.first), list(nodes.last)),
        "step_times": step_times(trace, graph).to_pylist(),
        # the walk in C (where native) gives the same dicts in the same order (the tables' ties follow it)
        "paths": [(p.step, p.length, list(p.categories.items()), list(p.nodes.items()), list(p.own.items()))
                  for p in step_paths(trace)],
        "breakdown": breakdown_table(trace).to_pylist(),
        "on_path": on_path_table(trace).to_pylist(),
        "whatif": [(c, whatif_table(trace, [parse_change(c)])[0].to_pylist()) for c in CHANGES],
        "whatif_all": whatif_table(trace, [parse_change(c) for c in CHANGES])[0].to_pylist(),
    }


def same_both_ways(make, monkeypatch) -> dict:
    native = everything(make, monkeypatch, True)
    python = everything(make, monkeypatch, False)
    for key in native:
        assert native[key] == python[key], key
    return native


def _hand_drawn():
    """A step with nested ops (one past its parent's end), a data loader, launches on two streams, a kernel without
    a launch, a kernel that waits on the other stream, a blocking copy, a pageable async copy and a synchronize; a
    second thread with Python frames; a zero-length launch and a device with no number."""
    return make_trace([
        row("user_annotation", "ProfilerStep#1", 0, 400),
        row("python", "train.py(10): step", 0, 400),
        row("user_annotation", "enumerate(DataLoader)#_next", 2, 8),
        row("cpu_op", "aten::copy_", 4, 3),
        row("cpu_op", "aten::mm", 12, 30),
        row("cpu_op", "aten::addmm", 20, 40),  # runs past aten::mm's end
        row("runtime", "cudaLaunchKernel", 22, 4, correlation=1),
        row("runtime", "cudaLaunchKernel", 30, 0, correlation=2),
        row("runtime", "cudaMemcpy", 70, 40, correlation=3),
        row("runtime", "cudaMemcpyAsync", 120, 30, correlation=4),
        row("runtime", "cudaLaunchKernel", 160, 5, correlation=5),
        row("runtime", "cudaStreamSynchronize", 170, 200),
        row("user_annotation", "region", 375, 20, pid="worker", tid="7"),
        row("cpu_op", "aten::relu", 380, 10, pid="worker", tid="7"),
        row("runtime", "cudaLaunchKernel", 382, 3, pid="worker", tid="7", correlation=6),
        row("kernel", "gemm", 27, 40, correlation=1, stream=7, device=0),
        row("kernel", "conv", 32, 10, correlation=2, stream=8, device=0),
        row("kernel", "orphan", 45, 5, stream=8, device=0),
        row("memcpy", "Memcpy HtoD", 75, 30, correlation=3, stream=7, device=0),
        row("memcpy", "Memcpy DtoH (Device -> Pageable)", 125, 20, correlation=4, stream=7, device=0),
        row("kernel", "late", 300, 50, correlation=5, stream=9, device=0),
        row("kernel", "waiter", 351, 9, stream=7, device=0),
        row("comm", "ncclAllReduce", 200, 80, stream=10, device=1),
        row("kernel", "nodev", 390, 5, correlation=6, stream=3),
    ])


def test_hand_drawn_graph_is_the_same_in_c(monkeypatch):
    got = same_both_ways(_hand_drawn, monkeypatch)
    graph = got["graph"]
    assert {"input pipeline", "sync waits", "launch/runtime", "python", "host untraced", "host compute", "copies",
            "communication", "device compute"} <= set(graph["category"])
    assert any(a != -1 for a in graph["after"])  # an inferred cross-stream wait
    assert 1 in graph["kind"]  # a wait


def test_the_replay_test_timeline_is_the_same_in_c(monkeypatch):
    def step():
        return make_trace([
            row("user_annotation", "ProfilerStep#1", 0, 100),
            row("cpu_op", "aten::mm", 5, 15),
            row("runtime", "cudaLaunchKernel", 10, 4, correlation=1),
            row("runtime", "cudaDeviceSynchronize", 30, 60),
            row("kernel", "gemm", 16, 69, correlation=1, pid=0, tid=7, stream=7, device=0),
        ])

    got = same_both_ways(step, monkeypatch)
    assert got["step_times"] == [{"step": 1, "measured_ns": 100_000, "replayed_ns": 100_000,
                                  "predicted_ns": 100_000}]


def test_an_inferred_wait_that_closes_a_cycle_is_dropped_the_same_way(monkeypatch):
    # A starts long after its launch, just after B ends on another stream: inferred "A waited for B"; but the host
    # waited for A before it launched B (B's clock runs early): the edge closes a cycle and is dropped
    def clocks_disagree():
        return make_trace([
            row("runtime", "cudaLaunchKernel", 10, 4, correlation=1),
            row("runtime", "cudaStreamSynchronize", 100, 420),
            row("runtime", "cudaLaunchKernel", 600, 4, correlation=2),
            row("kernel", "A", 500, 10, correlation=1, stream=7, device=0),
            row("kernel", "B", 300, 199, correlation=2, stream=8, device=0),
        ])

    graph = same_both_ways(clocks_disagree, monkeypatch)["graph"]
    assert all(a == -1 for a in graph["after"]) and 1 in graph["kind"]


def test_no_steps_no_device_and_no_events(monkeypatch):
    same_both_ways(lambda: make_trace([row("cpu_op", "aten::add", 0, 10), row("cpu_op", "aten::mul", 3, 2)]),
                   monkeypatch)
    same_both_ways(lambda: make_trace([row("cpu_op", "aten::add", 5, 0), row("marker", "m", 1, 0)]), monkeypatch)


def _random_trace(seed: int):
    """Random threads of nested ops and launches, kernels on a few streams and devices at random lags (some long:
    unexplained, some just after other streams' work: inferred waits that may close cycles), syncs and copies."""
    rng = random.Random(seed)
    rows = []
    correlation = 0
    launches = []
    for thread in range(rng.randint(1, 3)):
        t = rng.randint(0, 20)
        pid, tid = rng.choice([(1, thread), ("p", f"{thread}"), (2, 2 * thread)])
        for _ in range(rng.randint(1, 12)):
            dur = rng.randint(0, 60)
            name = rng.choice(["aten::mm", "aten::conv", "DataLoader", "record", "aten::add"])
            rows.append(row(rng.choice(["cpu_op", "user_annotation", "cpu_op"]), name, t, dur, pid=pid, tid=tid))
            inner = t
            while rng.random() < 0.6 and inner < t + dur + 5:
                call = rng.choice(["cudaLaunchKernel", "cudaLaunchKernel", "cudaStreamSynchronize",
                                   "cudaDeviceSynchronize", "cudaMemcpy", "cudaMemcpyAsync", "cudaEventRecord"])
                length = rng.randint(0, 15)
                correlation += 1
                rows.append(row("runtime", call, inner, length, pid=pid, tid=tid, correlation=correlation,
                                device=rng.choice([0, 1, None])))
                launches.append((correlation, inner + length, call))
                inner += length + rng.randint(0, 6)
            t += dur + rng.randint(-3, 10)
    for correlation, ready, call in launches:
        if call in ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventRecord") or rng.random() < 0.1:
            continue
        kind = "memcpy" if call.startswith("cudaMemcpy") else rng.choice(["kernel", "kernel", "comm", "memset"])
        name = "Memcpy DtoH (Device -> Pageable)" if call == "cudaMemcpyAsync" else rng.choice(["gemm", "conv", "k"])
        start = ready + rng.choice([0, 1, 2, 30, 80, 200])
        rows.append(row(kind, name, start, rng.randint(0, 40), correlation=correlation, stream=rng.choice([7, 8, 9]),
                        device=rng.choice([0, 0, 1])))
    rows.extend(row("kernel", "nolaunch", rng.randint(0, 300), rng.randint(1, 30), stream=rng.choice([7, 8]),
                    device=0) for _ in range(rng.randint(0, 3)))
    if rng.random() < 0.7:
        rows.append(row("user_annotation", "ProfilerStep#1", 0, 150))
        rows.append(row("user_annotation", "ProfilerStep#2", 150, 300, pid=rng.choice([1, 9]), tid=0))
    return make_trace(rows)


@pytest.mark.parametrize("seed", range(30))
def test_random_timelines_are_the_same_in_c(seed, monkeypatch):
    same_both_ways(lambda: _random_trace(seed), monkeypatch)


@pytest.mark.parametrize("relative", [
    "hta/critical_path/cuda_event_sync/event_sync_trace.json.gz",
    "tf-profiler/GPU-multi-worker/34.83.195.179_6003.xplane.pb",
    "hta/nccl_parser_config/nccl_data.json.gz",
    "hta/negative_queue_length_values_check/rank0.json.gz",
    "hta/trace_diff/control/control.json.gz",
])
def test_real_traces_are_the_same_in_c(relative, monkeypatch):
    path = shared_trace(relative)
    same_both_ways(lambda: open_trace(path), monkeypatch)


def test_the_walk_in_c_declines_a_graph_out_of_order_and_leaves_its_scratch_clean(monkeypatch):
    # two ops on one thread: the second op's slice starts after the first's ends, bound by the node before it
    monkeypatch.setenv("OPSCOPE_NATIVE", "1")
    trace = make_trace([row("cpu_op", "aten::add", 0, 10), row("cpu_op", "aten::mul", 20, 10)])
    graph = depgraph.dependency_graph(trace)
    run = replay(graph)
    last = max(range(len(graph)), key=lambda node: run.end[node])
    first = min(range(len(graph)), key=lambda node: run.start[node])
    labels = list(graph.category.names)
    codes = (labels.index(depgraph.UNEXPLAINED), labels.index(depgraph.LAUNCH))
    counts = bytes(label != depgraph.UNEXPLAINED for label in labels)
    slot = array("i", [-1]) * len(graph)
    walked = depgraph._graph.walk_path(graph.kind, graph.chain, graph.category.codes, *graph.links(), run.start,
                                       run.end, run.bound_by, slot, first, last, *codes, counts)
    assert walked is not None and list(slot) == [-1] * len(graph)
    _, sums, *_ = walked
    assert sum(sums) == run.end[last] - run.start[first]  # the parts tile the interval
    forward = array("i", graph.chain)
    forward[last] = last  # its dependency is itself: not a graph in the order the walk needs
    assert depgraph._graph.walk_path(graph.kind, forward, graph.category.codes, *graph.links(), run.start,
                                     run.end, run.bound_by, slot, first, last, *codes, counts) is None
    assert list(slot) == [-1] * len(graph)
