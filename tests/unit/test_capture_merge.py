"""An execution trace merged with its graph capture: replayed kernels are charged to the ops recorded at capture, in
every analysis that charges device time to ops, and the copies of those ops count as nothing else."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.graph_capture import capture_trace, execution_trace, two_step_execution_trace

from opscope.analyses.capture_merge import capture_note, merge_capture, with_capture
from opscope.analyses.kernels import kernel_table
from opscope.analyses.links import link_table
from opscope.analyses.op_device import device_work
from opscope.analyses.ops import gpu_op_table, op_table
from opscope.analyses.summary import summarize
from opscope.errors import TraceError
from opscope.ingest.capture_files import capture_files
from opscope.model.schema import CAPTURED_KINDS
from opscope.model.trace import captured_copies

# the replay runs the batch-8 graph: gemm_8 (aten::mm under vllm::gemm under layer0), rmsnorm (aten::rms_norm under
# capture_8), memset_kernel (no op, under capture_8); then "copy", launched outside the graph by aten::copy_
REPLAY = ["gemm_8", "rmsnorm", "memset_kernel"]


def _merged():
    return merge_capture(execution_trace(REPLAY), [capture_trace()])


def _by_kernel(table, column):
    return {r["name"]: r[column] for r in table.to_pylist()}


def test_replayed_kernels_link_to_the_captured_ops_and_other_kernels_keep_their_own():
    merged, match = _merged()
    assert match.matched_kernels == 3
    links = {r["device_row"]: r for r in link_table(merged).to_pylist()}
    names = merged.select(["name"])["name"].to_pylist()
    by_kernel = {names[row]: r for row, r in links.items()}
    assert (by_kernel["gemm_8"]["op_name"], by_kernel["gemm_8"]["top_op_name"],
            by_kernel["gemm_8"]["annotation"]) == ("aten::mm", "vllm::gemm", "layer0")
    assert (by_kernel["rmsnorm"]["op_name"], by_kernel["rmsnorm"]["annotation"]) == ("aten::rms_norm", "capture_8")
    assert by_kernel["memset_kernel"]["op_name"] is None and by_kernel["memset_kernel"]["annotation"] == "capture_8"
    assert by_kernel["copy"]["op_name"] == "aten::copy_"
    # the launch stays the graph launch (its time is the replay's)
    assert names[by_kernel["gemm_8"]["launch_row"]] == "hipGraphLaunch"
    # without the capture, the replayed kernels have no op
    plain = {names[r["device_row"]]: r["op_name"] for r in link_table(execution_trace(REPLAY)).to_pylist()}
    assert plain == {"gemm_8": None, "rmsnorm": None, "memset_kernel": None, "copy": "aten::copy_"}


def test_device_time_is_charged_to_captured_ops_with_their_shapes():
    merged, _ = _merged()
    work = device_work(merged, "launching")
    names = merged.select(["name"])["name"].to_pylist()
    by_kernel = {names[r["device_row"]]: (r["op"], r["shapes"]) for r in work.to_pylist()}
    assert by_kernel["gemm_8"] == ("aten::mm", "[[8, 64], [64, 64]]")
    assert by_kernel["copy"] == ("aten::copy_", "[[4], [4]]")
    by_op = {(r["op"], r["name"]): r["total_ns"] for r in kernel_table(merged, by_op=True).to_pylist()}
    assert by_op[("aten::mm", "gemm_8")] == 5_000 and by_op[("aten::rms_norm", "rmsnorm")] == 5_000


def test_ops_by_device_time_list_captured_ops_with_no_host_calls():
    merged, _ = _merged()
    rows = {r["name"]: r for r in gpu_op_table(merged).to_pylist()}
    # aten::mm launched gemm_8; vllm::gemm holds aten::mm, so it has the same device time (inclusive)
    assert (rows["aten::mm"]["calls"], rows["aten::mm"]["cpu_ns"], rows["aten::mm"]["gpu_ns"]) == (0, 0, 5_000)
    assert rows["vllm::gemm"]["gpu_ns"] == 5_000 and rows["aten::rms_norm"]["gpu_ns"] == 5_000
    assert rows["aten::copy_"]["calls"] == 1 and rows["aten::copy_"]["gpu_ns"] == 4_000
    # a step cut keeps the captured ops of the replayed kernels in those steps (none here: no steps)
    assert "aten::mm" not in {r["name"] for r in gpu_op_table(merged, filt=_steps([1])).to_pylist()}


def _steps(steps):
    from opscope.analyses.filters import EventFilter

    return EventFilter(kinds=("cpu_op",), steps=steps)


def test_the_copies_count_as_no_event_and_no_host_time():
    trace = execution_trace(REPLAY)
    merged, _ = _merged()
    copies = captured_copies(merged)
    # copied: capture_8, layer0, vllm::gemm, aten::mm, aten::rms_norm (the ops and annotations around the launches)
    assert copies == 5
    assert merged.num_events == trace.num_events + copies
    kinds = merged.select(["kind"])["kind"].to_pylist()
    assert sum(k in CAPTURED_KINDS for k in kinds) == copies
    assert summarize(merged).events == trace.num_events
    assert not set(CAPTURED_KINDS) & {r["kind"] for r in summarize(merged).by_kind.to_pylist()}
    assert op_table(merged).to_pylist() == op_table(trace).to_pylist()


def test_nothing_to_match_leaves_the_trace_as_it_is():
    trace = execution_trace(["unknown_a", "unknown_b"])
    merged, match = merge_capture(trace, [capture_trace()])
    assert merged is trace and match.matched_kernels == 0


def test_capture_files_given_found_beside_or_switched_off(tmp_path):
    run = tmp_path / "run"
    (run / "capture_traces").mkdir(parents=True)
    trace = run / "graph_execution.json.gz"
    trace.write_bytes(b"")
    for rank in (0, 1):
        (run / "capture_traces" / f"graph_capture_rank_{rank}.123.pt.trace.json.gz").write_bytes(b"")
    (run / "capture_traces" / "notes.txt").write_text("not a trace")
    found, how = capture_files(trace, None)
    assert how == "found beside the trace" and [p.name for p in found] == [
        "graph_capture_rank_0.123.pt.trace.json.gz", "graph_capture_rank_1.123.pt.trace.json.gz"]
    assert [p.name for p in capture_files(trace, None, rank=1)[0]] == ["graph_capture_rank_1.123.pt.trace.json.gz"]
    assert capture_files(trace, [Path("none")]) == ([], "")
    given = run / "capture_traces" / "graph_capture_rank_0.123.pt.trace.json.gz"
    assert capture_files(trace, [given]) == ([given], "given")
    with pytest.raises(TraceError, match="does not exist"):
        capture_files(trace, [tmp_path / "missing"])
    lone = tmp_path / "lone.json"
    lone.write_text("{}")
    assert capture_files(lone, None) == ([], "")


def test_with_capture_opens_what_it_finds_and_says_so(tmp_path):
    run = tmp_path / "run"
    (run / "capture_traces").mkdir(parents=True)
    capture_path = run / "capture_traces" / "graph_capture_rank_0.json"
    capture_path.write_text(json.dumps({}))
    trace = execution_trace(REPLAY)
    opened = []

    def open_capture(path):
        opened.append(path)
        return capture_trace()

    merged = with_capture(trace, run / "graph_execution.json", None, open_capture)
    assert opened == [capture_path]
    note = capture_note(merged)
    assert note is not None and "3 of 3 replayed kernels" in note and "found beside the trace" in note
    assert merged.metadata["graph_capture"]["matched_kernels"] == 3
    assert "graph_capture" not in trace.metadata  # the trace read is not changed
    assert with_capture(trace, tmp_path / "elsewhere.json", None, open_capture) is trace


def test_each_replay_has_its_own_copies_in_its_step():
    trace = two_step_execution_trace(REPLAY)
    merged, match = merge_capture(trace, [capture_trace()])
    assert (match.replays, match.matched_kernels) == (2, 6)
    assert captured_copies(merged) == 10  # the five ops and annotations, once per replay
    rows = {r["name"]: r for r in gpu_op_table(merged).to_pylist()}
    assert (rows["aten::mm"]["kernels"], rows["aten::mm"]["gpu_ns"]) == (2, 10_000)
    # each replay's copies are in its step: a step cut keeps that replay's device time
    second = {r["name"]: r for r in gpu_op_table(merged, filt=_steps([2])).to_pylist()}
    assert (second["aten::mm"]["kernels"], second["aten::mm"]["gpu_ns"]) == (1, 5_000)
    work = device_work(merged, "launching")
    steps_of_mm = sorted(r["step"] for r in work.to_pylist() if r["op"] == "aten::mm")
    assert steps_of_mm == [1, 2]
    events = merged.select(["kind", "name", "step", "ts_ns"]).to_pylist()
    copies_of_mm = [(e["step"], e["ts_ns"]) for e in events if e["kind"] == "captured_op" and e["name"] == "aten::mm"]
    assert copies_of_mm == [(1, 1_000), (2, 1_001_000)]  # at each graph launch
