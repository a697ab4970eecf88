"""`opscope roofline` on real H100 and MI300 traces (TraceLens): the device recognised, every pct_of_roof in (0, 100],
the matmul rows' FLOPs equal to 2*M*N*K(*batch) from their shapes, --by kernel, and --peaks FILE overriding the
table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.cli import run_cli_many
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
