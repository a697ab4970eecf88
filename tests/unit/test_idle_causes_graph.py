"""Idle time read from the dependency graph, on timelines drawn by hand (microseconds): what the launching thread
did in a gap, the part of it spent waiting on work the trace does not show, and ``whatif idle:CAUSE``."""

from __future__ import annotations

import pyarrow as pa
import pytest
from support import make_trace, row

from opscope.advise import advise, referring_to_found
from opscope.advise.finding import Finding
from opscope.analyses.depgraph import LATENCY_CAP_NS
from opscope.analyses.gap_causes import gap_causes, thread_names, unseen_by_cause
from opscope.analyses.gpu import gpu_analysis
from opscope.analyses.whatif import parse_change, whatif_table
from opscope.errors import UsageError

US = 1000


def host_gap():
    """Step 0-1000. Kernel a (launched at 10-14) runs 20-100. The host then runs Python preprocessing (a frame
    100-700 with a built-in inside 200-600), launches b at 700-710 (it runs 720-800), and waits in
    cudaDeviceSynchronize 790-900 (the device drained at 800: the wait returns 100 later, beyond the latency cap)."""
    return make_trace([
        row("user_annotation", "ProfilerStep#1", 0, 1000),
        row("runtime", "cudaLaunchKernel", 10, 4, correlation=1),
        row("python", "video.py(12): decode_frames", 100, 600),
        row("python", "<built-in method resize>", 200, 400),
        row("runtime", "cudaLaunchKernel", 700, 10, correlation=2),
        row("runtime", "cudaDeviceSynchronize", 790, 110),
        row("kernel", "a", 20, 80, correlation=1, pid=0, tid=7, stream=7, device=0),
        row("kernel", "b", 720, 80, correlation=2, pid=0, tid=7, stream=7, device=0),
    ])


def unseen_gap():
    """Step 0-1000. Kernel a (launched at 2-4) runs 5-8; kernel k launched at 10-14 starts only at 800: 786 after
    its launch, 736 of them beyond the latency cap. The host waits for it in cudaStreamSynchronize 20-990 (it
    returns 10 after k ends)."""
    return make_trace([
        row("user_annotation", "ProfilerStep#1", 0, 1000),
        row("runtime", "cudaLaunchKernel", 2, 2, correlation=2),
        row("cpu_op", "aten::copy_", 15, 980),
        row("runtime", "cudaLaunchKernel", 10, 4, correlation=1),
        row("runtime", "cudaStreamSynchronize", 20, 970),
        row("kernel", "a", 5, 3, correlation=2, pid=0, tid=7, stream=7, device=0),
        row("kernel", "k", 800, 180, correlation=1, pid=0, tid=7, stream=7, device=0),
    ])


def _gap(trace, start_us, end_us):
    return gap_causes(trace, [(0, start_us * US, end_us * US)])[0]


def test_a_gap_names_what_the_launching_thread_did_innermost_first():
    gap = _gap(host_gap(), 100, 720)
    # the frame 100-700 (the built-in inside it says nothing: its time is the frame's), the launch 700-710,
    # then 710-720 with nothing open
    assert gap.thread == "1/1" and gap.unseen_ns == 0
    assert gap.names[0] == ("video.py(12): decode_frames", "python", 600 * US)
    assert sorted(gap.names[1:]) == [("(nothing recorded)", "", 10 * US), ("cudaLaunchKernel", "runtime", 10 * US)]


def test_a_gap_the_work_after_it_waited_out_is_waiting_on_unseen_work():
    trace = unseen_gap()
    gap = _gap(trace, 100, 800)  # a part of the device's idle 8-800
    # k's unexplained wait: 800 - 14 - 50 = 736 us, ending at its start: 64-800, of which 100-800 is in the gap
    assert gap.unseen_ns == 700 * US
    assert gap.names[0] == ("cudaStreamSynchronize", "runtime", 700 * US)
    # idle.py puts the device's idle time while the host is in the synchronising call (20-800, 980-990) down to
    # sync; the graph says 736 us of it was waiting on unseen work
    analysis = gpu_analysis(trace)
    assert unseen_by_cause(trace, analysis) == {0: {"sync": 736 * US}}
    assert (800 * US - 14 * US) - LATENCY_CAP_NS == 736 * US


def test_thread_names_keep_the_programs_frame_around_an_op():
    trace = make_trace([
        row("python", "train.py(40): step", 0, 100),
        row("python", "torch/nn/modules/module.py(1): _call_impl", 10, 80),
        row("cpu_op", "aten::mm", 20, 50),
    ])
    names, frame = thread_names(trace, "1/1", 0, 100 * US)
    assert names[0] == ("aten::mm", "cpu_op", 50 * US) and frame == "train.py(40): step"


def test_thread_names_read_the_rows_near_the_gap_as_the_whole_thread_gives_them(monkeypatch):
    from opscope.analyses import gap_causes as module

    # an annotation long before the gap that lasts into it, a frame and an op that start together (the longer
    # first), another thread's op over the whole gap, events after it
    trace = make_trace([
        row("user_annotation", "forward", 0, 500),
        row("python", "train.py(40): step", 300, 300),
        row("cpu_op", "aten::mm", 300, 100),
        row("cpu_op", "aten::add", 300, 100, tid=2),
        row("cpu_op", "aten::relu", 650, 10),
    ])
    assert module._longest_named(trace) == 500 * US
    # 350-620, clipped: the frame (350-600) outermost, forward (350-500) inside it, the op (350-400) innermost:
    # the op 50, forward 100 (its frame around it), the frame 100, nothing 20 (fourth: left out)
    names, frame = thread_names(trace, "1/1", 350 * US, 620 * US)
    assert names == [("forward", "user_annotation", 100 * US), ("train.py(40): step", "python", 100 * US),
                     ("aten::mm", "cpu_op", 50 * US)]
    assert frame == "train.py(40): step"
    monkeypatch.setattr(module, "_longest_named", lambda trace: None)  # rows not in time order: all of the thread's
    assert thread_names(trace, "1/1", 350 * US, 620 * US) == (names, frame)


def test_the_idle_finding_says_waiting_on_unseen_work_not_sync():
    found = advise(unseen_gap(), only=["gpu-idle"]).findings[0]
    causes = {e["what"]: e["idle_ns"] for e in found.evidence if e["what"].startswith("idle:")}
    assert causes["idle: waiting on unseen work"] == 736 * US
    assert causes.get("idle: sync", 0) < 100 * US
    gap = next(e for e in found.evidence if e["what"] == "gap" and e["unseen_ns"])
    assert gap["host"].startswith("waiting on work the trace does not show")
    assert "host-sync" not in found.remedy and "sync (" not in found.remedy


def test_references_to_findings_that_are_not_there_are_dropped():
    f = Finding("gpu-idle", "t", 1, None, "", "x (see the host-sync finding); y (see the gpu-idle finding)")
    assert referring_to_found([f])[0].remedy == "x; y (see the gpu-idle finding)"


def test_whatif_idle_cause_removes_that_causes_idle_only():
    trace = host_gap()
    # idle causes: host_wait 0-10, 100-700 (nothing launched outstanding) and 900-1000; sync 800-900 (the host in
    # the call, the device drained). The host's time in host_wait: the step's own 0-10 and 900-1000, 600 of the
    # Python slice 14-700 (frames are no slices: one slice of the thread's Python time): removed, a launches at
    # 0-4 and runs 10-90, the host is back at 4 + 86 = 90 and launches b 90-100; b starts at the later of its
    # launch's lag (10 after: 110) and the stream's turnaround after a (the cap, 50 after 90: 140), runs 140-220;
    # the host's 80 before the wait bring it to 180, the wait returns 100 after b: 320
    table, picked = whatif_table(trace, [parse_change("idle:host_wait=0")])
    assert table["replayed_ns"].to_pylist() == [1000 * US] and table["predicted_ns"].to_pylist() == [320 * US]
    assert picked[0] > 0
    # sync: the wait's return 800-900 is sync's idle; its explained part (the first 50 us, the latency cap) goes,
    # the 50 beyond the cap is unexplained
    sync, _ = whatif_table(trace, [parse_change("idle:sync=0")])
    assert sync["predicted_ns"].to_pylist() == [1000 * US - LATENCY_CAP_NS]
    unexplained, _ = whatif_table(trace, [parse_change("idle:unexplained=0")])
    plain, _ = whatif_table(trace, [parse_change("idle=0")])
    assert unexplained["predicted_ns"].to_pylist() == plain["predicted_ns"].to_pylist() == [950 * US]
    both, _ = whatif_table(trace, [parse_change("idle:sync=0"), parse_change("idle=0")])
    assert both["predicted_ns"].to_pylist() == [900 * US]


def test_whatif_idle_sync_leaves_a_wait_on_unseen_work():
    trace = unseen_gap()
    # sync's idle parts: k's explained launch latency 14-64 inside the call (20-64: 44) and the wait's return
    # 980-990 (10); the 736 us k waited beyond the cap are not sync's: 1000 - 44 - 10
    same, _ = whatif_table(trace, [parse_change("idle:sync=0")])
    assert same["predicted_ns"].to_pylist() == [946 * US]
    # its wait gone, k starts as its stream's work usually starts: at the later of its launch's end plus the
    # stream's usual launch lag (a's: 1) and a's end plus the queue's cap (no queued work to learn a usual gap from):
    # max(15, 58) = 58, ends 238; the wait returns 10 later, then the step's 10: 258
    gone, _ = whatif_table(trace, [parse_change("idle:unexplained=0")])
    assert gone["predicted_ns"].to_pylist() == [258 * US]


@pytest.mark.parametrize("text", ["idle:bogus=0", "idle:=0", "idle:sync:x=0"])
def test_bad_idle_causes_are_usage_errors(text):
    with pytest.raises(UsageError, match="idle: takes a cause"):
        parse_change(text)


@pytest.mark.parametrize("timeline", [host_gap, unseen_gap])
def test_idle_candidates_in_c_agree_with_the_definition(timeline):
    # the nodes whose host time or explained lag idle time covers: one C pass against the Arrow definition
    from opscope.analyses import whatif
    from opscope.analyses.depgraph import dependency_graph
    from opscope.analyses.idle import cause_spans
    from opscope.analyses.replay import replay

    trace = timeline()
    graph = dependency_graph(trace)
    spans = cause_spans(gpu_analysis(trace))
    everywhere = whatif._union_spans([part for by_cause in spans.values() for part in by_cause.values()])
    bound = replay(graph).bound_by
    got = whatif._idle_candidates_in_c(graph, bound, everywhere)
    want = whatif._idle_candidates(graph, bound, everywhere)
    assert got is not None
    assert [a.to_pylist() for a in got] == [a.to_pylist() for a in want]
    assert len(want[0]) and len(want[3])  # host time and a lag inside the idle time, both


@pytest.mark.parametrize("timeline", [host_gap, unseen_gap])
def test_host_covered_reads_each_nodes_span_from_the_graph(timeline, monkeypatch):
    # per host node, its span [start, end) against each cause's spans summed by hand, in C and by the definition
    from opscope.analyses import depgraph, whatif
    from opscope.analyses.depgraph import dependency_graph
    from opscope.analyses.idle import cause_spans
    from opscope.analyses.replay import replay

    trace = timeline()
    graph = dependency_graph(trace)
    spans = cause_spans(gpu_analysis(trace))
    everywhere = whatif._union_spans([part for by_cause in spans.values() for part in by_cause.values()])
    host = whatif._idle_candidates(graph, replay(graph).bound_by, everywhere)[0]
    assert host.type == pa.int32() and len(host)
    sets = {cause: whatif._union_spans([by_cause[cause] for by_cause in spans.values() if cause in by_cause])
            for cause in sorted({c for by_cause in spans.values() for c in by_cause})}
    sets["none at all"] = (pa.array([], pa.int64()), pa.array([], pa.int64()))
    got = whatif._host_covered(graph, host, sets)  # every set in one pass
    monkeypatch.setattr(depgraph, "_graph", None)  # the definition (covered_keys, set by set)
    by_definition = whatif._host_covered(graph, host, sets)
    monkeypatch.undo()
    checked = 0
    for cause, (starts, ends) in sets.items():
        pairs = list(zip(starts.to_pylist(), ends.to_pylist()))
        want = [(node, ns) for node in host.to_pylist()
                if (ns := sum(max(0, min(e, graph.end[node]) - max(s, graph.start[node])) for s, e in pairs)) > 0]
        assert list(zip(*(a.to_pylist() for a in got[cause]))) == want
        assert list(zip(*(a.to_pylist() for a in by_definition[cause]))) == want
        checked += len(want)
    assert checked and len(sets) > 2


def test_host_time_per_cause_is_named_by_event_or_category():
    from opscope.analyses.gap_causes import host_by_cause

    # host_wait (0-10, 100-700, 900-1000): the step mark's own time (0-10, 900-1000) is the program between its ops,
    # the thread's Python time, as is the slice 100-700 (the frame is no slice): 110 + 600; sync (800-900): the
    # wait's return, its explained part (the latency cap), by its call; the rest (10-20, 700-720): the launch calls
    # (10-14, 700-710) and the Python time after them (14-20, 710-720)
    assert host_by_cause(host_gap()) == {
        "host_wait": [("(python)", 710 * US)], "sync": [("cudaDeviceSynchronize", LATENCY_CAP_NS)],
        "other": [("(python)", 16 * US), ("cudaLaunchKernel", 14 * US)]}
