"""diff's roofline table (``opscope diff --table roofline``): per op, shapes and dtype, each side's roofline row under
its own device's roofs. A hand-made pair (an H100 against an MI300X, numbers by hand, a row on each side only) and
TraceLens's Falconsai on an H100 and an MI300X, against each side's roofline_table computed here."""

from __future__ import annotations

import csv
import io
import json

import pytest
from support.builder import make_trace, row
from support.shared import shared_trace
from typer.testing import CliRunner

from opscope.analyses.peaks import Peaks, trace_peaks
from opscope.analyses.roofline import roofline_table
from opscope.cli import app
from opscope.diff import compare
from opscope.diff.report import comparison_report
from opscope.diff.roofline import KEYS, roofline_delta
from opscope.errors import UsageError
from opscope.ingest import open_trace

BF16 = '["c10::BFloat16","c10::BFloat16"]'
SQUARE = "[[1024,1024],[1024,1024]]"
H100 = {"name": "NVIDIA H100 80GB HBM3"}   # H100 SXM: bf16 989.4 TFLOP/s, 3350 GB/s
MI300X = {"name": "AMD Instinct MI300X"}   # MI300X: bf16 1307.4 TFLOP/s, 5300 GB/s
FALCONSAI = "tracelens/traces/{}/Falconsai_nsfw_image_detection__1016002.json.gz"
runner = CliRunner()


def side(device: dict, mms: list[tuple[str, float]]):
    """One step; each aten::mm (shapes, kernel us) launches one bf16 gemm."""
    events = [row("user_annotation", "ProfilerStep#1", 0, 1000)]
    for i, (shapes, us) in enumerate(mms):
        at = 10 + 100 * i
        events += [row("cpu_op", "aten::mm", at, 20, shapes=shapes, dtypes=BF16),
                   row("runtime", "cudaLaunchKernel", at + 1, 2, correlation=i + 1),
                   row("kernel", "gemm", at + 5, us, correlation=i + 1, pid=0, tid=7, stream=7, device=0)]
    return make_trace(events, metadata={"device_properties": [device]})


def test_a_hand_made_pair_side_by_side_with_a_row_on_each_side_only():
    base = side(H100, [(SQUARE, 20), ("[[512,512],[512,512]]", 5)])
    new = side(MI300X, [(SQUARE, 10), ("[[256,256],[256,256]]", 2)])
    table, notes = roofline_delta(base, new)
    rows = table.to_pylist()
    assert [(r["shapes"], r["base_ns"], r["new_ns"]) for r in rows] == [
        (SQUARE, 20_000, 10_000), ("[[512,512],[512,512]]", 5_000, None), ("[[256,256],[256,256]]", None, 2_000)]
    r = rows[0]
    flops = 2 * 1024 ** 3                       # 2.147 GFLOP; 6 MiB moved: intensity 341.3 FLOP/B, compute bound
    intensity = flops / (3 * 1024 * 1024 * 2)   # on both (memory roofs 1143 and 1809 TFLOP/s above the peaks)
    assert 3350 * intensity / 1e3 > 989.4 and 5300 * intensity / 1e3 > 1307.4
    assert (r["name"], r["dtype"], r["family"], r["calls_base"], r["calls_new"]) == ("aten::mm", "bf16", "matmul", 1, 1)
    assert r["time_ratio"] == 0.5 and r["achieved_unit"] == "TFLOP/s"
    assert r["achieved_base"] == pytest.approx(flops / 20_000 / 1e3)        # 107.4 TFLOP/s
    assert r["achieved_new"] == pytest.approx(flops / 10_000 / 1e3)         # 214.7 TFLOP/s
    assert r["base_roof_pct"] == pytest.approx(100 * flops / 20_000 / 1e3 / 989.4)    # 10.85%
    assert r["new_roof_pct"] == pytest.approx(100 * flops / 10_000 / 1e3 / 1307.4)    # 16.43%
    assert r["delta_roof_pct"] == pytest.approx(r["new_roof_pct"] - r["base_roof_pct"])
    assert (r["bound_base"], r["bound_new"]) == ("compute", "compute")
    assert (r["peak_tflops_base"], r["peak_tflops_new"], r["peak_gbps_base"], r["peak_gbps_new"]) == \
        (989.4, 1307.4, 3350.0, 5300.0)
    only_base, only_new = rows[1], rows[2]
    for one, missing in ((only_base, "new"), (only_new, "base")):
        assert one[f"calls_{missing}"] is None and one[f"{missing}_roof_pct"] is None
        assert one[f"bound_{missing}"] is None and one[f"achieved_{missing}"] is None
        assert one["time_ratio"] is None and one["delta_roof_pct"] is None
    # 512^3: intensity 170.7 FLOP/B, memory roof 3350 x 170.7 = 571.7 TFLOP/s (below 989.4): memory bound
    assert only_base["bound_base"] == "memory"
    assert only_base["base_roof_pct"] == pytest.approx(100 * (2 * 512 ** 3 / 5_000 / 1e3) / (3350 * 512 / 3 / 1e3))
    assert notes[0].startswith("base: H100 SXM: ") and "recognised 'NVIDIA H100 80GB HBM3' as H100 SXM" in notes[0]
    new_device = next(n for n in notes if n.startswith("new: MI300X: "))
    assert "memory 5300 GB/s" in new_device
    assert any(n.startswith("new: ops with a work model hold 100.0% of the device time") for n in notes)
    assert notes[-1].startswith("rows on one side only (the other side's columns null): 1 in base, 1 in new")


def test_a_peaks_file_per_side_and_a_device_not_recognised(tmp_path):
    base = side(H100, [(SQUARE, 20)])
    new = side({"name": "Some Accelerator 9000"}, [(SQUARE, 10)])
    peaks = tmp_path / "peaks.json"
    peaks.write_text(json.dumps(Peaks("drawn", {"bf16": 100.0}, 1000.0, "a test").to_json()))
    table, notes = roofline_delta(base, new, base_peaks=peaks)
    (r,) = table.to_pylist()
    # the file's roofs: bf16 100 TFLOP/s below 1000 GB/s x 341 FLOP/B; 107 TFLOP/s achieved: above it, shown at 100%
    assert (r["peak_tflops_base"], r["bound_base"], r["base_roof_pct"]) == (100.0, "compute", 100.0)
    assert r["new_roof_pct"] is None and r["delta_roof_pct"] is None and r["new_ns"] == 10_000
    assert any(f"peaks from {peaks}" in n for n in notes)
    assert any(n.startswith("new: no peaks") and "device not recognised: 'Some Accelerator 9000'" in n for n in notes)


def test_two_real_traces_of_one_model_on_two_devices_equal_each_sides_roofline():
    base, new = (open_trace(shared_trace(FALCONSAI.format(d))) for d in ("h100", "mi300"))
    table, notes = roofline_delta(base, new)
    expected = []
    for trace, device in ((base, "H100 SXM"), (new, "MI300X")):
        peaks, _ = trace_peaks(trace)
        assert peaks is not None and peaks.device == device
        rows, _ = roofline_table(trace, peaks)
        expected.append({tuple(r[k] for k in KEYS): r for r in rows.to_pylist()})
    assert notes[0].startswith("base: H100 SXM") and any(n.startswith("new: MI300X") for n in notes)
    got = {tuple(r[k] for k in KEYS): r for r in table.to_pylist()}
    assert set(got) == set(expected[0]) | set(expected[1])
    for key, r in got.items():
        for suffix, side_rows in zip(("base", "new"), expected):
            want = side_rows.get(key)
            rate = "achieved_tflops" if (want or {}).get("flops", 1) else "achieved_gbps"
            assert r[f"calls_{suffix}"] == (want and want["calls"])
            assert r[f"{suffix}_ns"] == (want and want["device_ns"])
            assert r[f"achieved_{suffix}"] == (want and want[rate])
            assert r[f"{suffix}_roof_pct"] == (want and want["pct_of_roof"])
            assert r[f"bound_{suffix}"] == (want and want["bound"])
            assert r[f"peak_tflops_{suffix}"] == (want and want["peak_tflops"])
        b, n = expected[0].get(key), expected[1].get(key)
        if b and n:
            assert r["time_ratio"] == pytest.approx((n["device_ns"] / n["calls"]) / (b["device_ns"] / b["calls"]))
            assert r["delta_roof_pct"] == pytest.approx(n["pct_of_roof"] - b["pct_of_roof"])
    # cuDNN's convolution on one side, MIOpen's on the other: one row each, the other side null
    assert got[next(k for k in got if k[0] == "aten::cudnn_convolution")]["new_ns"] is None
    assert got[next(k for k in got if k[0] == "aten::miopen_convolution")]["base_ns"] is None
    larger = [max(r["base_ns"] or 0, r["new_ns"] or 0) for r in table.to_pylist()]
    assert larger == sorted(larger, reverse=True)
    report = comparison_report(compare(base, new), False, None, table="roofline")
    assert report.data_section().key == "roofline"


def test_the_cli_writes_the_table_as_json_and_csv(tmp_path):
    a, b = (shared_trace(FALCONSAI.format(d)) for d in ("h100", "mi300"))
    res = runner.invoke(app, ["diff", str(a), str(b), "--table", "roofline", "-f", "json", "-n", "0"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)
    table, _ = roofline_delta(open_trace(a), open_trace(b))
    assert rows == table.to_pylist()
    assert "base: H100 SXM" in res.stderr and "new: MI300X" in res.stderr
    res = runner.invoke(app, ["diff", str(a), str(b), "--table", "roofline", "-f", "csv", "-n", "0"])
    assert res.exit_code == 0, res.output
    lines = list(csv.reader(io.StringIO(res.stdout)))
    assert lines[0] == list(rows[0]) and len(lines) == len(rows) + 1
    peaks = tmp_path / "peaks.json"
    peaks.write_text(json.dumps(Peaks("drawn", {"bf16": 2000.0}, 10000.0, "a test").to_json()))
    res = runner.invoke(app, ["diff", str(a), str(b), "--table", "roofline", "--new-peaks", str(peaks), "-f", "json"])
    assert res.exit_code == 0, res.output
    assert {r["peak_gbps_new"] for r in json.loads(res.stdout)} <= {10000.0, None}
    res = runner.invoke(app, ["diff", str(a), str(b), "--base-peaks", str(peaks)])
    assert isinstance(res.exception, UsageError) and "go with --table roofline" in str(res.exception)
