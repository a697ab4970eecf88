"""diff across formats: an ONNX Runtime profile against a MIGraphX perf report, matched by op
family with --by api; without it, one line saying to pass it."""

from __future__ import annotations

import json
import re

from support.cli import assert_one_line_error, run_cli
from support.shared import shared_trace

from opscope.diff import compare
from opscope.ingest import open_trace

ORT = "generated/onnxruntime_cpu_profile.json"
MIGRAPHX = "migraphx/perf_test_gfx1150.txt"


def test_ort_against_migraphx_needs_by_api(tmp_path):
    base, new = shared_trace(ORT), shared_trace(MIGRAPHX)
    line = assert_one_line_error(run_cli("diff", str(base), str(new), cache=tmp_path), base, "onnxruntime",
                                 "migraphx", "--by api")
    assert str(new) in line


def test_ort_gemm_meets_migraphx_dot_as_matmul():
    """Whole-trace totals: ORT's Gemm node runs (summed from the JSON) against MIGraphX's mlir_dot instruction (its
    perf line); ORT's Conv family has no MIGraphX counterpart in this report, so it is 'removed'."""
    base, new = shared_trace(ORT), shared_trace(MIGRAPHX)
    events = json.loads(base.read_text())
    gemm_us = sum(e["dur"] for e in events if e.get("cat") == "Node" and e["args"].get("op_name") == "Gemm")
    conv_us = sum(e["dur"] for e in events if e.get("cat") == "Node" and e["args"].get("op_name") == "Conv")
    dot_ms = float(re.search(r"symbol_name=mlir_dot.*: ([0-9.]+)ms, \d+%$", new.read_text(), re.M).group(1))
    c = compare(open_trace(base, use_cache=False), open_trace(new, use_cache=False), by="api", whole_trace=True)
    rows = {r["name"]: r for r in c.rows.to_pylist() if r["kind"] == "op"}
    assert rows["matmul"]["base_ns"] == gemm_us * 1000 and rows["matmul"]["calls_base"] == 20
    assert rows["matmul"]["new_ns"] == round(dot_ms * 1e6) and rows["matmul"]["calls_new"] == 1
    assert rows["conv2d"]["base_ns"] == conv_us * 1000 and rows["conv2d"]["status"] == "removed"
    assert "@param" not in rows  # MIGraphX bookkeeping has no op family: left out, as the notes say
