"""Graph-replayed kernels get the ops recorded when the graph was captured, matched by kernel order."""

from __future__ import annotations

import json

from support import make_trace, row

from opscope.analyses.graph_capture import captured_graphs, match_replays


def _capture_trace():
    # two captures: batch 8 (gemm under aten::mm under a module annotation, then a norm) and batch 16 (a different
    # gemm first); each launch carries its kernel's name in its args, as vLLM's capture traces do
    events = [
        row("user_annotation", "capture_8", 0, 100),
        row("user_annotation", "layer0", 1, 40),
        row("cpu_op", "vllm::gemm", 2, 30),
        row("cpu_op", "aten::mm", 3, 20),
        row("runtime", "hipLaunchKernel", 4, 2),
        row("cpu_op", "aten::rms_norm", 50, 10),
        row("runtime", "hipLaunchKernel", 51, 2),
        row("runtime", "hipLaunchKernel", 70, 2),  # a launch outside any op
        row("user_annotation", "capture_16", 200, 100),
        row("cpu_op", "aten::mm", 210, 20),
        row("runtime", "hipLaunchKernel", 211, 2),
        row("cpu_op", "aten::add", 240, 10),
        row("runtime", "hipLaunchKernel", 241, 2),
    ]
    kernel = {4: "gemm_8", 51: "rmsnorm", 70: "memset_kernel", 211: "gemm_16", 241: "add_kernel"}
    args = [json.dumps({"kernel": kernel[round(e["ts_ns"] / 1000)]}) if e["name"] == "hipLaunchKernel" else None
            for e in events]
    return make_trace(events, args=args)


def _execution_trace(order: list[str]):
    launch = row("runtime", "hipGraphLaunch", 0, 5, correlation=77)
    kernels = [row("kernel", name, 10 + 10 * i, 5, correlation=77, pid=0, tid=7, stream=7, device=0)
               for i, name in enumerate(order)]
    other = [row("runtime", "hipLaunchKernel", 200, 2, correlation=78),
             row("kernel", "copy", 210, 4, correlation=78, pid=0, tid=7, stream=7, device=0)]
    return make_trace([launch, *kernels, *other])


def test_captured_graphs_are_the_launches_under_each_outermost_annotation_in_order():
    graphs = captured_graphs(_capture_trace())
    assert [(g.name, g.kernels) for g in graphs] == [
        ("capture_8", ("gemm_8", "rmsnorm", "memset_kernel")), ("capture_16", ("gemm_16", "add_kernel"))]
    first = graphs[0]
    assert first.op_name == ("aten::mm", "aten::rms_norm", None)
    assert first.top_op_name == ("vllm::gemm", "aten::rms_norm", None)
    assert first.annotation == ("layer0", "capture_8", "capture_8")


def test_a_replay_takes_the_ops_of_the_graph_it_matches_best():
    trace = _execution_trace(["gemm_8", "rmsnorm", "memset_kernel"])
    match = match_replays(trace, captured_graphs(_capture_trace()))
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
    trace = _execution_trace(["gemm_16", "extra_kernel", "add_kernel"])
    match = match_replays(trace, captured_graphs(_capture_trace()))
    assert (match.replayed_kernels, match.matched_kernels) == (3, 2)
    assert match.matched_ns == 10_000 and match.replayed_ns == 15_000
    assert [r["op_name"] for r in match.attribution.to_pylist()] == ["aten::mm", "aten::add"]
    assert "2 of 3 replayed kernels (66.7% of their device time" in match.describe()


def test_no_graph_launch_means_nothing_to_match():
    trace = make_trace([row("runtime", "hipLaunchKernel", 0, 2, correlation=5),
                        row("kernel", "k", 3, 4, correlation=5, pid=0, tid=7, stream=7, device=0)])
    match = match_replays(trace, captured_graphs(_capture_trace()))
    assert (match.replays, match.matched_kernels, match.attribution.num_rows) == (0, 0, 0)
    assert "no graph launches" in match.describe()
