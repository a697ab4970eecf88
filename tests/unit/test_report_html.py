"""The HTML report's pieces: the module → op → kernel hierarchy (values by hand from the fixtures), the escaping of
chart data, tables formatted as the terminal formats them, and a page whose every number comes from the
analyses (checked against the CLI's report functions)."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

import pytest
from support.shared import shared_trace
from support.tracefiles import small_gpu_trace, write_trace, x
from support.views import hand_trace

from opscope.analyses.hierarchy import NO_MODULE, NO_OP, time_hierarchy
from opscope.ingest import open_trace
from opscope.units import format_ns

pytest.importorskip("jinja2")
pytest.importorskip("altair")


class _Table(HTMLParser):
    """The header names and each row's data-value cells of one table of the page."""

    def __init__(self, table_id: str) -> None:
        super().__init__()
        self.table_id, self.inside, self.columns, self.rows = table_id, False, [], []
        self._th = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table" and a.get("id") == self.table_id:
            self.inside = True
        elif self.inside and tag == "tr":
            self.rows.append([])
        elif self.inside and tag == "td":
            self.rows[-1].append(a.get("data-value"))
        elif self.inside and tag == "th":
            self.columns.append(a.get("data-col"))

    def handle_endtag(self, tag):
        if tag == "table":
            self.inside = False


def table_values(page: str, table_id: str) -> tuple[list[str], list[list[str]]]:
    parser = _Table(table_id)
    parser.feed(page)
    return parser.columns, [r for r in parser.rows if r]


def _leaves(tree) -> dict[tuple[str, ...], int]:
    """Each node with a value, keyed by its path of names from the root."""
    rows = {r["id"]: r for r in tree.table.to_pylist()}

    def path(r):
        names = []
        while r["parent"] is not None:
            names.append(r["name"])
            r = rows[r["parent"]]
        return tuple(reversed(names))

    return {path(r): r["value_ns"] for r in rows.values() if r["value_ns"]}


def test_host_hierarchy_is_module_then_op_with_exclusive_op_time(tmp_path):
    trace = open_trace(write_trace(tmp_path / "t.json", hand_trace()))
    tree = time_hierarchy(trace)
    us = 1000
    assert _leaves(tree) == {
        ("Net_0", "Linear_0", "aten::linear"): 20 * us,  # 240 less the nested addmm
        ("Net_0", "Linear_0", "aten::addmm"): 220 * us,
        ("Net_0", "ReLU_0", "aten::relu"): 120 * us,  # two calls of the same module path
        ("Net_0", "Linear_1", "aten::linear"): 160 * us,
        ("Net_0", "aten::add"): 30 * us,
        (NO_MODULE, "aten::sum"): 40 * us,
        (NO_MODULE, "autograd::engine::evaluate_function: AddmmBackward0"): 300 * us,
    }
    assert tree.total_ns == 890 * us
    assert "host op time" in tree.measure


def test_device_hierarchy_charges_kernels_to_the_outermost_op(tmp_path):
    trace = open_trace(write_trace(tmp_path / "t.json", small_gpu_trace()))
    tree = time_hierarchy(trace)
    assert _leaves(tree) == {("aten::conv2d", "conv_kernel"): 260_000, (NO_OP, "relu_kernel"): 100_000}
    assert tree.total_ns == 360_000
    assert "device time" in tree.measure


def test_small_leaves_fold_into_one_entry_and_keep_their_time(tmp_path):
    events = [x("aten::big", 0, 10_000)] + [x(f"aten::tiny{i}", 20_000 + i * 10, 1) for i in range(5)]
    trace = open_trace(write_trace(tmp_path / "t.json", events))
    tree = time_hierarchy(trace, min_share=0.01)
    leaves = _leaves(tree)
    assert leaves == {("aten::big",): 10_000_000, ("(smaller entries)",): 5_000}
    assert tree.total_ns == 10_005_000


def test_chart_data_cannot_end_its_script_element():
    from opscope.render.html.document import _script_json

    text = _script_json({"name": "</script><script>alert(1)</script>", "amp": "a&b"})
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text) == {"name": "</script><script>alert(1)</script>", "amp": "a&b"}


def test_page_escapes_trace_text_and_matches_the_kernels_report(tmp_path):
    from opscope.analyses.filters import EventFilter
    from opscope.analyses.reports import kernels_report
    from opscope.compose.page import trace_page
    from opscope.render.html import HtmlRenderer

    events = small_gpu_trace()
    hostile = '<img src=x onerror="alert(1)">{{7*7}}</script>'
    events[1]["name"] = hostile  # the first aten::conv2d
    trace = open_trace(write_trace(tmp_path / "t.json", events))
    page = HtmlRenderer().text(trace_page(trace, "t.json"))
    body = page.split("<script>", 1)[0]  # the page before the inline scripts
    assert hostile not in body  # never raw in the markup
    assert "&lt;img src=x onerror=&#34;alert(1)&#34;&gt;{{7*7}}&lt;/script&gt;" in body
    assert "<img" not in body
    # the kernels table holds what `opscope kernels` computes for this trace, row for row
    expected = kernels_report(trace, EventFilter(kinds=("kernel", "memcpy", "memset", "comm")), False, "total_ns",
                              "short", None).sections[0].arrow.to_pylist()
    columns, rows = table_values(page, "table-kernels")
    assert columns[:4] == ["name", "kind", "calls", "total_ns"]
    assert [r[:4] for r in rows] == [[e["name"], e["kind"], str(e["calls"]), str(e["total_ns"])] for e in expected]
    # no external reference anywhere: the page loads nothing
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert "default-src 'none'" in page


def test_the_kernel_launch_table_shows_kernels_details_when_the_trace_records_launches(tmp_path):
    from opscope.analyses.filters import EventFilter
    from opscope.analyses.reports import kernel_launch_report
    from opscope.compose.page import trace_page
    from opscope.render.html import HtmlRenderer

    plain = open_trace(write_trace(tmp_path / "plain.json", small_gpu_trace()))
    assert 'id="table-kernel_launch"' not in HtmlRenderer().text(trace_page(plain, "plain.json"))
    launch = {"grid": [40, 2, 1], "block": [128, 1, 1], "registers per thread": 88, "shared memory": 33792,
              "est. achieved occupancy %": 4, "blocks per SM": 0.606061, "warps per SM": 2.424242}
    events = [dict(e, args={**e["args"], **launch}) if e.get("cat") == "kernel" else e for e in small_gpu_trace()]
    trace = open_trace(write_trace(tmp_path / "t.json", events))
    page = HtmlRenderer().text(trace_page(trace, "t.json"))
    expected = kernel_launch_report(trace, EventFilter(kinds=("kernel", "comm")), "total_ns", "short",
                                    None).sections[0].arrow.to_pylist()
    columns, rows = table_values(page, "table-kernel_launch")
    assert columns[:5] == ["name", "kind", "grid", "block", "calls"]
    at = columns.index("registers_per_thread")
    assert [(r[0], r[4], r[at]) for r in rows] == [(e["name"], str(e["calls"]), "88") for e in expected]


def test_sections_say_why_they_are_empty(tmp_path):
    from opscope.compose.page import trace_page

    trace = open_trace(write_trace(tmp_path / "t.json", [x("aten::add", 0, 10), x("aten::mul", 20, 5)]))
    page = trace_page(trace, "t.json")
    empty = {b.key: b.text for s in page.sections for b in s.blocks if getattr(b, "tone", "") == "empty"}
    assert set(empty) >= {"no_steps", "no_gpu", "no_kernels", "no_memory", "no_roofline"}
    assert "no ProfilerStep#N" in empty["no_steps"]


def test_every_vega_lite_chart_is_valid_against_the_schema(tmp_path):
    """The report builds specs without validating them (it costs seconds on big traces); here every Vega-Lite
    chart of a page with steps, device work, memory records and a comparison is checked against the schema."""
    import jsonschema
    from altair.vegalite.v6.schema import load_schema

    from opscope.compose.page import trace_page
    from opscope.compose.page.diff import diff_page
    from opscope.diff import compare
    from opscope.render.html.page import ChartBlock

    events = small_gpu_trace() + [
        {"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": 200,
         "args": {"Device Type": 1, "Device Id": 0, "Addr": 1, "Bytes": 4096, "Total Allocated": 4096,
                  "Total Reserved": 8192}},
        {"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": 900,
         "args": {"Device Type": 1, "Device Id": 0, "Addr": 1, "Bytes": -4096, "Total Allocated": 0,
                  "Total Reserved": 8192}}]
    trace = open_trace(write_trace(tmp_path / "t.json", events))
    other = open_trace(write_trace(tmp_path / "u.json", small_gpu_trace()))
    h100 = {"deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}]}
    modelled = open_trace(write_trace(tmp_path / "m.json", _modelled("aten::mm"), h100))
    pages = [trace_page(trace, "t.json"), diff_page(compare(trace, other, labels=("t", "u")), "t", "u"),
             trace_page(modelled, "m.json")]
    charts = [b for p in pages for s in p.sections for b in s.blocks if isinstance(b, ChartBlock)]
    keys = {c.key for c in charts}
    assert {"step_times", "step_busy", "gpu_parts", "gpu_idle", "memory_timeline", "hierarchy",
            "diff_headline", "roofline"} <= keys
    schema = load_schema()
    for chart in charts:
        if chart.key == "hierarchy":  # a Vega spec, not Vega-Lite; drawn in the browser tests
            assert chart.spec["data"][0]["transform"][0]["type"] == "stratify"
            continue
        jsonschema.validate(chart.spec, schema)




# ---------------------------------------------------------------- the roofline section

FALCON = "tracelens/traces/h100/Falconsai_nsfw_image_detection__1016002.json.gz"


def _section(page, section_id: str):
    return next(s for s in page.sections if s.id == section_id)


def _layers(chart) -> tuple[list[dict], list[dict]]:
    """The roofline chart's roof lines and points (its two layers' inline data)."""
    lines, points = (layer["data"]["values"] for layer in chart.spec["layer"])
    return lines, points


def test_the_roofline_chart_draws_the_roofline_tables_rows_under_their_dtypes_roofs():
    from opscope.analyses.peaks import trace_peaks
    from opscope.analyses.roofline import intensity_roofs, roofline_table
    from opscope.compose.page import trace_page
    from opscope.render.html import HtmlRenderer
    from opscope.render.html.page import ChartBlock, TableBlock

    path = shared_trace(FALCON)
    trace = open_trace(path)
    page = trace_page(trace, str(path))
    assert [s.id for s in page.sections] == ["overview", "timeline", "gpu", "ops", "roofline", "memory", "advice"]
    section = _section(page, "roofline")
    chart, table = section.blocks
    assert isinstance(chart, ChartBlock) and isinstance(table, TableBlock)
    peaks, how = trace_peaks(trace)
    assert peaks is not None and peaks.device == "H100 SXM"
    rows, notes = roofline_table(trace, peaks)
    assert table.section.arrow.equals(rows)
    lines, points = _layers(chart)
    # every row of the table is a point (all 12 have FLOPs and bytes), values as roofline_table computes them
    assert rows.num_rows == 12 and len(points) == 12
    by_time = sorted(rows.to_pylist(), key=lambda r: r["device_ns"], reverse=True)
    assert [(p["name"], p["shapes"], p["dtype"], p["family"], p["calls"], p["intensity"], p["tflops"], p["ms"],
             p["pct_of_roof"], p["bound"]) for p in points] == \
           [(r["name"], r["shapes"], r["dtype"], r["family"], r["calls"], r["intensity"], r["achieved_tflops"],
             r["device_ns"] / 1e6, f"{r['pct_of_roof']:.2f}%", r["bound"]) for r in by_time]
    # one roof (every row is bf16): bandwidth x intensity up to the ridge, then the bf16 peak
    (peak, ridge), = intensity_roofs(peaks, ["bf16"]).values()
    assert {ln["roof"] for ln in lines} == {"bf16"} and len(lines) == 3
    (x0, y0), (x1, y1), (x2, y2) = ((ln["intensity"], ln["tflops"]) for ln in sorted(lines, key=lambda v: v["order"]))
    assert y0 == pytest.approx(peaks.gbps * x0 / 1e3) and (x1, y1) == (ridge, peak) and y2 == peak
    assert x0 < min(p["intensity"] for p in points) and x2 > max(p["intensity"] for p in points)
    # the caption: what the points hold, the window and denominator; the device and its peaks under it
    assert f"The 12 rows hold {format_ns(sum(rows['device_ns'].to_pylist()))} of device time" in chart.caption
    assert notes[0] in chart.caption and "99.4% of the device time (window: the whole trace" in chart.caption
    assert chart.notes == [how]
    text = HtmlRenderer().text(page)
    assert 'data-chart="roofline"' in text and 'id="table-roofline_table"' in text


def test_the_roofline_chart_draws_the_rows_with_the_most_time_and_says_how_many_it_left(monkeypatch):
    from opscope.compose.page import roofline as section
    from opscope.compose.page.trace import trace_sections

    trace = open_trace(shared_trace(FALCON))
    monkeypatch.setattr(section, "ROOFLINE_POINTS", 5)
    chart = _section(type("P", (), {"sections": trace_sections(trace)})(), "roofline").blocks[0]
    _, points = _layers(chart)
    assert [p["ms"] for p in points] == sorted((p["ms"] for p in points), reverse=True) and len(points) == 5
    assert chart.notes[0].startswith("the 7 rows with the least device time beyond the first 5 are not drawn")


def _modelled(name: str, header: dict | None = None):
    """One op with a work model (an aten::mm overload, by its name) launching one gemm of 10 us."""
    dims = {"Input Dims": [[64, 128], [128, 256]], "Input type": ["c10::BFloat16", "c10::BFloat16"]}
    return [x(name, 0, 30, **dims), x("cudaLaunchKernel", 5, 4, cat="cuda_runtime", correlation=1),
            x("gemm_bf16", 12, 10, cat="kernel", pid=0, tid=7, device=0, stream=7, correlation=1)]


def test_the_roofline_escapes_trace_and_peaks_file_text(tmp_path):
    from opscope.analyses.peaks import Peaks
    from opscope.compose.page import trace_page
    from opscope.render.html import HtmlRenderer

    hostile = '<img src=x onerror="alert(1)">{{7*7}}</script>'
    name = f"aten::mm.{hostile}"  # an aten::mm overload: its model applies, its name is the trace's text
    trace = open_trace(write_trace(tmp_path / "t.json", _modelled(name)))
    peaks = tmp_path / "peaks.json"
    peaks.write_text(json.dumps(Peaks(hostile, {"bf16": 100.0}, 1000.0, hostile).to_json()))
    model = trace_page(trace, "t.json", peaks=peaks)
    chart = _section(model, "roofline").blocks[0]
    _, points = _layers(chart)
    assert [p["name"] for p in points] == [name]
    page = HtmlRenderer().text(model)
    body = page.split("<script>", 1)[0]
    assert hostile not in page and "<img" not in body  # neither in the markup nor in the chart's data
    assert "&lt;img src=x onerror=&#34;alert(1)&#34;&gt;{{7*7}}&lt;/script&gt;" in body  # the peaks note
    spec = re.search(r'id="spec-roofline">(.*?)</script>', page, re.S)
    assert spec is not None and name in spec.group(1).encode().decode("unicode_escape")


def test_the_roofline_says_in_one_line_why_it_is_not_drawn(tmp_path):
    from opscope.compose.page import trace_page
    from opscope.render.html.page import ProseBlock

    cases = {"none.json": (None, "No roofline: the trace names no device; give --peaks FILE"),
             "unknown.json": ({"deviceProperties": [{"id": 0, "name": "Mystery Accelerator 9000"}]},
                              "No roofline: device not recognised: 'Mystery Accelerator 9000'; give --peaks FILE"),
             "unmodelled.json": ({"deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}]},
                                 "No roofline: no device work of an op with a work model")}
    for file, (header, said) in cases.items():
        events = _modelled("aten::foo") if file == "unmodelled.json" else _modelled("aten::mm")
        trace = open_trace(write_trace(tmp_path / file, events, header))
        blocks = _section(trace_page(trace, file), "roofline").blocks
        assert len(blocks) == 1 and isinstance(blocks[0], ProseBlock) and blocks[0].tone == "empty", file
        assert blocks[0].key == "no_roofline" and blocks[0].text.startswith(said), (file, blocks[0].text)
        assert "\n" not in blocks[0].text
