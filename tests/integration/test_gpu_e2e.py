"""`opscope gpu` and friends through the CLI on hand-built traces, and a real HIP graph trace against its raw JSON."""

from __future__ import annotations

import json

from support.gpu import US, analyze, idle_by_cause, kernel, launch, rows_by_stream, step, two_streams
from support.tracefiles import write_trace, x
from typer.testing import CliRunner

from opscope.analyses.gpu import GpuAnalysis
from opscope.cli import app
from opscope.ingest import open_trace

# --- bad input -----------------------------------------------------------------------------------------------

def test_no_gpu_activity(tmp_path):
    path = write_trace(tmp_path / "cpu.json", [step(1, 0, 100), x("aten::add", 10, 20)])
    a = GpuAnalysis(open_trace(path, use_cache=False))
    assert a.breakdown().num_rows == 0 and a.idle().num_rows == 0 and a.launches().num_rows == 0
    result = CliRunner().invoke(app, ["gpu", str(path)])
    assert result.exit_code == 0
    assert result.output.strip().splitlines() == [
        "opscope: no GPU activity: this trace has no kernels, memcpys, memsets or collectives (a CPU-only profile)"]
    result = CliRunner().invoke(app, ["gpu", str(path), "-f", "json"])
    assert result.exit_code == 0 and json.loads(result.stdout) == []


def test_kernels_without_launches(tmp_path):
    events = [step(1, 0, 1000), kernel("k1", 100, 100), kernel("k2", 300, 100)]
    a = analyze(tmp_path, events)
    assert rows_by_stream(a)[(0, None)]["busy_ns"] == 200 * US
    launches = a.launches().to_pylist()[0]
    assert launches["launches"] == 0 and launches["launch_delay_median_ns"] is None
    assert any(n.startswith("no launches") for n in a.launch_notes())
    # without launches nothing tells host waits apart: all idle time is "other"
    assert idle_by_cause(a)["other"] == 800 * US and idle_by_cause(a)["host_wait"] == 0
    result = CliRunner().invoke(app, ["gpu", str(tmp_path / "t.json")])
    assert result.exit_code == 0 and "no launches" in result.output


def test_cli_json_rows(tmp_path):
    path = write_trace(tmp_path / "t.json", two_streams())
    result = CliRunner().invoke(app, ["gpu", str(path), "-f", "json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert rows[0]["device"] == 0 and rows[0]["stream"] is None
    for key in ("compute_ns", "memcpy_ns", "memset_ns", "comm_ns", "idle_ns", "busy_pct", "window_ns"):
        assert key in rows[0]
    assert rows[0]["busy_ns"] == 600 * US
    idle = json.loads(CliRunner().invoke(app, ["gpu", str(path), "--idle", "-f", "json"]).stdout)
    assert [r["cause"] for r in idle if r["device"] == 0] == ["sync", "input_pipeline", "launch_overhead",
                                                              "kernel_gap", "host_wait", "other"]
    launches = json.loads(CliRunner().invoke(app, ["gpu", str(path), "--launches", "-f", "json"]).stdout)
    assert launches[0]["launch_delay_median_ns"] == 50 * US
    table = CliRunner().invoke(app, ["gpu", str(path)])
    assert table.exit_code == 0 and "Idle time by cause" in table.output and "Launches, per device" in table.output


def test_real_hip_graph_trace_against_its_json():
    """vLLM decode on an AMD GPU: one hipGraphLaunch runs 421 of the trace's 425 kernels. Busy time must be the
    union of every kernel and copy of the raw JSON (graph kernels included), worked out here from the file."""
    import gzip
    from decimal import Decimal

    from support.shared import shared_trace

    path = shared_trace("tracelens/traces/inference/vllm_decode_full/graph_execution.json.gz")
    with gzip.open(path) as f:
        events = json.load(f, parse_float=Decimal)["traceEvents"]
    work = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    spans = sorted((int(Decimal(e["ts"]) * 1000), int((Decimal(e["ts"]) + Decimal(e["dur"])) * 1000)) for e in work)
    busy, (cur_s, cur_e) = 0, spans[0]
    for s, e in spans[1:]:
        if s > cur_e:
            busy, cur_s, cur_e = busy + cur_e - cur_s, s, e
        else:
            cur_e = max(cur_e, e)
    busy += cur_e - cur_s
    graph = next(e["args"]["correlation"] for e in events if e.get("name") == "hipGraphLaunch")
    in_graph = sum(1 for e in work if e["args"].get("correlation") == graph)
    a = GpuAnalysis(open_trace(path, use_cache=False))
    device = rows_by_stream(a)[(2, None)]
    assert device["busy_ns"] == busy and device["events"] == len(work) and device["clipped"] == 0
    launches = a.launches().to_pylist()[0]
    assert in_graph == 421 and launches["graph_launches"] == 1
    assert launches["kernels"] == sum(1 for e in work if e["cat"] == "kernel")


def test_overlapping_host_events_on_one_thread_still_answer(tmp_path):
    """Two ops on one thread that overlap without nesting (a broken writer): op_a [100, 300) and op_b
    [200, 400) us, each launching one kernel (5 us launches at 110 and 210). Every command still
    answers, and by hand: op_b starts inside op_a so it is taken as op_a's child, but only its part
    inside op_a, [200, 300), comes off op_a's self time: 200 - 5 - 100 = 95 us; op_b keeps 200 - 5 =
    195 us. The kernels give the device [150, 250) and [350, 380) = 130 us busy in the window [0, 1000)."""
    events = [
        step(1, 0, 1000),
        x("op_a", 100, 200), launch(110, 1),
        x("op_b", 200, 200), launch(210, 2),
        kernel("k_a", 150, 100, corr=1), kernel("k_b", 350, 30, corr=2),
    ]
    path = write_trace(tmp_path / "overlap.json", events)
    trace = open_trace(path, use_cache=False)
    rows = {r["name"]: r for r in __import__("opscope.analyses.ops", fromlist=["op_table"]).op_table(trace)
            .to_pylist()}
    assert rows["op_a"]["self_ns"] == 95 * US and rows["op_b"]["self_ns"] == 195 * US
    assert all(r["self_ns"] >= 0 for r in rows.values())
    device = rows_by_stream(GpuAnalysis(trace))[(0, None)]
    assert device["busy_ns"] == 130 * US and device["idle_ns"] == 870 * US
    runner = CliRunner()
    for args in (["ops", "--gpu"], ["gpu"], ["kernels", "--by-op"], ["scope"], ["steps"]):
        result = runner.invoke(app, [*args, str(path), "--no-cache", "-f", "json"])
        assert result.exit_code == 0, (args, result.output)
