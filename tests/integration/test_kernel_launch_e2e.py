"""``opscope kernels --details`` on real traces: every row's launch fields equal those read from the raw JSON."""

from __future__ import annotations

import json
from collections import defaultdict

from support.cli import run_cli
from support.shared import raw_events, shared_trace

H100 = "tracelens/traces/h100/gaunernst_bert-small-uncased__1016001.json.gz"
MI300 = "tracelens/traces/mi300/gaunernst_bert-small-uncased__1016001.json.gz"


def _raw_launches(path) -> dict[tuple, list[dict]]:
    """Each kernel's args from the JSON itself, by (name, grid, block)."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for e in raw_events(path):
        if isinstance(e, dict) and e.get("ph") == "X" and e.get("cat") == "kernel":
            a = e.get("args") or {}
            groups[(e["name"], tuple(a.get("grid") or ()), tuple(a.get("block") or ()))].append(a)
    return groups


def _details(path, cache):
    res = run_cli("kernels", str(path), "--details", "--full-names", "--limit", "0", "--format", "json",
                  cache=cache)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout), res.stderr


def test_h100_launch_details_equal_the_raw_args(cache):
    path = shared_trace(H100)
    rows, err = _details(path, cache)
    raw = _raw_launches(path)
    kernels = [r for r in rows if r["kind"] == "kernel"]
    assert len(kernels) == len(raw)  # one row per (name, grid, block), no more, no less
    for r in kernels:
        launches = raw[(r["name"], tuple(r["grid"]), tuple(r["block"]))]
        assert r["calls"] == len(launches)
        assert r["registers_per_thread"] == max(int(a["registers per thread"]) for a in launches)
        assert r["shared_memory_bytes"] == max(int(a["shared memory"]) for a in launches)
        occupancy = [float(a["est. achieved occupancy %"]) for a in launches]
        assert abs(r["occupancy_pct"] - sum(occupancy) / len(occupancy)) < 0.006
        warps = [float(a["warps per SM"]) for a in launches]
        assert abs(r["warps_per_sm"] - sum(warps) / len(warps)) < 0.0006
    # one kernel named by hand: the first layer norm launch of the trace, as its JSON writes it
    first = next(k for k in raw if "vectorized_layer_norm_kernel" in k[0])
    row = next(r for r in kernels if r["name"] == first[0] and tuple(r["grid"]) == first[1])
    assert (tuple(row["grid"]), tuple(row["block"])) == (first[1], first[2])
    assert "the trace records grid, block, registers_per_thread, shared_memory_bytes, occupancy_pct" in err


def test_mi300_records_grid_and_block_only(cache):
    path = shared_trace(MI300)
    rows, err = _details(path, cache)
    raw = _raw_launches(path)
    kernels = [r for r in rows if r["kind"] == "kernel"]
    assert {(r["name"], tuple(r["grid"]), tuple(r["block"])): r["calls"] for r in kernels} == \
        {k: len(v) for k, v in raw.items()}
    assert all(r["registers_per_thread"] is None and r["occupancy_pct"] is None for r in kernels)
    assert "the trace records grid, block; not registers_per_thread" in err


def test_details_table_and_csv(cache):
    path = shared_trace(H100)
    table = run_cli("kernels", str(path), "--details", "-n", "3", cache=cache)
    assert table.returncode == 0, table.stderr
    assert "Kernel launch details" in table.stdout and "registers_per_thread" in table.stdout
    csv = run_cli("kernels", str(path), "--details", "--format", "csv", "-n", "2", cache=cache)
    header = csv.stdout.splitlines()[0].split(",")
    assert header[:8] == ["name", "kind", "grid", "block", "calls", "total_ns", "avg_ns", "pct"]
    bad = run_cli("kernels", str(path), "--details", "--by-op", cache=cache)
    assert bad.returncode == 2 and "--details and --by-op" in bad.stderr
