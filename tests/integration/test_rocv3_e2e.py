"""rocprofv3 JSON through the CLI: the real 908_results.json.gz (tracelens; kernel dispatches only), its totals
computed here from the JSON itself, and a built document whose launches must show in the CLI's launch columns."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict

from support import rocv3
from support.cli import assert_one_line_error, run_cli, run_cli_many
from support.shared import shared_trace

REAL = "tracelens/rocprof/908_results.json.gz"


def _reference(path):
    """Per formatted kernel name: (calls, total ns), straight from the document."""
    doc = json.loads(gzip.decompress(path.read_bytes()))
    proc = doc["rocprofiler-sdk-tool"][0]
    names = {k["kernel_id"]: k["formatted_kernel_name"] for k in proc["kernel_symbols"]}
    agents = {a["id"]["handle"]: a["gpu_index"] for a in proc["agents"]}
    per: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    devices = set()
    comm = []
    for r in proc["buffer_records"]["kernel_dispatch"]:
        info = r["dispatch_info"]
        row = per[names[info["kernel_id"]]]
        row[0] += 1
        row[1] += r["end_timestamp"] - r["start_timestamp"]
        devices.add(agents[info["agent_id"]["handle"]])
        if names[info["kernel_id"]].startswith("ncclDevKernel"):
            comm.append((r["start_timestamp"], r["end_timestamp"]))
    return per, devices, comm


def _union(intervals: list[tuple[int, int]]) -> int:
    total, end = 0, None
    for a, b in sorted(intervals):
        if end is None or a >= end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def test_real_rocprofv3_file_through_the_cli(cache_dir):
    path = shared_trace(REAL)
    per, devices, comm = _reference(path)
    total = sum(t for _, t in per.values())
    calls = sum(c for c, _ in per.values())
    assert (calls, total, len(per)) == (43_915, 4_441_741_378, 80)  # the survey's figures, from the JSON
    summary, kernels, gpu = run_cli_many([
        ("summary", str(path), "--format", "json", "--no-cache"),
        ("kernels", str(path), "--full-names", "--limit", "0", "--format", "json", "--no-cache"),
        ("gpu", str(path), "--format", "json", "--no-cache"),
    ], cache=cache_dir)
    for res in (summary, kernels, gpu):
        assert res.returncode == 0, res.stderr
    rows = json.loads(kernels.stdout)
    got = {r["name"]: (r["calls"], r["total_ns"]) for r in rows}
    assert got == {name: tuple(v) for name, v in per.items()}
    top = max(per.items(), key=lambda kv: kv[1][1])
    assert top[0].startswith("ncclDevKernel_Generic_1") and top[1] == [1_310, 4_158_756_678]
    assert rows[0]["name"] == top[0] and rows[0]["kind"] == "comm"
    overview = {r["metric"]: r["value"] for r in json.loads(summary.stdout) if r["section"] == "overview"}
    assert overview["events"] == calls
    top_kernels = [r for r in json.loads(summary.stdout) if r["section"] == "top_kernels_ns"]
    ranked = sorted(per.items(), key=lambda kv: -kv[1][1])
    # one row per kernel, as `opscope kernels` names it (short: the full name's text without return type and
    # parameters), with that kernel's total
    assert [r["value"] for r in top_kernels[:3]] == [v[1] for _, v in ranked[:3]]
    assert all(r["metric"] in n for r, (n, _) in zip(top_kernels[:3], ranked[:3]))
    device_rows = [r for r in json.loads(gpu.stdout) if r["stream"] is None]
    assert {r["device"] for r in device_rows} == devices == {0}
    assert device_rows[0]["events"] == calls
    assert device_rows[0]["comm_ns"] == _union(comm)  # the RCCL kernels' busy time, merged here by hand


def test_built_document_launch_columns(tmp_path, cache_dir):
    path = tmp_path / "results.json"
    path.write_text(rocv3.dumps(rocv3.document()))
    kernels, gpu = run_cli_many([
        ("kernels", str(path), "--full-names", "--by-op", "--format", "json"),
        ("gpu", str(path), "--launches", "--format", "json"),
    ], cache=cache_dir)
    assert kernels.returncode == 0 and gpu.returncode == 0, (kernels.stderr, gpu.stderr)
    rows = {r["name"]: r for r in json.loads(kernels.stdout)}
    assert {n: (r["calls"], r["total_ns"], r["kind"]) for n, r in rows.items()} == {
        rocv3.KERNELS[2]: (1, 3_000, "comm"), rocv3.KERNELS[1]: (1, 1_000, "kernel"),
        "Memcpy HtoD (Host -> Device)": (1, 500, "memcpy")}
    # the launch delay is measured from the linked hipLaunchKernel's start: 1,000 -> 1,600 on GPU 0, 2,000 -> 2,500
    # on GPU 1 (without the correlation links there would be no launch to measure from)
    by_device = {r["device"]: r for r in json.loads(gpu.stdout)}
    assert {d: (r["launches"], r["launch_delay_median_ns"]) for d, r in by_device.items()} == {0: (1, 600),
                                                                                              1: (1, 500)}


def test_bad_rocprofv3_files_are_one_line_errors(tmp_path, cache_dir):
    text = rocv3.dumps(rocv3.document())
    cut = tmp_path / "cut.json"
    cut.write_text(text[:text.index('"buffer_records"')])
    shape = tmp_path / "shape.json"
    shape.write_text('{"rocprofiler-sdk-tool": {"agents": []}}')
    res_cut, res_shape = run_cli_many([("summary", str(cut)), ("kernels", str(shape))], cache=cache_dir)
    assert_one_line_error(res_cut, cut, "truncated")
    assert_one_line_error(res_shape, shape, "not rocprofv3 JSON")
    recovered = tmp_path / "recovered.json"
    recovered.write_text(text[:text.index('"dispatch_id":2') - 10])
    res = run_cli("kernels", str(recovered), "--full-names", "--format", "json", cache=cache_dir)
    assert res.returncode == 0, res.stderr
    assert [(r["name"], r["calls"]) for r in json.loads(res.stdout)] == [(rocv3.KERNELS[1], 1)]
