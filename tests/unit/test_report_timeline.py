"""The report's timeline data (compose/page/timeline.py) on hand-built traces: which steps, which events on which
lane at which depth, the launch -> kernel links, the budget's cut and what it counts per lane, and the escaping
of trace text in the page."""

from __future__ import annotations

import json
import re

import pytest
from support.tracefiles import write_trace, x

from opscope.compose.page.timeline import Chosen, chosen_steps, timeline_data
from opscope.errors import UsageError
from opscope.ingest import open_trace


def three_steps() -> list[dict]:
    """Steps 1 [0, 1000), 2 [1000, 3000) (slowest), 3 [3000, 4200) us on thread 1.

    Step 2: aten::linear [1100, 1600) > aten::addmm [1110, 1590) > cudaLaunchKernel [1120, 1130) (corr 1)
            aten::relu [1700, 1800) > cudaLaunchKernel [1710, 1720) (corr 2)
            thread 2: loader [1050, 1250)
            stream 7: gemm [1200, 1500) corr 1, relu_kernel [2950, 3100) corr 2 (runs past the step's end)."""
    return [
        x("ProfilerStep#1", 0, 1000, cat="user_annotation"),
        x("aten::mul", 100, 200),
        x("ProfilerStep#2", 1000, 2000, cat="user_annotation"),
        x("aten::linear", 1100, 500),
        x("aten::addmm", 1110, 480),
        x("cudaLaunchKernel", 1120, 10, cat="cuda_runtime", correlation=1),
        x("aten::relu", 1700, 100),
        x("cudaLaunchKernel", 1710, 10, cat="cuda_runtime", correlation=2),
        x("loader", 1050, 200, tid=2),
        x("gemm", 1200, 300, cat="kernel", pid=0, tid=7, device=0, stream=7, correlation=1),
        x("relu_kernel", 2950, 150, cat="kernel", pid=0, tid=7, device=0, stream=7, correlation=2),
        x("ProfilerStep#3", 3000, 1200, cat="user_annotation"),
        x("aten::mul", 3100, 200),
    ]


def events_of(step: dict, strings: list[str]) -> list[tuple]:
    """(name, start us after the step's start, duration us, depth, lane name) per drawn event."""
    return [(strings[step["name"][i]], step["start"][i] / 1000, step["dur"][i] / 1000, step["depth"][i],
             step["lanes"][step["lane"][i]]["name"]) for i in range(len(step["start"]))]


def test_the_median_and_the_slowest_step_are_chosen_and_checked_when_given(tmp_path):
    trace = open_trace(write_trace(tmp_path / "t.json", three_steps()))
    assert chosen_steps(trace) == [Chosen(3, "median step"), Chosen(2, "slowest step")]
    assert chosen_steps(trace, [2, 1, 2]) == [Chosen(2, "chosen step"), Chosen(1, "chosen step")]
    with pytest.raises(UsageError, match=r"no step 9 \(its steps are 1 to 3\)"):
        chosen_steps(trace, [9])


def test_a_steps_events_lanes_depths_and_links(tmp_path):
    trace = open_trace(write_trace(tmp_path / "t.json", three_steps()))
    data = timeline_data(trace, [Chosen(2, "slowest step")])
    step = data["steps"][0]
    assert (step["step"], step["start_ns"], step["dur_ns"]) == (2, 1_000_000, 2_000_000)
    assert [lane["device"] for lane in step["lanes"]] == [False, False, True]
    host, loader, stream = (lane["name"] for lane in step["lanes"])
    assert "thread 1" in host and "thread 2" in loader and "stream 7" in stream
    assert events_of(step, data["strings"]) == [
        ("ProfilerStep#2", 0, 2000, 0, host),
        ("loader", 50, 200, 0, loader),
        ("aten::linear", 100, 500, 1, host),
        ("aten::addmm", 110, 480, 2, host),
        ("cudaLaunchKernel", 120, 10, 3, host),
        ("gemm", 200, 300, 0, stream),
        ("aten::relu", 700, 100, 1, host),
        ("cudaLaunchKernel", 710, 10, 2, host),
        ("relu_kernel", 1950, 150, 0, stream),  # launched in the step, drawn past its end
    ]
    assert [data["kinds"][k] for k in step["kind"]] == ["user_annotation", "cpu_op", "cpu_op", "cpu_op", "runtime",
                                                         "kernel", "cpu_op", "runtime", "kernel"]
    assert sorted(step["links"]) == [[4, 5], [7, 8]]  # each launch -> the kernel it launched
    assert (step["events"], step["drawn"], step["shorter_than_ns"], step["left_out"]) == (9, 9, None, [])
    assert json.loads(json.dumps(data)) == data  # JSON-ready


def test_past_the_budget_the_longest_are_drawn_and_the_rest_counted_per_lane(tmp_path):
    trace = open_trace(write_trace(tmp_path / "t.json", three_steps()))
    step = timeline_data(trace, [Chosen(2, "slowest step")], budget=4)["steps"][0]
    strings = timeline_data(trace, [Chosen(2, "slowest step")], budget=4)["strings"]
    # the 4 longest, in time order; a parent is never cut before its child of the same length
    assert [e[0] for e in events_of(step, strings)] == ["ProfilerStep#2", "aten::linear", "aten::addmm", "gemm"]
    assert step["shorter_than_ns"] == 300_000
    assert (step["events"], step["drawn"]) == (9, 4)
    lanes = [lane["name"] for lane in step["lanes"]]
    left = {lanes[x["lane"]].split(" · ")[1]: (x["events"], x["dur_ns"]) for x in step["left_out"]}
    assert left == {"thread 1": (3, 120_000), "thread 2": (1, 200_000), "stream 7": (1, 150_000)}
    assert step["links"] == []  # neither launch is drawn


def test_trace_text_in_the_timeline_cannot_end_its_script_element(tmp_path):
    from opscope.compose.page import trace_page
    from opscope.render.html import HtmlRenderer

    evil = "</script><script>window.__pwned=1</script>\u2028&"
    events = [x("ProfilerStep#1", 0, 1000, cat="user_annotation"), x(evil, 100, 200)]
    trace = open_trace(write_trace(tmp_path / "t.json", events))
    page = HtmlRenderer().text(trace_page(trace, "t.json"))
    block = re.search(r'<script type="application/json" id="timeline-data-timeline">(.*?)</script>', page, re.S)
    assert block is not None
    text = block.group(1)
    assert "<" not in text and ">" not in text and "&" not in text and "\u2028" not in text
    assert evil in json.loads(text)["strings"]
    assert 'id="timeline"' in page and "flameChartJs" in page
