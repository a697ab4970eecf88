"""Kineto's Stream Wait Event records as edges between the work of two streams."""

from __future__ import annotations

import json

from support import make_trace, row

from opscope.analyses.stream_waits import stream_waits


def _trace(record_id: int = 3):
    # host: launch a on stream 7 (corr 1), launch b on stream 7 (corr 2), cudaEventRecord (corr 3), launch c on 7
    # (corr 4, after the record: not waited for), cudaStreamWaitEvent (corr 5), launch d on stream 20 (corr 6)
    events = [
        row("runtime", "cudaLaunchKernel", 0, 2, correlation=1),
        row("runtime", "cudaLaunchKernel", 3, 2, correlation=2),
        row("runtime", "cudaEventRecord", 6, 1, correlation=3),
        row("runtime", "cudaLaunchKernel", 8, 2, correlation=4),
        row("runtime", "cudaStreamWaitEvent", 11, 1, correlation=5),
        row("runtime", "cudaLaunchKernel", 13, 2, correlation=6),
        row("kernel", "a", 2, 10, correlation=1, pid=0, tid=7, device=0, stream=7),
        row("kernel", "b", 12, 10, correlation=2, pid=0, tid=7, device=0, stream=7),
        row("sync", "Stream Wait Event", 12, 0, correlation=5, pid=0, tid=20, device=0, stream=20),
        row("kernel", "c", 22, 10, correlation=4, pid=0, tid=7, device=0, stream=7),
        row("kernel", "d", 23, 5, correlation=6, pid=0, tid=20, device=0, stream=20),
    ]
    args = [json.dumps({"wait_on_stream": 7, "wait_on_cuda_event_record_corr_id": record_id})
            if e["name"] == "Stream Wait Event" else None for e in events]
    return make_trace(events, args=args)


def _names(trace, pairs):
    names = trace.select(["name"])["name"].to_pylist()
    return [(names[a], names[b]) for a, b in pairs]


def test_the_work_after_the_wait_waits_for_the_work_before_the_record():
    trace = _trace()
    assert _names(trace, stream_waits(trace)) == [("d", "b")]


def test_a_record_the_trace_does_not_have_gives_no_edge():
    trace = _trace(record_id=99)
    assert stream_waits(trace) == []


def test_the_graph_ties_the_waiting_work_to_the_work_it_waited_for():
    from opscope.analyses.depgraph import NONE, dependency_graph
    from opscope.analyses.replay import AFTER, replay

    trace = _trace()
    graph = dependency_graph(trace)
    names = trace.select(["name"])["name"].to_pylist()
    node = {names[graph.row[n]]: n for n in range(len(graph)) if graph.row[n] != NONE and names[graph.row[n]]
            in ("b", "d")}
    # d (launched at 13, ended 15) started at 23, 1 after b ended (22): the recorded wait bound it
    assert graph.after[node["d"]] == node["b"] and graph.after_lag[node["d"]] == 1_000
    run = replay(graph)
    assert run.bound_by[node["d"]] == AFTER and run.start[node["d"]] - graph.origin == 23_000
    factor = [2.0 if n == node["b"] else 1.0 for n in range(len(graph))]
    slower = replay(graph, factor)
    assert slower.start[node["d"]] - graph.origin == 33_000  # b now ends at 32
