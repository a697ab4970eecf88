"""The cuts and marks of `opscope export` on a trace built by hand (expected rows worked out below)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from support.gpu import kernel, launch, step
from support.tracefiles import write_trace, x

from opscope.compose.export import plan
from opscope.compose.export.marks import finding_marks
from opscope.compose.export.select import Cut, check_kinds, kept_links, kept_rows, step_span
from opscope.errors import UsageError
from opscope.ingest import open_trace

US = 1000


def events() -> list[dict]:
    """Steps 1 [0,1000) 2 [1000,2000) 3 [2000,5000) us. Device 0 stream 7 busy [100,300) k_a, [1100,1105) k_b,
    [4000,4500) k_c: gaps [0,100) [300,1100) [1105,4000) [4500,5000). k_c is launched at 3900, so its gap is
    nothing-launched (host_wait) for 2795 us and launched-not-started (other) for 100 us."""
    return [
        step(1, 0, 1000), step(2, 1000, 1000), step(3, 2000, 3000),
        x("aten::mm", 40, 30), launch(50, 1),
        x("aten::add", 1040, 20), launch(1050, 2),
        x("aten::relu", 3890, 20), launch(3900, 3),
        kernel("k_a", 100, 200, corr=1), kernel("k_b", 1100, 5, corr=2), kernel("k_c", 4000, 500, corr=3),
    ]


@pytest.fixture
def trace(tmp_path):
    return open_trace(write_trace(tmp_path / "t.json", events()), use_cache=False)


def names(trace, rows: pa.Array) -> list[str]:
    return sorted(trace.events["name"].take(rows).to_pylist())


def test_no_cut_keeps_everything(trace):
    assert len(kept_rows(trace, Cut())) == 12
    assert kept_links(trace, kept_rows(trace, Cut())).num_rows == 3


def test_steps_cut(trace):
    rows = kept_rows(trace, Cut(steps=[2]))
    # the step's annotation, its op and launch, and the kernel launched in it (by correlation)
    assert names(trace, rows) == ["ProfilerStep#2", "aten::add", "cudaLaunchKernel", "k_b"]
    assert kept_links(trace, rows).num_rows == 1
    assert step_span(trace, [2]) == (1000 * US, 2000 * US)
    assert step_span(trace, [2, 3]) == (1000 * US, 5000 * US)


def test_min_dur_cut_drops_short_slices_and_their_arrows(trace):
    rows = kept_rows(trace, Cut(min_dur_ns=10 * US))
    # launches (5 us) and k_b (5 us) go; with the launches gone no arrow has both ends
    assert names(trace, rows) == ["ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#3", "aten::add", "aten::mm",
                                  "aten::relu", "k_a", "k_c"]
    assert kept_links(trace, rows).num_rows == 0
    assert len(kept_rows(trace, Cut(min_dur_ns=5 * US))) == 12  # "shorter than": 5 us stays at 5 us


def test_kinds_cut(trace):
    rows = kept_rows(trace, Cut(kinds=["kernel", "cpu_op"]))
    assert names(trace, rows) == ["aten::add", "aten::mm", "aten::relu", "k_a", "k_b", "k_c"]


def test_bad_kind_names_the_valid_ones():
    with pytest.raises(UsageError, match=r"unknown kind 'kernels'.*cpu_op, python"):
        check_kinds(["kernel", "kernels"])


def test_steps_that_select_nothing(trace):
    with pytest.raises(UsageError, match=r"selects no step \(its steps are 1 to 3"):
        step_span(trace, [7])


def test_findings_mark_slowest_step_and_longest_gap(trace):
    marks = finding_marks(trace, None)
    slow = [m for m in marks if m.args.get("finding") == "slow step"]
    assert slow[0].args["step"] == 3 and slow[0].args["rank"] == 1 and slow[0].args["outlier"] == "slow"
    assert (slow[0].ts_ns, slow[0].dur_ns) == (2000 * US, 3000 * US)
    gaps = [m for m in marks if m.args.get("finding") == "idle gap"]
    assert [(g.ts_ns, g.dur_ns) for g in gaps] == [(1105 * US, 2895 * US), (300 * US, 800 * US),
                                                   (4500 * US, 500 * US), (0, 100 * US)]
    assert gaps[0].args["cause"] == "host_wait" and gaps[0].args["cause_pct"] == round(100 * 2795 / 2895, 1)
    # inside step 2 only the gap that overlaps it and step 2 itself (not among the 3 slowest? all 3 are)
    inside = finding_marks(trace, (1000 * US, 2000 * US))
    assert sorted((m.args["finding"], m.ts_ns) for m in inside) == [
        ("idle gap", 300 * US), ("idle gap", 1105 * US), ("slow step", 1000 * US)]


def test_plan_counts(trace):
    p = plan(trace, Cut(steps=[2]))
    assert len(p.rows) == 4 and p.total == 12 and p.links.num_rows == 1
    assert [m.name for m in p.marks if m.track == "steps"] == ["step 2"]
    assert not any(m.track == "findings" for m in plan(trace, Cut(), findings=False).marks)


def test_perfetto_missing_is_one_line(monkeypatch):
    import sys

    from opscope.render.export.perfetto import require

    monkeypatch.setitem(sys.modules, "perfetto.protos.perfetto.trace.perfetto_trace_pb2", None)
    with pytest.raises(UsageError, match=r"pip install 'opscope\[view\]'"):
        require()


def test_every_track_is_named_after_its_process_thread_or_device_stream():
    from support import make_trace, row

    trace = make_trace([row("cpu_op", "a", 0, 5, pid="12", tid="34"), row("marker", "m", 1, 0, pid=None, tid=None),
                        row("kernel", "k", 2, 3, pid="0", tid="7", device=0, stream=7)],
                       metadata={"process_names": {"12": "python3"}, "thread_names": {}})
    lay = plan(trace, Cut()).layout
    assert lay.process_name == {"12": "python3", "": "process without an id", "0": "GPU 0"}
    assert lay.track_name == {("12", "34"): "thread 34", ("", ""): "thread without an id",
                              ("0", "7"): "GPU 0 stream 7"}
    assert lay.thread_name[("0", "7")] == "stream 7"  # the Chrome JSON's thread name, under its process "GPU 0"


def test_memory_goes_under_its_device_s_process():
    from opscope.compose.export import memory_processes

    trace = open_trace_of_gpu_work()
    lay = plan(trace, Cut()).layout
    memory = pa.table({"device_type": [1, 1, 0], "device_id": [0, 0, -1]})
    assert memory_processes(memory, lay) == {(1, 0): "0"}
    # the program's cuda:0 on the profiler's GPU 2 (CUDA_VISIBLE_DEVICES): one device each, the same one
    lay.device_of = {"2": 2}
    assert memory_processes(memory, lay) == {(1, 0): "2"}
    two = pa.table({"device_type": [1, 1], "device_id": [0, 1]})
    assert memory_processes(two, lay) == {}  # two devices' memory, numbers that do not agree: none guessed
    lay.device_of = {"0": 0, "1": 1}
    assert memory_processes(two, lay) == {(1, 0): "0", (1, 1): "1"}


def open_trace_of_gpu_work():
    from support import make_trace, row

    return make_trace([row("kernel", "k", 2, 3, pid="0", tid="7", device=0, stream=7)])
