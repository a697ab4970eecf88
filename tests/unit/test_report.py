"""The result shape and its renderers: what each format shows of a Report built by hand."""

from __future__ import annotations

import csv
import io
import json

import pyarrow as pa
import pytest
from rich.console import Console

from opscope.render import ReportRenderer, Terminal
from opscope.report import Column, Report, Section, single


def render(report: Report, fmt: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    ReportRenderer.named(fmt)().render(report, Terminal(Console(file=out, width=200, color_system=None),
                                                        Console(file=err, width=200, color_system=None)))
    return out.getvalue(), err.getvalue()


def test_registry_holds_the_three_report_formats_and_refuses_others():
    assert ReportRenderer.names() == ("table", "json", "csv")
    with pytest.raises(ValueError, match="no renderer named 'xml'"):
        ReportRenderer.named("xml")
    with pytest.raises(ValueError, match="no renderer named 'html' among the ReportRenderers"):
        ReportRenderer.named("html")  # registered, but it shows pages, not reports


def test_every_registered_renderer_is_the_class_its_entry_names():
    from opscope.render import RENDERERS, load
    from opscope.render.dot import FORMATS, GraphRenderer
    from opscope.render.export import ExportRenderer
    from opscope.render.html import HtmlRenderer

    kinds = {"report": ReportRenderer, "page": HtmlRenderer, "export": ExportRenderer, "graph": GraphRenderer}
    assert set(RENDERERS) == set(kinds)
    found = {}
    for kind, entries in RENDERERS.items():
        for name, where in entries.items():
            cls = load(where)
            assert issubclass(cls, kinds[kind]) and cls.kind == kind and cls.name == name, where
            assert kinds[kind].named(name) is cls
            # a renderer of files names the file's ending; only the terminal's renderers may write nowhere
            assert cls.extension.startswith(".") or (kind == "report" and cls.extension == ""), where
            found[name] = cls
    assert ExportRenderer.names() == ("chrome", "perfetto")
    assert set(GraphRenderer.names()) == set(FORMATS.values()) == {"dot", "svg", "png", "pdf"}
    assert {n for n, c in found.items() if c.binary} == {"perfetto", "png", "pdf"}  # protobuf and images
    assert found["chrome"].extension == found["json"].extension == ".json"


def test_data_formats_write_the_first_data_section_cut_to_its_limit_and_notes_on_stderr():
    table = pa.table({"name": ["a", "b", "c"], "total_ns": [3, 2, 1]})
    report = Report([Section("shown", "terminal only", pa.table({"x": [9]}), data=False),
                     Section("rows", "Rows", table, limit=2, notes=["two of three"], legend="columns")],
                    headline="the conclusion", notes=["about all of it"])
    out, err = render(report, "json")
    assert json.loads(out) == [{"name": "a", "total_ns": 3}, {"name": "b", "total_ns": 2}]
    assert err.splitlines() == ["opscope: the conclusion", "opscope: two of three", "opscope: about all of it"]
    out, _ = render(report, "csv")
    assert list(csv.DictReader(io.StringIO(out))) == [{"name": "a", "total_ns": "3"}, {"name": "b", "total_ns": "2"}]


def test_csv_quotes_trace_text_a_spreadsheet_would_read_as_a_formula_and_keeps_numbers():
    names = ["=HYPERLINK(\"http://x\")", "+1", "-2+3", "@SUM(A1)", "\tcmd", "aten::add", "a=b"]
    table = pa.table({"name": names, "delta_ns": [-5, 5, 0, -1, 2, 3, -4]})
    out, _ = render(single(table, "t"), "csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [r["name"] for r in rows] == ["'" + n for n in names[:5]] + ["aten::add", "a=b"]
    assert [int(r["delta_ns"]) for r in rows] == [-5, 5, 0, -1, 2, 3, -4]  # negative numbers stay numbers


def test_column_show_decides_where_a_column_appears():
    table = pa.table({"name": ["k"], "path": ["a;k"], "sketch": [[1, 2]], "nested": [[{"x": 1}]]})
    columns = {"path": Column(show="data"), "sketch": Column(show="terminal"), "nested": Column(show="json")}
    report = single(table, "t", columns=columns)
    assert json.loads(render(report, "json")[0]) == [{"name": "k", "path": "a;k", "nested": [{"x": 1}]}]
    assert render(report, "csv")[0].splitlines()[0] == "name,path"
    terminal = render(report, "table")[0]
    assert "sketch" in terminal and "path" not in terminal and "nested" not in terminal


def test_sections_are_computed_only_when_a_renderer_shows_them():
    computed = []

    def expensive() -> pa.Table:
        computed.append("idle")
        return pa.table({"cause": ["sync"]})

    report = Report([Section("breakdown", "B", pa.table({"busy_ns": [5]})),
                     Section("idle", "I", expensive, data=False)])
    render(report, "json")
    assert computed == []
    render(report, "table")
    assert computed == ["idle"]


def test_terminal_draws_bytes_sparklines_bars_and_trees_from_the_hints():
    table = pa.table({"module": ["Net", "Conv"], "depth": [0, 1], "peak_bytes": [3 * 2**20, 1536],
                      "over_time": [[0, 4, 8], [8, 0, 8]], "level": [10, 5], "memcpy_dtoh_ns": [0, 0]})
    columns = {"module": Column(indent_by="depth"), "depth": Column(show="data"),
               "over_time": Column(show="terminal", sketch="sparkline", scale="peak_bytes"),
               "level": Column(sketch="bar", scale="depth"), "memcpy_dtoh_ns": Column(hide_if_zero=True)}
    lines = render(single(table, "tree", columns=columns), "table")[0].splitlines()
    net = next(line for line in lines if "Net" in line)
    conv = next(line for line in lines if "Conv" in line)
    assert "3.00 MiB" in net and "1.50 KiB" in conv
    assert "│   Conv" in conv  # two spaces per level
    assert "▁▁▁" in net  # values far below the 3 MiB peak
    assert "█" * 30 in net and "█" * 30 in conv  # each bar is the largest of its group (its depth)
    assert not any("memcpy_dtoh_ns" in line or "depth" in line for line in lines)


def test_terminal_shows_trace_text_as_text_never_as_markup():
    hostile = "[bold red]x[/] [/nonexistent] \x1b[2J"
    report = Report([Section("rows", hostile, pa.table({"name": [hostile]}), notes=[hostile])], title=hostile)
    out, _ = render(report, "table")
    assert "[bold red]x[/]" in out and "[/nonexistent]" in out


def test_an_empty_report_says_why_in_one_line_and_data_formats_still_write_a_document():
    report = Report([Section("rows", table=pa.table({"a": pa.array([], pa.int64())}))], empty="no GPU activity")
    assert render(report, "table")[0] == "opscope: no GPU activity\n"
    out, err = render(report, "json")
    assert json.loads(out) == [] and err == "opscope: no GPU activity\n"


def test_then_appends_a_report_for_the_terminal_and_keeps_the_first_document():
    first = single(pa.table({"a": [1]}), "first")
    second = Report([Section("findings", records=[{"rule": "r"}], terminal=False),
                     Section("f1", "1. a finding", text="why")], title="advice", legend="more: opscope advise")
    both = first.then(second)
    assert json.loads(render(both, "json")[0]) == [{"a": 1}]
    terminal = render(both, "table")[0]
    assert terminal.index("first") < terminal.index("advice") < terminal.index("1. a finding")
    assert terminal.rstrip().endswith("more: opscope advise")
