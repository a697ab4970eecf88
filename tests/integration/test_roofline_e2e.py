"""`opscope roofline` on real H100 and MI300 traces (TraceLens): the device recognised, every pct_of_roof in (0, 100],
the matmul rows' FLOPs equal to 2*M*N*K(*batch) from their shapes, --by kernel, and --peaks FILE overriding the
table; and on a real ONNX Runtime CPU profile (host mode): a Conv's FLOPs from the shapes ORT wrote, and the
coverage."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from support.cli import run_cli, run_cli_many
from support.shared import shared_trace

from opscope.analyses.peaks import Peaks

TRACES = {"H100 SXM": "tracelens/traces/h100/Falconsai_nsfw_image_detection__1016002.json.gz",
          "MI300X": "tracelens/traces/mi300/Falconsai_nsfw_image_detection__1016002.json.gz"}


def _matmul_flops(name: str, dims: list) -> int | None:
    if name == "aten::addmm":
        (m, k), (_, n), batch = dims[1], dims[2], 1
    elif name == "aten::mm":
        (m, k), (_, n), batch = dims[0], dims[1], 1
    elif name == "aten::bmm":
        (batch, m, k), (_, _, n) = dims[0], dims[1]
    else:
        return None
    return 2 * m * n * k * batch


@pytest.mark.parametrize("device", sorted(TRACES))
def test_roofline_on_a_real_trace(tmp_path: Path, device: str):
    path = shared_trace(TRACES[device])
    peaks = tmp_path / "peaks.json"
    peaks.write_text(json.dumps(Peaks("drawn", {"bf16": 2000.0}, 10000.0, "a test").to_json()))
    by_op, by_kernel, override = run_cli_many([
        ("roofline", str(path), "-f", "json"),
        ("roofline", str(path), "--by", "kernel", "-f", "json"),
        ("roofline", str(path), "--peaks", str(peaks), "-f", "json"),
    ], cache=tmp_path / "cache")
    for res in (by_op, by_kernel):
        assert res.returncode == 0, res.stderr
        assert f"as {device}" in res.stderr
    rows = json.loads(by_op.stdout)
    assert rows and all(0 < r["pct_of_roof"] <= 100 for r in rows)
    checked = 0
    for r in rows:
        expected = _matmul_flops(r["name"], json.loads(r["shapes"]))
        if expected is not None:
            assert r["flops"] == expected, r
            checked += 1
    assert checked >= 3
    kernels = json.loads(by_kernel.stdout)
    assert kernels and all(0 < r["pct_of_roof"] <= 100 for r in kernels)
    # the kernels share out the ops' work: the totals agree
    total = sum(r["flops"] * r["calls"] for r in rows)
    assert sum(r["flops"] * r["calls"] for r in kernels) == pytest.approx(total, rel=1e-9)
    assert override.returncode == 0, override.stderr
    assert {r["peak_gbps"] for r in json.loads(override.stdout)} == {10000.0}


def test_roofline_on_a_real_onnx_runtime_profile(tmp_path: Path):
    """The MobileNet-like model on ORT's CPU provider: the first Conv's FLOPs equal 2*N*M*(C/group)*kh*kw*Ho*Wo from
    its input_type_shape and output_type_shape (read here from the JSON), and the ops with a model hold the time
    of every node but Flatten's (no model: ORT aliases its output onto its input)."""
    path = shared_trace("generated/onnxruntime_cpu_profile.json")
    nodes = [e for e in json.loads(path.read_text()) if e.get("cat") == "Node"
             and e["name"].endswith("_kernel_time")]
    conv = next(e["args"] for e in nodes if e["args"].get("op_name") == "Conv")
    (x,), (w,) = conv["input_type_shape"][0].values(), conv["input_type_shape"][1].values()
    (y,) = conv["output_type_shape"][0].values()
    # X [N, C, H, W], W [M, C/group, kh, kw], Y [N, M, Ho, Wo]: a multiply-add per weight per output element
    expected = 2 * y[0] * y[1] * w[1] * w[2] * w[3] * y[2] * y[3]
    assert x[1] % w[1] == 0 and y[1] == w[0]
    res = run_cli("roofline", str(path), "-f", "json", cache=tmp_path / "cache")
    assert res.returncode == 0, res.stderr
    dims = json.dumps([next(iter(t.values())) for t in conv["input_type_shape"]], separators=(",", ":"))
    (row,) = [r for r in json.loads(res.stdout) if r["name"] == "Conv" and r["shapes"] == dims]
    assert row["flops"] == expected and row["family"] == "conv"
    # coverage: every node's time but Flatten's (the outermost ops are the nodes themselves)
    total = sum(e["dur"] for e in nodes)
    flatten = sum(e["dur"] for e in nodes if e["args"].get("op_name") == "Flatten")
    held = re.search(r"they hold ([0-9.]+)% of the outermost ops' time", res.stderr)
    assert held is not None, res.stderr
    assert math.isclose(float(held.group(1)), round(100 * (total - flatten) / total, 1))
    assert float(held.group(1)) >= 99  # 99.6% measured; 0.0% before Conv, Gemm and the pools had a model
    assert "no model for (outermost ops without a modelled op in them): Flatten" in res.stderr


def test_roofline_reads_a_recording_directory(tmp_path: Path):
    """A recording directory of opscope record gives its first trace, as advise and repro take it: the same rows as
    the trace file itself."""
    from support.advise_threads import recording, run_json

    recording(tmp_path, run_json(1, 2))
    by_dir, by_file = run_cli_many([("roofline", str(tmp_path / "rec"), "-f", "json"),
                                    ("roofline", str(tmp_path / "rec" / "trace-1.pt.trace.json"), "-f", "json")],
                                   cache=tmp_path / "cache")
    assert by_dir.returncode == 0, by_dir.stderr
    assert by_file.returncode == 0, by_file.stderr
    assert json.loads(by_dir.stdout) == json.loads(by_file.stdout)
    assert by_dir.stderr == by_file.stderr  # the same notes: the same trace read
