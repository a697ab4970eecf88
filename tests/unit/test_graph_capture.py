"""Graph-replayed kernels get the ops recorded when the graph was captured, matched by kernel order."""

from __future__ import annotations

from support import make_trace, row
from support.graph_capture import capture_trace, execution_trace

from opscope.analyses.graph_capture import captured_graphs, match_replays


def test_captured_graphs_are_the_launches_under_each_outermost_annotation_in_order():
    graphs = captured_graphs(capture_trace())
    assert [(g.name, g.kernels) for g in graphs] == [
        ("capture_8", ("gemm_8", "rmsnorm", "memset_kernel")), ("capture_16", ("gemm_16", "add_kernel"))]
    first = graphs[0]
    assert first.op_name == ("aten::mm", "aten::rms_norm", None)
    assert first.top_op_name == ("vllm::gemm", "aten::rms_norm", None)
    assert first.annotation == ("layer0", "capture_8", "capture_8")


def test_a_replay_takes_the_ops_of_the_graph_it_matches_best():
    trace = execution_trace(["gemm_8", "rmsnorm", "memset_kernel"])
    match = match_replays(trace, captured_graphs(capture_trace()))
    assert (match.replays, match.replayed_kernels, match.matched_kernels) == (1, 3, 3)
    assert match.replayed_ns == match.matched_ns == 15_000
    rows = match.attribution.to_pylist()
    assert [r["op_name"] for r in rows] == ["aten::mm", "aten::rms_norm", None]
    assert [r["top_op_name"] for r in rows] == ["vllm::gemm", "aten::rms_norm", None]
    assert {r["graph"] for r in rows} == {"capture_8"}
    # the kernel launched outside the graph (its own correlation id) is not a replay
    names = trace.select(["name"])["name"].to_pylist()
    assert "copy" not in {names[r["device_row"]] for r in rows}
    assert "3 of 3 replayed kernels (100.0% of their device time" in match.describe()


def test_kernels_the_capture_does_not_have_stay_unmatched_and_are_counted():
    trace = execution_trace(["gemm_16", "extra_kernel", "add_kernel"])
    match = match_replays(trace, captured_graphs(capture_trace()))
    assert (match.replayed_kernels, match.matched_kernels) == (3, 2)
    assert match.matched_ns == 10_000 and match.replayed_ns == 15_000
    assert [r["op_name"] for r in match.attribution.to_pylist()] == ["aten::mm", "aten::add"]
    assert "2 of 3 replayed kernels (66.7% of their device time" in match.describe()


def test_no_graph_launch_means_nothing_to_match():
    trace = make_trace([row("runtime", "hipLaunchKernel", 0, 2, correlation=5),
                        row("kernel", "k", 3, 4, correlation=5, pid=0, tid=7, stream=7, device=0)])
    match = match_replays(trace, captured_graphs(capture_trace()))
    assert (match.replays, match.matched_kernels, match.attribution.num_rows) == (0, 0, 0)
    assert "no graph launches" in match.describe()
