"""`opscope report` opened in a real browser (chromium): offline, no console errors, every chart drawn, the
numbers the same as the CLI's JSON, tables that sort and filter, empty sections that say so, hostile trace
text shown as text, and a comparison page.

The reports are written once per module by the CLI (child processes side by side) and opened by the one
session browser of conftest.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.cli import run_cli_many
from support.shared import SHARED_TRACES
from support.timing import limit
from support.tracefiles import write_trace, x

pytestmark = pytest.mark.browser

H100 = "tracelens/traces/h100/gaunernst_bert-small-uncased__1016001.json.gz"
MI300 = "tracelens/traces/mi300/gaunernst_bert-small-uncased__1016001.json.gz"
CPU_ONLY = "generated/torch_cpu_mobilenetv2_train.json"
SECTIONS = {"overview": "Overview", "timeline": "Timeline", "gpu": "GPU", "ops": "Ops and kernels",
            "roofline": "Roofline", "memory": "Memory", "advice": "Advice"}
TOOL = Path(__file__).resolve().parents[2] / "tools" / "screenshot_report.py"

#: Trace text a page must show as text and never run: markup, a script end tag, quotes, a backslash, a
#: newline, a template expression.
HOSTILE = ["<script>window.__pwned=1</script>",
           '<img src=x onerror="window.__pwned=2">',
           "</script><script>window.__pwned=3</script>",
           "q\"uo'te\\back\\\\slash\nnew line",
           "{{7*7}}"]


# ---------------------------------------------------------------- traces built here (always available)

def hostile_events() -> list[dict]:
    """Two steps; in each, one CPU op per hostile name launching one kernel of the same name (stream 7).
    Every op and kernel is large enough (>= 5% of the time) to keep its own icicle box."""
    events = []
    corr = 0
    for step in (1, 2):
        start = (step - 1) * 10_000
        events.append(x(f"ProfilerStep#{step}", start, 10_000, cat="user_annotation"))
        for i, name in enumerate(HOSTILE):
            corr += 1
            t = start + 100 + i * 1_500
            events += [x(name, t, 1_000, **{"Input Dims": [[4, 4]]}),
                       x("cudaLaunchKernel", t + 10, 10, cat="cuda_runtime", correlation=corr),
                       x(name, t + 50, 800 + 40 * i, cat="kernel", pid=0, tid=7, device=0, stream=7,
                         correlation=corr)]
    return events


def cpu_only_events() -> list[dict]:
    """CPU ops only: no steps, no device work, no memory records."""
    return [x("aten::linear", 0, 300), x("aten::addmm", 10, 250), x("aten::relu", 400, 50)]


def gpu_no_steps_events() -> list[dict]:
    """One op launching one kernel: device work, but no steps and no memory records."""
    return [x("aten::mm", 0, 100), x("cudaLaunchKernel", 10, 5, cat="cuda_runtime", correlation=1),
            x("gemm_kernel", 20, 400, cat="kernel", pid=0, tid=7, device=0, stream=7, correlation=1)]


# ---------------------------------------------------------------- the reports and the CLI's JSON, once

def _run(commands: dict[str, tuple[str, ...]], cache: Path) -> dict[str, str]:
    results = run_cli_many(list(commands.values()), cache=cache)
    out = {}
    for key, res in zip(commands, results):
        assert res.returncode == 0, (key, res.stderr)
        out[key] = res.stdout
    return out


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    """Reports of the traces built above."""
    d = tmp_path_factory.mktemp("built-reports")
    traces = {"hostile": hostile_events(), "cpu_only": cpu_only_events(), "gpu_no_steps": gpu_no_steps_events()}
    reports = {k: d / f"{k}.html" for k in traces}
    _run({k: ("report", str(write_trace(d / f"{k}.json", ev)), "-o", str(reports[k])) for k, ev in traces.items()},
         d / "cache")
    return reports


@pytest.fixture(scope="module")
def real(tmp_path_factory) -> dict[str, Path]:
    """Reports of the real H100 and MI300 BERT traces, their comparison and a CPU-only training trace."""
    traces = {"h100": SHARED_TRACES / H100, "mi300": SHARED_TRACES / MI300, "cpu": SHARED_TRACES / CPU_ONLY}
    missing = [str(p) for p in traces.values() if not p.exists()]
    if missing:
        pytest.skip(f"real traces not available (../shared/traces is absent on this machine): {missing[0]}")
    d = tmp_path_factory.mktemp("real-reports")
    reports = {k: d / f"{k}.html" for k in (*traces, "diff")}
    commands = {k: ("report", str(p), "-o", str(reports[k])) for k, p in traces.items()}
    commands["diff"] = ("report", str(traces["h100"]), str(traces["mi300"]), "-o", str(reports["diff"]))
    _run(commands, d / "cache")
    return {**reports, **{f"trace_{k}": p for k, p in traces.items()}, "cache": d / "cache"}


@pytest.fixture(scope="module")
def cli_json(real) -> dict[str, list[dict]]:
    """What the CLI prints as JSON for the same traces."""
    commands = {}
    for k in ("h100", "mi300"):
        t = str(real[f"trace_{k}"])
        commands |= {f"kernels_{k}": ("kernels", t, "--format", "json", "-n", "0"),
                     f"gpu_{k}": ("gpu", t, "--format", "json"),
                     f"idle_{k}": ("gpu", t, "--idle", "--format", "json"),
                     f"steps_{k}": ("steps", t, "--format", "json"),
                     f"roofline_{k}": ("roofline", t, "--format", "json")}
    commands["diff"] = ("diff", str(real["trace_h100"]), str(real["trace_mi300"]), "--format", "json")
    return {k: json.loads(v) for k, v in _run(commands, real["cache"]).items()}


# ---------------------------------------------------------------- reading the page

def table(page, key: str) -> tuple[list[str], list[dict[str, str]]]:
    """A report table's column names and its rows as {column: data-value} (the raw value, as JSON has it)."""
    columns = page.eval_on_selector_all(f"table#table-{key} thead th", "ths => ths.map(t => t.dataset.col)")
    rows = page.eval_on_selector_all(f"table#table-{key} tbody tr",
                                     "trs => trs.map(r => Array.from(r.cells).map(c => c.getAttribute('data-value')))")
    assert columns and rows, f"table {key} is missing or empty"
    return columns, [dict(zip(columns, r)) for r in rows]


def raw(value) -> str:
    """A JSON value as the page's data-value attribute writes it (Python's str; '' for null)."""
    return "" if value is None else str(value)


def empties(page) -> set[str]:
    return set(page.eval_on_selector_all("p.empty", "ps => ps.map(p => p.dataset.key)"))


def assert_clean(opened) -> None:
    assert opened.requests == [], "the report asked for something outside the file"
    assert opened.problems == []


# ---------------------------------------------------------------- real traces

@pytest.mark.parametrize("which", ["h100", "mi300"])
def test_a_real_gpu_trace_opens_offline_with_every_section_and_every_chart_drawn(real, open_report, which):
    path = real[which]
    assert path.stat().st_size < 5 * 10**6
    opened = open_report(path)
    assert_clean(opened)
    page = opened.page
    headings = {s: page.inner_text(f"section#{s} > h2") for s in SECTIONS}
    assert headings == SECTIONS
    charts = opened.charts()
    assert set(charts) == {"step_times", "step_busy", "critical_path", "gpu_parts", "gpu_idle", "hierarchy",
                           "memory_timeline", "roofline"}
    assert set(charts.values()) == {"true"}
    # each chart is an SVG with data marks in it (not just axes): bars, lines, points or icicle boxes
    marks = page.eval_on_selector_all(
        "[data-chart]", "els => Object.fromEntries(els.map(e => [e.dataset.chart, "
                        "e.querySelectorAll('svg g.role-mark > path, svg g.role-mark > line').length]))")
    assert all(n > 0 for n in marks.values()), marks
    assert empties(page) == set()


@pytest.mark.parametrize("which", ["h100", "mi300"])
def test_the_page_shows_the_numbers_the_cli_prints(real, cli_json, open_report, which):
    page = open_report(real[which]).page

    # kernels: the CLI's default (short) names, calls and total time, row by row (the page keeps 300 rows)
    _, rows = table(page, "kernels")
    want = cli_json[f"kernels_{which}"]
    assert len(rows) == min(len(want), 300)
    assert [(r["name"], r["calls"], r["total_ns"]) for r in rows] == \
           [(k["name"], raw(k["calls"]), raw(k["total_ns"])) for k in want[:300]]

    # per device and stream, and per idle cause: every column the page shows, as opscope gpu gives it
    for key, cli in (("gpu_breakdown", f"gpu_{which}"), ("gpu_idle_causes", f"idle_{which}")):
        columns, rows = table(page, key)
        assert rows == [{c: raw(r[c]) for c in columns} for r in cli_json[cli]], key
    assert {"device", "stream", "busy_ns", "idle_ns"} <= set(table(page, "gpu_breakdown")[0])

    columns, rows = table(page, "steps")
    assert {"step", "dur_ns", "gpu_busy_ns"} <= set(columns)
    assert rows == [{c: raw(r[c]) for c in columns} for r in cli_json[f"steps_{which}"]]

    # the roofline: its table is opscope roofline's, and each row with FLOPs and bytes is one point of the chart
    columns, rows = table(page, "roofline_table")
    want = cli_json[f"roofline_{which}"]
    assert rows == [{c: raw(r[c]) for c in columns} for r in want]
    points = page.eval_on_selector_all("[data-chart=roofline] svg g.mark-symbol.role-mark > path", "ps => ps.length")
    assert points == sum(1 for r in want if (r["intensity"] or 0) > 0 and (r["achieved_tflops"] or 0) > 0) > 0


def test_numeric_headers_sort_descending_then_ascending(real, open_report):
    page = open_report(real["h100"]).page

    def column(col: str) -> list[float]:
        return [float(r[col]) for r in table(page, "kernels")[1]]

    before = column("calls")
    pairs = sorted((r["name"], r["calls"]) for r in table(page, "kernels")[1])
    assert before != sorted(before, reverse=True)  # the analysis sorts by total time: the click must reorder
    page.click("table#table-kernels th[data-col=calls]")
    assert column("calls") == sorted(before, reverse=True)
    assert page.get_attribute("table#table-kernels th[data-col=calls]", "aria-sort") == "descending"
    page.click("table#table-kernels th[data-col=calls]")
    assert column("calls") == sorted(before)
    assert page.get_attribute("table#table-kernels th[data-col=calls]", "aria-sort") == "ascending"
    # the rows moved whole: each name keeps its own calls
    assert sorted((r["name"], r["calls"]) for r in table(page, "kernels")[1]) == pairs


def test_the_filter_box_shows_only_matching_rows_and_says_how_many(real, open_report):
    page = open_report(real["h100"]).page
    _, rows = table(page, "ops")
    matching = [r for r in rows if "addmm" in r["name"].lower()]
    assert 0 < len(matching) < len(rows)
    page.fill("input.filter[data-table=table-ops]", "AddMM")  # case does not matter
    visible = page.eval_on_selector_all("table#table-ops tbody tr:not([hidden])",
                                        "trs => trs.map(r => r.cells[0].getAttribute('data-value'))")
    assert visible == [r["name"] for r in matching]
    count = page.inner_text("div.table-block[data-key=ops] .shown-rows")
    assert count == f"{len(matching)} of {len(rows)} rows match"
    page.fill("input.filter[data-table=table-ops]", "")
    assert page.eval_on_selector_all("table#table-ops tbody tr:not([hidden])", "t => t.length") == len(rows)
    assert page.inner_text("div.table-block[data-key=ops] .shown-rows") == ""


def test_a_cpu_only_real_trace_says_there_is_no_device_work(real, open_report):
    opened = open_report(real["cpu"])
    assert_clean(opened)
    page = opened.page
    assert {"no_gpu", "no_kernels", "no_step_busy", "no_roofline"} <= empties(page)
    assert "no GPU activity" in page.inner_text("section#gpu")
    assert page.query_selector("section#gpu [data-chart]") is None
    assert set(opened.charts().values()) == {"true"}


def test_the_comparison_page_draws_its_headline_and_shows_the_diff_rows(real, cli_json, open_report):
    opened = open_report(real["diff"])
    assert_clean(opened)
    page = opened.page
    assert page.get_attribute("body", "data-report-kind") == "diff"
    assert opened.charts() == {"diff_headline": "true"}
    assert page.eval_on_selector_all("#chart-diff_headline svg g.role-mark > path", "p => p.length") > 0
    _, rows = table(page, "diff_rows")
    want = cli_json["diff"][:20]
    numbers = ("kind", "base_ns", "new_ns", "delta_ns", "calls_base", "calls_new", "status")
    assert [{c: r[c] for c in numbers} for r in rows[:20]] == [{c: raw(w[c]) for c in numbers} for w in want]
    # the page shows kernels by their short names (no return type, parameters): a part of the JSON's full name
    for r, w in zip(rows, want):
        assert r["name"] in w["name"], (r["name"], w["name"])


def test_charts_fill_their_card_zoom_their_time_axis_and_pick_a_legend_category(real, open_report):
    opened = open_report(real["h100"])
    page = opened.page
    # the card's width: each chart's SVG spans its container (Vega-Lite's width "container")
    widths = page.eval_on_selector_all("[data-chart]", "els => els.map(e => [e.clientWidth, "
                                                       "e.querySelector('svg').getBoundingClientRect().width])")
    assert all(svg >= 0.9 * box > 0 for box, svg in widths), widths

    def labels(key: str) -> list[str]:
        return page.eval_on_selector_all(f"#chart-{key} svg g.role-axis-label text", "ts => ts.map(t => t.textContent)")

    before = labels("memory_timeline")
    box = page.eval_on_selector("#chart-memory_timeline svg", "s => { window.scrollBy(0, s.getBoundingClientRect()"
                                                              ".top - 300); const r = s.getBoundingClientRect(); "
                                                              "return [r.left, r.top, r.width, r.height]; }")
    page.mouse.move(box[0] + box[2] / 2, box[1] + box[3] / 2)
    page.mouse.wheel(0, -300)
    page.wait_for_function(f"() => JSON.stringify(Array.from(document.querySelectorAll("
                           f"'#chart-memory_timeline svg g.role-axis-label text')).map(t => t.textContent)) !== "
                           f"{json.dumps(json.dumps(before))}", timeout=5_000)

    # a click on the legend's "idle" fades every other part of the device-time bars
    parts = page.eval_on_selector_all("#chart-gpu_parts svg g.role-legend-label text",
                                      "ts => ts.map(t => t.textContent)")
    page.eval_on_selector("#chart-gpu_parts svg g.role-legend-symbol", "g => g.scrollIntoView({block: 'center'})")
    spots = page.eval_on_selector_all("#chart-gpu_parts svg g.role-legend-symbol path", "ps => ps.map(p => { const r "
                                      "= p.getBoundingClientRect(); return [r.left + r.width / 2, r.top + r.height / "
                                      "2]; })")
    assert len(spots) == len(parts)
    page.mouse.click(*spots[parts.index("idle")])
    page.wait_for_function("() => Array.from(document.querySelectorAll('#chart-gpu_parts svg g.role-mark path'))"
                           ".some(p => p.getAttribute('opacity') === '0.15')", timeout=5_000)
    shown = page.eval_on_selector_all("#chart-gpu_parts svg g.role-mark path",
                                      "ps => ps.map(p => p.getAttribute('opacity') || '1')")
    assert shown.count("1") == len(table(page, "gpu_breakdown")[1])  # one idle bar per device and stream
    assert_clean(opened)


def _view(page) -> tuple[float, float]:
    start, end = page.eval_on_selector(".timeline-step", "b => [b.dataset.viewStart, b.dataset.viewEnd]")
    return float(start), float(end)


def test_the_timeline_draws_the_steps_threads_and_streams_zooms_pans_and_links_a_launch_to_its_kernel(
        real, open_report):
    opened = open_report(real["h100"])
    page = opened.page
    page.wait_for_function("() => document.querySelector('[data-timeline]').dataset.rendered === 'true'",
                           timeout=10_000)
    data = json.loads(page.text_content("script#timeline-data-timeline"))
    steps = page.eval_on_selector_all(".timeline-step", "bs => bs.map(b => b.dataset.step)")
    assert steps == [str(s["step"]) for s in data["steps"]] and steps
    step = data["steps"][0]
    assert any(lane["device"] for lane in step["lanes"]) and not all(lane["device"] for lane in step["lanes"])
    assert step["links"]  # launches linked to their kernels
    # the library's lanes: one flame chart per thread and stream, holding every drawn event
    lanes = page.eval_on_selector(".timeline-step", "b => b.timelineChart.plugins.filter(p => p.flatTree)"
                                                    ".map(p => p.flatTree.length)")
    assert len(lanes) == len(step["lanes"]) and sum(lanes) == step["drawn"]

    # the wheel over the canvas zooms in: the visible range shrinks, around the pointer
    start, end = _view(page)
    assert start <= 0.0 and end >= step["dur_ns"] / 1e6 * 0.99  # the whole step at first
    # the canvas below the page's sticky header, in the window
    box = page.eval_on_selector(".timeline-step canvas", "c => { window.scrollBy(0, c.getBoundingClientRect().top - "
                                                         "300); const r = c.getBoundingClientRect(); "
                                                         "return [r.left, r.top, r.width, r.height]; }")
    page.mouse.move(box[0] + box[2] / 2, box[1] + 60)
    page.mouse.wheel(0, -400)
    page.wait_for_function("() => parseFloat(document.querySelector('.timeline-step').dataset.viewEnd) - "
                           f"parseFloat(document.querySelector('.timeline-step').dataset.viewStart) < {end - start}",
                           timeout=5_000)
    zoomed = _view(page)
    assert zoomed[1] - zoomed[0] < (end - start) * 0.9
    assert start <= zoomed[0] and zoomed[1] <= end
    # a drag pans: the same width, moved
    page.mouse.move(box[0] + box[2] / 2, box[1] + 60)
    page.mouse.down()
    page.mouse.move(box[0] + box[2] / 2 + 150, box[1] + 60, steps=5)
    page.mouse.up()
    panned = _view(page)
    assert panned[0] != zoomed[0]
    assert abs((panned[1] - panned[0]) - (zoomed[1] - zoomed[0])) < 1e-6 * (end - start)

    # clicking a launch outlines the kernel it launched and says where it ran
    launch, kernel = step["links"][0]
    at = page.eval_on_selector(".timeline-step", """(b, i) => {
        const chart = b.timelineChart, s = JSON.parse(document.getElementById('timeline-data-timeline')
            .textContent).steps[0];
        const t0 = s.start[i] / 1e6, d = Math.max(s.dur[i] / 1e6, 1e-6);
        chart.setZoom(t0 - 2 * d, t0 + 3 * d);
        const p = chart.plugins.find(p => p.laneIndex === s.lane[i]);
        const f = p.flatTree.find(f => f.source.index === i);
        const r = p.calcRect(f.source.start, f.source.duration, f.level);
        return [r.x + r.w / 2, p.renderEngine.position + r.y + 8];
    }""", launch)
    page.wait_for_timeout(100)  # the library draws on the next animation frame
    page.mouse.move(box[0] + at[0], box[1] + at[1])
    page.mouse.down()
    page.mouse.up()
    page.wait_for_function("() => document.querySelector('.timeline-step').dataset.selected !== ''", timeout=5_000)
    selected, linked = page.eval_on_selector(".timeline-step", "b => [b.dataset.selected, b.dataset.linked]")
    assert int(selected) == launch and str(kernel) in linked.split(",")
    info = page.inner_text(".timeline-step .timeline-info")
    assert data["strings"][step["name"][kernel]] in info and "stream" in info
    outlined = page.eval_on_selector(".timeline-step", "(b, j) => { const s = JSON.parse(document.getElementById("
                                     "'timeline-data-timeline').textContent).steps[0]; const p = b.timelineChart"
                                     ".plugins.find(p => p.laneIndex === s.lane[j]); return p.selectedRegion && "
                                     "p.selectedRegion.data.source.index; }", kernel)
    assert outlined == kernel
    assert_clean(opened)


# ---------------------------------------------------------------- traces built here

@pytest.fixture(scope="module")
def job(tmp_path_factory) -> dict[str, Any]:
    """A 4-rank job made from a real rank trace (a straggler, clock offsets): its report and opscope job's JSON."""
    from support.jobgen import make_job

    base = SHARED_TRACES / "hta/nccl_parser_config/nccl_data.json.gz"
    if not base.exists():
        pytest.skip("the real rank trace hta/nccl_parser_config/nccl_data.json.gz is not available")
    d = tmp_path_factory.mktemp("job-report")
    made = make_job(base, d / "ranks", 4, straggler=2, delay_ns=4_000_000,
                    offsets_ns=[0, 7_000_000, -3_000_000, 11_000_000], jitter_ns=10_000, seed=2)
    out = _run({"report": ("report", str(d / "ranks"), "-o", str(d / "job.html")),
                "json": ("job", str(d / "ranks"), "--format", "json")}, d / "cache")
    return {"report": d / "job.html", "json": json.loads(out["json"]), "truth": made}


def test_the_job_page_shows_the_job_view_its_heat_maps_then_the_lowest_ranks_sections(job, open_report):
    opened = open_report(job["report"])
    assert_clean(opened)
    page = opened.page
    assert page.inner_text("section#job > h2") == "Job"
    _, rows = table(page, "job_ranks")
    want = job["json"]["ranks"]
    assert [r["rank"] for r in rows] == [raw(w["rank"]) for w in want]
    assert [r["delay_ns"] for r in rows] == [raw(w["delay_ns"]) for w in want]
    assert [r["straggler"] for r in rows] == [raw(w["straggler"]) for w in want]
    assert job["json"]["job"]["stragglers"] == [job["truth"].straggler]
    charts = opened.charts()
    assert charts["job_delay_map"] == "true" and charts["job_step_map"] == "true"
    # one rect per rank and compared step in the delay map
    cells = page.eval_on_selector_all("#chart-job_delay_map svg g.role-mark > path", "p => p.length")
    assert cells == 4 * len(job["json"]["job"]["compared_steps"])
    # the sections after Job are rank 0's: its step chart and GPU breakdown are drawn
    assert charts["step_times"] == "true" and charts["gpu_parts"] == "true"


def test_a_trace_without_steps_or_memory_says_so_instead_of_empty_charts(built, open_report):
    opened = open_report(built["gpu_no_steps"])
    assert_clean(opened)
    page = opened.page
    assert {"no_steps", "no_memory"} <= empties(page)
    assert "no ProfilerStep#N" in page.inner_text("p[data-key=no_steps]")
    assert page.query_selector("section#overview [data-chart]") is None
    assert page.query_selector("section#memory [data-chart]") is None
    assert set(opened.charts()) == {"gpu_parts", "gpu_idle", "hierarchy"}
    assert set(opened.charts().values()) == {"true"}


def test_a_cpu_only_trace_without_steps_or_memory_says_so_in_every_section(built, open_report):
    opened = open_report(built["cpu_only"])
    assert_clean(opened)
    assert {"no_steps", "no_gpu", "no_kernels", "no_memory"} <= empties(opened.page)
    assert set(opened.charts()) == {"hierarchy"}


def test_hostile_trace_text_is_shown_as_text_and_never_runs(built, open_report, tmp_path):
    opened = open_report(built["hostile"])
    assert_clean(opened)
    page = opened.page
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert page.evaluate("document.querySelectorAll('img').length") == 0  # no chart draws an <img> either
    # Vega, the timeline library, report.js (the rest hold JSON data)
    assert page.evaluate("document.querySelectorAll('script:not([type=\"application/json\"])').length") == 3
    assert "49" not in page.inner_text("table#table-ops")
    # kernels are listed by short name as opscope kernels prints them (a '<...>' is template arguments there)
    kernels = json.loads(_run({"k": ("kernels", str(built["hostile"].with_suffix(".json")), "--format", "json")},
                              tmp_path / "cache")["k"])
    for key, names in (("ops", HOSTILE), ("kernels", [k["name"] for k in kernels])):
        assert len(names) == len(HOSTILE)
        cells = page.eval_on_selector_all(f"table#table-{key} tbody tr td:first-child", "tds => tds.map(t => "
                                          "[t.textContent, t.getAttribute('data-value')])")
        assert {value for _, value in cells} == set(names), key
        assert {text for text, _ in cells} == set(names), key
        text = page.inner_text(f"table#table-{key}")  # innerText folds the newline; the rest is literal
        for name in names:
            assert name.replace("\n", " ") in text, (key, name)
    # the icicle's data holds the names as they are
    spec = json.loads(page.text_content("script#spec-hierarchy"))
    names = {v["name"] for v in spec["data"][0]["values"]}
    assert set(HOSTILE) <= names
    # its box labels are SVG text (cut to the box's width with an ellipsis), the markup in them literal
    labels = page.eval_on_selector_all("#chart-hierarchy svg g.role-mark text", "ts => ts.map(t => t.textContent)")
    for start in ("<script>window.__pwned=1", '<img src=x onerror="', "</script><script>", "{{7*7}}"):
        assert any(label.startswith(start) for label in labels), (start, labels)
    assert set(opened.charts().values()) == {"true"}


# ---------------------------------------------------------------- screenshots

def test_screenshot_tool_writes_a_png_of_the_section_asked_for(built, tmp_path, browser):
    out = tmp_path / "shot.png"
    res = subprocess.run([sys.executable, str(TOOL), str(built["hostile"]), str(out), "--section", "ops"],
                         capture_output=True, text=True, timeout=limit(120))
    assert res.returncode == 0, res.stderr
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (1300, 900)
