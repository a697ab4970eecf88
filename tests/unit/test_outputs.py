"""Outputs that cannot be misread, errors that point the right way, progress (issue 13, parts 6-8)."""

from __future__ import annotations

from support.tracefiles import small_gpu_trace, write_trace, x

from opscope.analyses.filters import EventFilter
from opscope.analyses.ops import op_table
from opscope.analyses.reports import steps_report, summary_report
from opscope.ingest import open_trace

US = 1000


def _fields(report) -> dict:
    return dict(next(s for s in report.sections if s.key == "overview").fields)


def test_summary_names_outlier_steps_and_device_ids(tmp_path):
    # ProfilerStep#4 is three times the others: left out as a slow outlier; kernels on device id 2
    events, start = [], 0
    for n, dur in ((1, 100), (2, 100), (3, 100), (4, 300), (5, 100)):
        events.append(x(f"ProfilerStep#{n}", start, dur, cat="user_annotation"))
        start += dur
    events.append(x("k", 10, 5, cat="kernel", pid=2, tid=7, device=2, stream=7))
    trace = open_trace(write_trace(tmp_path / "t.json", events), use_cache=False)
    fields = _fields(summary_report(trace))
    assert "outliers ProfilerStep#4 left out" in fields["steps"]
    assert "device id 2)" in fields["GPU busy"]
    assert "device(s)" not in fields["GPU busy"]
    assert "ProfilerStep#4" in steps_report(trace, None).sections[0].legend


def test_ops_total_pct_of_nested_annotations_is_a_share_of_their_union(tmp_path):
    # ProfilerStep#1 [0, 100) holds A [10, 60) holding B [20, 40) and an op [60, 100); step 2 [100, 200)
    # holds A [110, 130) and an op [130, 200). The annotations' self times add up to only
    # 10 + 30 + 20 + 10 + 20 = 90 us (the ops take the rest): a total over that would read 111% for a step.
    events = [x("ProfilerStep#1", 0, 100, cat="user_annotation"), x("A", 10, 50, cat="user_annotation"),
              x("B", 20, 20, cat="user_annotation"), x("aten::mm", 60, 40),
              x("ProfilerStep#2", 100, 100, cat="user_annotation"), x("A", 110, 20, cat="user_annotation"),
              x("aten::mm", 130, 70)]
    trace = open_trace(write_trace(tmp_path / "t.json", events), use_cache=False)
    rows = {r["name"]: r for r in op_table(trace, filt=EventFilter(kinds=("user_annotation",))).to_pylist()}
    # the union of all annotations is [0, 200) = 200 us
    assert rows["ProfilerStep#1"]["total_pct"] == 50.0
    assert rows["A"]["total_pct"] == round(100 * (50 + 20) / 200, 2)
    assert rows["B"]["total_pct"] == 10.0
    assert all(r["total_pct"] <= 100 for r in rows.values())


def test_ops_total_pct_counts_overlapping_calls_of_a_group_once(tmp_path):
    # the same op on two threads at once: [0, 100) and [50, 150) cover 150 us, not 200
    events = [x("aten::mm", 0, 100, tid=1), x("aten::mm", 50, 100, tid=2), x("aten::add", 200, 50, tid=1)]
    trace = open_trace(write_trace(tmp_path / "t.json", events), use_cache=False)
    rows = {r["name"]: r for r in op_table(trace).to_pylist()}
    # union of all: [0, 150) + [200, 250) = 200 us
    assert rows["aten::mm"]["total_pct"] == 75.0 and rows["aten::add"]["total_pct"] == 25.0
