"""The real ``migraphx-driver perf`` output (2.15, gfx1150) through the CLI: every figure equals the file's own lines.

The expected values are read from the file here with simple regexes of this test's own (not the reader's), and the
report's checks done by hand: the instruction times add up to ``Total instructions time`` and the Summary, and
Rate = 1000 / total ms x batch.
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict

from support.cli import run_cli_many
from support.shared import shared_trace

REAL = "migraphx/perf_test_gfx1150.txt"


def _expected(path):
    text = path.read_text()
    timed = text.split("Running performance report ...", 1)[1].split("Summary:", 1)[0]
    lines = re.findall(r"^(\S+) = (\S+?)(?:\[(.*?)\])?(?:\(.*?\))? -> .*: ([0-9.e-]+)ms, (\d+)%$", timed, re.M)
    instructions = []
    for name, op, attrs, ms, pct in lines:
        if op.startswith("@param:"):
            op = "@param"
        symbol = re.search(r"symbol_name=(\w+)", attrs or "")
        group = f"{op}::{symbol.group(1)}" if op == "gpu::code_object" and symbol else op
        instructions.append((name, group, float(ms), int(pct)))
    summary = {m[0]: (float(m[1]), int(m[2]), float(m[3]), int(m[4])) for m in
               re.findall(r"^(.+): ([0-9.e-]+)ms / (\d+) = ([0-9.e-]+)ms, (\d+)%$", text, re.M)}
    figures = {
        "batch": int(re.search(r"^Batch size: (\d+)$", text, re.M).group(1)),
        "rate": float(re.search(r"^Rate: ([0-9.]+) inferences/sec$", text, re.M).group(1)),
        "total": float(re.search(r"^Total time: ([0-9.e-]+)ms", text, re.M).group(1)),
        "instructions": float(re.search(r"^Total instructions time: ([0-9.e-]+)ms$", text, re.M).group(1)),
        "overhead": [float(x) for x in re.search(r"^Overhead time: ([0-9.e-]+)ms, ([0-9.e-]+)ms$", text, re.M)
                     .groups()],
        "spread": [float(x) for x in re.search(r"\(Min: ([0-9.e-]+)ms, Max: ([0-9.e-]+)ms, Mean: ([0-9.e-]+)ms, "
                                               r"Median: ([0-9.e-]+)ms\)", text).groups()],
        "percentiles": [float(x) for x in re.search(r"^Percentiles \(90%, 95%, 99%\): \(([0-9.e-]+)ms, "
                                                    r"([0-9.e-]+)ms, ([0-9.e-]+)ms\)$", text, re.M).groups()],
    }
    return instructions, summary, figures


def test_real_perf_report_through_the_cli(tmp_path):
    path = shared_trace(REAL)
    instructions, summary, fig = _expected(path)
    assert len(instructions) == 5 and len(summary) == 3
    # the report's own checks, on the file's numbers
    assert math.isclose(sum(ms for _, _, ms, _ in instructions), fig["instructions"], rel_tol=1e-9)
    assert math.isclose(sum(s[0] for s in summary.values()), fig["instructions"], rel_tol=1e-9)
    assert math.isclose(fig["total"] - fig["instructions"], fig["overhead"][1], rel_tol=1e-6)
    assert round(1000 / fig["total"] * fig["batch"], 1) == fig["rate"]

    results = run_cli_many([("summary", str(path), "-f", "json"), ("ops", str(path), "-f", "json"),
                            ("kernels", str(path), "-f", "json"), ("steps", str(path), "-f", "json"),
                            ("query", str(path), "select name, dur_ns, ts_ns from events where kind = 'cpu_op' "
                             "order by ts_ns", "-f", "json"),
                            ("summary", str(path))], cache=tmp_path / "cache")
    for res in results:
        assert res.returncode == 0, res.stderr
    summary_rows, ops, kernels, steps, events, terminal = (json.loads(r.stdout) if i < 5 else r.stdout
                                                           for i, r in enumerate(results))

    # per instruction: one op each, in program order, laid end to end, lasting the line's time
    assert [e["name"] for e in events] == [g for _, g, _, _ in instructions]
    assert [e["dur_ns"] for e in events] == [round(ms * 1e6) for _, _, ms, _ in instructions]
    assert [e["ts_ns"] for e in events] == [sum(e2["dur_ns"] for e2 in events[:k]) for k in range(len(events))]

    # ops per Summary group: calls and total equal the Summary line (ns, rounded per instruction)
    by_group = defaultdict(list)
    for _, group, ms, _ in instructions:
        by_group[group].append(ms)
    assert {o["name"]: o["calls"] for o in ops} == {g: s[1] for g, s in summary.items()}
    for o in ops:
        total_ms, count, _, _ = summary[o["name"]]
        assert o["total_ns"] == sum(round(ms * 1e6) for ms in by_group[o["name"]])
        assert abs(o["total_ns"] - total_ms * 1e6) <= 0.5 * count

    # the one GPU instruction is a kernel named by its symbol, at the instruction's time
    assert [(k["name"], k["calls"], k["total_ns"]) for k in kernels] == [("mlir_dot", 1, round(0.00880674 * 1e6))]
    # one step: the averaged run, lasting Total time
    assert [(s["step"], s["dur_ns"]) for s in steps] == [(0, round(fig["total"] * 1e6))]

    figures = {r["metric"]: r["value"] for r in summary_rows if r["section"] == "migraphx"}
    assert figures["batch_size"] == fig["batch"] and figures["rate_per_s"] == fig["rate"]
    assert figures["total_time_ms"] == fig["total"]
    assert [figures[k] for k in ("min_ms", "max_ms", "mean_ms", "median_ms")] == fig["spread"]
    assert [figures[k] for k in ("p90_ms", "p95_ms", "p99_ms")] == fig["percentiles"]
    assert figures["total_instructions_time_ms"] == fig["instructions"]
    assert [figures["overhead_time_ms"], figures["overhead_calculated_ms"]] == fig["overhead"]
    assert [figures["overhead_pct"], figures["overhead_calculated_pct"]] == [4, 18]
    assert math.isclose(figures["sum_instructions_ms"], fig["instructions"], rel_tol=1e-9)
    assert round(figures["rate_computed_per_s"], 1) == fig["rate"]
    groups = {r["metric"]: (r["value"], r["pct"]) for r in summary_rows if r["section"] == "migraphx_summary_ms"}
    assert groups == {g: (s[0], s[3]) for g, s in summary.items()}
    overview = {r["metric"]: r["value"] for r in summary_rows if r["section"] == "overview"}
    assert overview["gpu_busy_ns"] == round(0.00880674 * 1e6) and overview["steps"] == 1
    # the only warning: no timeline (the report's sums and rate hold, every line read)
    not_mapped = [r for r in summary_rows if r["section"] == "not_mapped"]
    assert len(not_mapped) == 1 and "synthetic" in not_mapped[0]["metric"] and not_mapped[0]["value"] == 5

    # the terminal shows the report's figures as printed
    for text in ("MIGraphX perf report", "83845.5 inferences/s", "0.0119267 ms", "0.00974602 ms",
                 "0.00045574 ms (4%, dry run)", "0.00218068 ms (18%, total - instructions)", "0.000219533"):
        assert text in terminal, text


def _defined_shapes(text):
    """Each instruction's output lens, read from the timed lines: name -> [ints]."""
    timed = text.split("Running performance report ...", 1)[1].split("Summary:", 1)[0]
    return {name: [int(d) for d in lens.split(",") if d.strip()]
            for name, lens in re.findall(r"^(\S+) = .*? -> \w+_type, \{([^{}]*)\}", timed, re.M)}


def test_roofline_models_the_real_mlir_dot(tmp_path):
    path = shared_trace(REAL)
    text = path.read_text()
    # the dot's operands, read here from the text: a [M, K] and b [K, N] (the last operand is the output buffer,
    # output_arg=2), the output [M, N]
    line = re.search(r"^@\d+ = gpu::code_object\[[^\]]*symbol_name=mlir_dot,[^\]]*output_arg=2,\]\((\w+),(\w+),"
                     r"(\S+?)\) -> float_type, \{(\d+), (\d+)\}", text, re.M)
    shapes = _defined_shapes(text)
    (m, k), (k2, n) = shapes[line.group(1)], shapes[line.group(2)]
    assert k == k2 and [int(line.group(4)), int(line.group(5))] == [m, n] == shapes[line.group(3)]
    results = run_cli_many([("roofline", str(path), "-f", "json"),
                            ("roofline", str(path), "--by", "kernel", "-f", "json")], cache=tmp_path / "cache")
    for res in results:
        assert res.returncode == 0, res.stderr
    by_op, by_kernel = (json.loads(r.stdout) for r in results)
    assert len(by_op) == 1
    row = by_op[0]
    assert row["name"] == "gpu::code_object::mlir_dot" and row["family"] == "matmul" and row["dtype"] == "fp32"
    assert row["flops"] == 2 * m * n * k == 120     # M=4, N=3, K=5
    assert row["bytes"] == (m * k + k * n + m * n) * 4
    assert json.loads(row["shapes"]) == [[m, k], [k, n], [m, n]]
    assert row["calls"] == 1 and row["device_ns"] == round(0.00880674 * 1e6)
    assert [(r["name"], r["flops"]) for r in by_kernel] == [("mlir_dot", 120)]
    # coverage: the one kernel's time is the dot's (before: no model for gpu::code_object::mlir_dot 100%)
    assert "ops with a work model hold 100.0% of the device time" in results[0].stderr
    assert "no model for" not in results[0].stderr
