"""The graph's link columns (extra and after edges, their lags, unexplained lags) are kept only for the nodes that
set one of them: read per node they give the values the nodes were given, the defaults elsewhere. Its ends likewise
(start + dur but for the nodes whose end is another)."""

from __future__ import annotations

from array import array

import pyarrow as pa
import pytest
from support import make_trace, row

from opscope.analyses.depgraph import (
    LINKED,
    NONE,
    ON_AFTER,
    ON_CHAIN,
    ON_EXTRA,
    WAIT,
    Ends,
    dependency_graph,
    frozen_view,
    linked_columns,
)


def test_only_the_nodes_that_set_a_link_column_take_a_row():
    # five nodes: node 1 has a launch 3 us before it, node 3 only an unexplained lag on another stream's edge
    columns = {"extra": [NONE, 0, NONE, NONE, NONE], "extra_lag": [0, 3_000, 0, 0, 0],
               "after": [NONE, NONE, NONE, NONE, NONE], "after_lag": [0, 0, 0, 0, 0],
               "unexplained": [0, 0, 0, 70_000, 0],
               "unexplained_on": [ON_CHAIN, ON_EXTRA, ON_CHAIN, ON_AFTER, ON_CHAIN],
               "chain_lag": [0, 0, 0, 0, 2_000]}  # node 4: 2 us after the node before it
    link, linked = linked_columns(columns)
    assert list(link) == [NONE, 0, NONE, 1, 2]
    assert list(linked["extra"].values) == [0, NONE, NONE] and list(linked["unexplained"].values) == [0, 70_000, 0]
    assert list(linked["chain_lag"].values) == [0, 0, 2_000]
    for name, values in columns.items():
        assert list(linked[name]) == values and [linked[name][node] for node in range(5)] == values
        assert linked[name][1:4] == values[1:4]
        width = pa.int32() if LINKED[name][1] == "i" else pa.int8() if LINKED[name][1] == "b" else pa.int64()
        assert linked[name].arrow(width).to_pylist() == values
        assert linked[name].arrow(width, pa.array([4, 3, 1], pa.int64())).to_pylist() == [values[4], values[3],
                                                                                        values[1]]


@pytest.mark.parametrize("native", ["1", "0"])  # built in C where it is built, and by the definition
def test_host_slices_take_no_link_rows(native, monkeypatch):
    # a thread's two ops and the kernel one of them launched: only the kernel is linked (to its launch)
    monkeypatch.setenv("OPSCOPE_NATIVE", native)
    trace = make_trace([row("cpu_op", "aten::add", 0, 10), row("runtime", "cudaLaunchKernel", 2, 3, correlation=7),
                        row("cpu_op", "aten::mul", 20, 10),
                        row("kernel", "add_kernel", 8, 4, correlation=7, device=0, stream=7, pid=0, tid=7)])
    graph = dependency_graph(trace)
    linked = [node for node in range(len(graph)) if graph.link[node] != NONE]
    assert [graph.kind[node] for node in linked] == [2]  # DEVICE
    kernel = linked[0]
    assert graph.row[graph.extra[kernel]] == 1 and graph.extra_lag[kernel] == 3_000  # 8 us - the call's end at 5
    assert len(graph.extra.values) == 1


def test_a_graph_whose_link_columns_are_not_over_its_link_rows_is_replayed_by_the_definition(monkeypatch):
    # a graph put together by hand with a column over another link array: the C replay is not handed it
    from dataclasses import replace

    from opscope.analyses.depgraph import Linked
    from opscope.analyses.replay import replay

    trace = make_trace([row("cpu_op", "aten::add", 0, 10), row("runtime", "cudaLaunchKernel", 2, 3, correlation=7),
                        row("kernel", "add_kernel", 8, 4, correlation=7, device=0, stream=7, pid=0, tid=7)])
    graph = dependency_graph(trace)
    copied = replace(graph, extra_lag=Linked(list(graph.link), graph.extra_lag.values, 0))
    with pytest.raises(TypeError):
        copied.links()
    assert list(replay(copied).end) == list(replay(graph).end)


@pytest.mark.parametrize("as_views", [True, False])
def test_ends_keep_apart_only_the_nodes_whose_end_is_not_start_plus_dur(as_views):
    # node 2 is a wait whose own part (0) is not its call (it ended at 50); node 4 ends where its start and dur say
    start, dur, end = [0, 10, 20, 60, 70], [10, 5, 0, 10, 0], [10, 15, 50, 70, 70]

    def column(values: list[int]):
        return frozen_view(array("q", values), "q") if as_views else values

    ends = Ends.of(column(start), column(dur), column(end))
    assert list(ends.nodes) == [2] and list(ends.values) == [50]
    assert list(ends) == end and ends == end and [ends[i] for i in range(5)] == end and ends[-3] == 50
    assert ends[1:3] == [15, 50]
    assert ends.arrow().to_pylist() == end
    assert ends.arrow(pa.array([4, 2, 0], pa.int64())).to_pylist() == [70, 50, 10]


def test_a_wait_keeps_its_call_s_end_apart():
    # the host waits in cudaStreamSynchronize 20-990 for kernel k (800-980): the wait's own part is 0, its end 990
    trace = make_trace([row("runtime", "cudaLaunchKernel", 10, 4, correlation=1),
                        row("runtime", "cudaStreamSynchronize", 20, 970),
                        row("kernel", "k", 800, 180, correlation=1, pid=0, tid=7, stream=7, device=0)])
    graph = dependency_graph(trace)
    wait = next(node for node in range(len(graph)) if graph.kind[node] == WAIT)
    assert graph.dur[wait] == 0 and graph.end[wait] - graph.start[wait] == 970_000
    assert list(graph.end.nodes) == [wait]
    assert all(graph.end[n] == graph.start[n] + graph.dur[n] for n in range(len(graph)) if n != wait)
