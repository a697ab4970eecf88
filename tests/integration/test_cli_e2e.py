"""The command line run as a program: formats, options, cache behaviour, SQL, and the demo."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys

import pytest
from support.timing import limit

US = 1000


def run(*args: str, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "opscope.cli", *args], capture_output=True, text=True,
                          env=env, timeout=limit(300))


def test_ops_json_and_csv(trace_file):
    res = run("ops", str(trace_file), "--format", "json")
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)
    conv = next(r for r in rows if r["name"] == "aten::conv2d")
    assert conv == {"name": "aten::conv2d", "python_api": "torch.nn.functional.conv2d",
                    "calls": 2, "total_ns": 500 * US, "self_ns": 210 * US,
                    "avg_ns": 250 * US, "min_ns": 200 * US, "max_ns": 300 * US,
                    "self_pct": round(100 * 210 / 580, 2),
                    # the time any cpu op ran: [100, 400) + [500, 600) + [1100, 1300) us = 600 us
                    "total_pct": round(100 * 500 / 600, 2)}
    res = run("ops", str(trace_file), "--format", "csv", "--sort", "-calls", "--limit", "1")
    table = list(csv.DictReader(io.StringIO(res.stdout)))
    assert len(table) == 1 and table[0]["calls"] == "1"


def test_ops_table_output_and_bad_options(trace_file):
    res = run("ops", str(trace_file))
    assert res.returncode == 0 and "aten::conv2d" in res.stdout
    res = run("ops", str(trace_file), "--match", "(")
    assert res.returncode == 2 and "invalid regular expression" in res.stderr
    assert "Traceback" not in res.stderr
    res = run("ops", str(trace_file), "--sort", "nope")
    assert res.returncode == 2 and "cannot sort by" in res.stderr
    res = run("ops", str(trace_file), "--steps", "x-y")
    assert res.returncode == 2 and "--steps" in res.stderr


def test_kernels_steps_summary_json(trace_file):
    kernels = json.loads(run("kernels", str(trace_file), "--by-op", "--format", "json").stdout)
    assert {(r["op"], r["name"], r["total_ns"]) for r in kernels} == {
        ("aten::convolution", "conv_kernel", 200 * US), ("aten::conv2d", "conv_kernel", 60 * US),
        ("(no launching op)", "relu_kernel", 100 * US)}
    steps = json.loads(run("steps", str(trace_file), "--format", "json").stdout)
    assert [(s["step"], s["dur_ns"], s["gpu_busy_ns"], s["launched_gpu_ns"]) for s in steps] == [
        (1, 1000 * US, 200 * US, 200 * US), (2, 2000 * US, 110 * US, 160 * US)]
    summary = json.loads(run("summary", str(trace_file), "--format", "json").stdout)
    metrics = {(r["section"], r["metric"]): r["value"] for r in summary}
    assert metrics[("overview", "wall_ns")] == 3050 * US
    assert metrics[("overview", "gpu_busy_ns")] == 360 * US
    assert metrics[("overview", "steps")] == 2


def test_query_sql(trace_file):
    res = run("query", str(trace_file), "select name, sum(dur_ns) as total_ns from events "
              "where kind = 'kernel' group by name order by name", "--format", "json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == [{"name": "conv_kernel", "total_ns": 260 * US},
                                      {"name": "relu_kernel", "total_ns": 100 * US}]
    res = run("query", str(trace_file), "select nope from events")
    assert res.returncode == 2 and res.stderr.startswith("opscope: error: SQL error")


def test_no_cache_writes_nothing(trace_file, cache_dir):
    res = run("summary", str(trace_file), "--no-cache", env_extra={"OPSCOPE_CACHE_DIR": str(cache_dir)})
    assert res.returncode == 0, res.stderr
    assert not cache_dir.exists() or not any(cache_dir.iterdir())


def test_help_lists_commands():
    res = run("--help")
    for command in ("summary", "ops", "kernels", "steps", "query", "demo"):
        assert command in res.stdout


def test_demo_without_torch_says_so(tmp_path):
    fake = tmp_path / "fake"
    (fake / "torch").mkdir(parents=True)
    (fake / "torch" / "__init__.py").write_text("raise ImportError('No module named torch')\n")
    res = run("demo", "--output", str(tmp_path / "out"),
              env_extra={"PYTHONPATH": os.pathsep.join([str(fake), os.environ.get("PYTHONPATH", "")])})
    assert res.returncode == 2
    assert "needs PyTorch" in res.stderr and "torch==2.13.0" in res.stderr
    assert "Traceback" not in res.stderr


def test_demo_records_and_summarizes(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "demo"
    res = run("demo", "--output", str(out), "--steps", "2")
    assert res.returncode == 0, res.stderr
    assert "Top operators by self time" in res.stdout
    trace = out / "demo.pt.trace.json"
    assert trace.is_file()
    # run.json beside it, as opscope record writes one: the trace, the host, and torch's threads sized for the
    # host: its usable cores less the cores the load average says other processes keep busy (at least one)
    info = json.loads((out / "run.json").read_text())
    cpu = info["cpu"]
    assert info["traces"] == ["demo.pt.trace.json"] and info["status"] == "finished"
    assert info["threads"]["intra_op"] == max(1, cpu["usable_cores"] - round(cpu["load_average"][0]))
    # the profiler's own start/stop lines (Kineto writes them to stderr) are held back: the user sees our lines,
    # the last one saying how to record a program of their own
    report = out / "demo.report.html"
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 3, res.stderr
    assert lines[0].startswith(f"opscope: trace saved to {trace} (run.json beside it: "
                               f"{info['threads']['intra_op']} intra-op threads for {cpu['usable_cores']} usable "
                               f"cores"), lines[0]
    assert lines[1] == f"report: {report} (open it in a browser; it works offline)"
    assert lines[2].startswith("opscope: next, your own program: opscope record -o myrun -- python train.py")
    assert report.read_text().startswith("<!DOCTYPE html>")
    # advise finds the run.json: the threads rule runs (it needs the thread settings) instead of saying it cannot
    advice = run("advise", str(trace), "--rules", "threads", "--format", "json")
    assert advice.returncode == 0 and "no run.json" not in advice.stderr, advice.stderr
    # A second run never overwrites the first recording, nor its report: it takes a fresh directory
    first = report.read_bytes()
    res = run("demo", "--output", str(out), "--steps", "2")
    second = tmp_path / "demo-1"
    assert res.returncode == 0 and (second / "demo.pt.trace.json").is_file() and (second / "run.json").is_file()
    assert (second / "demo.report.html").is_file() and report.read_bytes() == first
