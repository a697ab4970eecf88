"""Outputs that cannot be misread, errors that point the right way, progress."""

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
    # ProfilerStep#4 is three times the others: a slow outlier, counted in the mean step (as every command counts
    # it: (4 x 100 + 300) / 5 = 140 us) and named with the mean without it (100 us); kernels on device id 2
    events, start = [], 0
    for n, dur in ((1, 100), (2, 100), (3, 100), (4, 300), (5, 100)):
        events.append(x(f"ProfilerStep#{n}", start, dur, cat="user_annotation"))
        start += dur
    events.append(x("k", 10, 5, cat="kernel", pid=2, tid=7, device=2, stream=7))
    trace = open_trace(write_trace(tmp_path / "t.json", events), use_cache=False)
    fields = _fields(summary_report(trace))
    assert fields["steps"].startswith("5 (mean 140.000 us, median 100.000 us")
    assert "outliers ProfilerStep#4: without them mean 100.000 us" in fields["steps"]
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


def _terminal(report) -> str:
    import io

    from rich.console import Console

    from opscope.render import Terminal
    from opscope.render.terminal import TerminalRenderer

    out = Console(file=io.StringIO(), width=250, markup=False)
    TerminalRenderer().render(report, Terminal(out, Console(file=io.StringIO())))
    return out.file.getvalue()


def test_query_shows_timestamps_and_floats_as_they_are(tmp_path):
    from opscope.query import query_report, run_sql

    # an epoch-scale ts (Nov 2023 in us since 1970), as Kineto writes them
    events = [x("aten::mm", 1_700_000_000_000_000, 21_000)]
    trace = open_trace(write_trace(tmp_path / "t.json", events), use_cache=False)
    table = run_sql(trace, "select ts_ns, dur_ns, dur_ns / 1000.0 as us, dur_ns * 1.0 / 3 as third from events")
    text = _terminal(query_report(table, None))
    assert "1,700,000,000,000,000,000" in text  # the timestamp in ns, not "28333333333.33 min"
    assert "min" not in text
    assert "21.000 ms" in text  # dur_ns is a duration of the model: a time unit
    assert "21,000 " in text and "e+" not in text  # 21000.0 us, not 2.1e+04
    assert "7,000,000" in text


def test_format_plain():
    from opscope.units import format_plain

    assert format_plain(21000.0) == "21,000"
    assert format_plain(0.5) == "0.5"
    assert format_plain(1 / 3) == "0.3333"
    assert format_plain(1.5e-7) == "0.00000015"
    assert format_plain(-1234567) == "-1,234,567"
    assert format_plain(None) == "-"


def test_multi_rank_advice_says_which_rank_each_finding_concerns(tmp_path):
    from opscope.advise import advise
    from opscope.advise.report import advice_report

    def rank(r: int):
        path = write_trace(tmp_path / f"rank{r}.json", small_gpu_trace(), header={"distributedInfo": {"rank": r}})
        return open_trace(path, use_cache=False)

    first, other = rank(3), rank(5)
    alone = advise(first)
    assert alone.findings and all("concerns" not in row for row in alone.rows())  # one trace: nothing to tell apart
    advice = advise(first, peers=(other,))
    assert advice.findings and all(row["concerns"] == "rank 3" for row in advice.rows())
    report = advice_report(advice, str(tmp_path / "rank3.json"))
    titles = [s.title for s in report.sections if s.key.startswith("finding_")]
    assert titles and all(t.split(". ", 1)[1].startswith("rank 3: ") for t in titles)
    assert "(rank 3)" in report.title
    assert any("rank 5 (rank5.json)" in n and "rank 3" in n for n in report.notes)


def test_diff_of_legacy_traces_has_no_step_rows_and_says_what_fractional_calls_mean(tmp_path):
    from opscope.diff import compare

    # legacy Kineto (2021) writes ProfilerStep#N as an "Operator", like the ops; aten::add runs in step 1 only
    def legacy(name: str, add_dur: int):
        events = [x("ProfilerStep#1", 0, 100, cat="Operator"), x("aten::mm", 10, 40, cat="Operator"),
                  x("aten::add", 60, add_dur, cat="Operator"),
                  x("ProfilerStep#2", 100, 100, cat="Operator"), x("aten::mm", 110, 40, cat="Operator")]
        return open_trace(write_trace(tmp_path / name, events), use_cache=False)

    c = compare(legacy("base.json", 20), legacy("new.json", 30))
    rows = {r["name"]: r for r in c.rows.to_pylist() if r["kind"] == "op"}
    assert set(rows) == {"aten::mm", "aten::add"}  # the steps are what is compared, not rows
    assert rows["aten::add"]["calls_base"] == 0.5  # one call over two steps
    assert rows["aten::add"]["delta_ns"] == 5 * US  # (30 - 20) us over two steps
    assert any("a fraction such as 0.5 calls means the op ran in some steps only" in n for n in c.notes)


def test_json_that_is_not_a_trace_is_named_with_what_to_open(tmp_path):
    import gzip
    import json

    from support.bad_input import assert_trace_error

    # XProf's framework_op_stats tool data: Google Charts DataTables
    op_stats = [{"cols": [{"id": "rank", "label": "Rank", "type": "number"}], "rows": [{"c": [{"v": 0}]}]}]
    (tmp_path / "op_stats.json").write_text(json.dumps(op_stats))
    message = assert_trace_error(tmp_path / "op_stats.json", "XProf", "op_stats", "not a trace", "trace viewer")
    assert "profiler stopped" not in message
    # export_memory_timeline's raw rows: [ts, action, bytes, category]
    (tmp_path / "mem.raw.gz").write_bytes(gzip.compress(json.dumps([[-1, 1, 512, 7], [10, 3, 512, 0]]).encode()))
    message = assert_trace_error(tmp_path / "mem.raw.gz", "memory timeline", "not a trace", "profile_memory=True")
    assert "profiler stopped" not in message
    # events whose ts is text that is no number
    path = write_trace(tmp_path / "text_ts.json", [{**x("a", 0, 5), "ts": "2024-01-01T00:00:00Z"},
                                                   {**x("b", 0, 5), "ts": "soon"}])
    message = assert_trace_error(path, "2 events", "none with a usable time", '"ts": "2024-01-01T00:00:00Z"',
                                 "numbers of microseconds")
    assert "profiler stopped" not in message
    # a trace that really holds nothing keeps the message about the profiler
    assert_trace_error(write_trace(tmp_path / "empty.json", []), "holds no trace events", "profiler stopped")


def test_parse_command_takes_python_c():
    import sys

    from opscope.capture.launch import parse_command

    target = parse_command(["python", "-u", "-c", "print(1)", "a", "-b"])
    assert (target.kind, target.value, target.args) == ("code", "print(1)", ["a", "-b"])
    assert target.interpreter == sys.executable or target.interpreter == "python"


def test_progress_is_decided_by_content_size_or_elapsed_time():
    from opscope.cli.common import show_progress

    mb = 1 << 20
    assert show_progress(54 * mb, 0.0)  # a 3 MB .gz holding 54 MB of JSON: a bar from the start
    assert not show_progress(4 * mb, 0.2) and show_progress(4 * mb, 1.5)  # mid-size: once it is slow
    assert not show_progress(100_000, 30.0)  # tiny: never


def test_content_size_reads_the_gzip_trailer(tmp_path):
    import gzip

    from opscope.cli.common import content_size

    text = b'{"traceEvents": [' + b"0," * 1_500_000 + b"0]}"
    (tmp_path / "t.json.gz").write_bytes(gzip.compress(text))
    (tmp_path / "t.json").write_bytes(text)
    assert (tmp_path / "t.json.gz").stat().st_size < 100_000
    assert content_size(tmp_path / "t.json.gz") == len(text) == content_size(tmp_path / "t.json")


def test_read_progress_starts_a_bar_only_when_decided(tmp_path, monkeypatch):
    import io

    from rich.console import Console

    from opscope.cli import common

    monkeypatch.setattr(common, "show_progress", lambda content, elapsed: content >= 100)
    monkeypatch.setattr(common, "err", Console(file=io.StringIO()))
    small = common._ReadProgress(tmp_path / "a.json", 10)
    small(5, 10)
    assert small.bar is None
    big = common._ReadProgress(tmp_path / "b.json", 1000)
    big(5, 1000)
    assert big.bar is not None
    big.close()
