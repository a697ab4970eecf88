"""Outputs that cannot be misread, errors that point the right way, progress: on real traces and through the
command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from support.shared import raw_events, shared_trace
from support.timing import limit

MI300 = "tracelens/traces/mi300/google_owlv2-large-patch14-ensemble__1016001.json.gz"


def run(*args: str, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "150", **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "opscope.cli", *args], capture_output=True, text=True,
                          env=env, timeout=limit(300))


def test_summary_shows_tensile_kernels_on_one_line_as_opscope_kernels_does():
    path = shared_trace(MI300)
    # the AMD GEMMs of the raw file: Tensile names of more than 400 characters
    tensile = {str(e["name"]) for e in raw_events(path) if e.get("cat") == "kernel"
               and str(e.get("name", "")).startswith("Cijk_")}
    assert tensile and max(map(len, tensile)) > 400
    res = run("summary", str(path))
    assert res.returncode == 0, res.stderr
    rows = [line for line in res.stdout.splitlines() if "Cijk_" in line]
    assert rows, res.stdout
    for line in rows:  # one line per kernel: the name cut after its tile shape and matrix instruction
        name = line.split("│")[1].strip()
        assert name.endswith("_MI16x16x1") and any(full.startswith(name + "_") for full in tensile)
    assert not any(line.strip("│ ").startswith(("1_AF", "C1_AF", "B_GLS")) for line in res.stdout.splitlines())
    # JSON: the same rows as `opscope kernels` gives (one per kernel, the same names and totals)
    doc = json.loads(run("summary", str(path), "--format", "json").stdout)
    top = [(r["metric"], r["value"]) for r in doc if r["section"] == "top_kernels_ns"]
    kernels = json.loads(run("kernels", str(path), "--format", "json").stdout)
    assert top and top == [(r["name"], r["total_ns"]) for r in kernels[:len(top)]]
    assert all(any(full.startswith(name + "_") for full in tensile) for name, _ in top if name.startswith("Cijk_"))


def test_diff_of_the_legacy_tensorboard_samples_has_no_step_rows():
    base = shared_trace("kineto/samples/resnet50_num_workers_0/worker0.pt.trace.json.gz")
    new = shared_trace("kineto/samples/resnet50_num_workers_4/worker0.pt.trace.json.gz")
    # the raw files write their steps as operators, beside the ops
    steps = [e for e in raw_events(base) if str(e.get("name", "")).startswith("ProfilerStep#")]
    assert steps and {e.get("cat") for e in steps} == {"Operator"}
    res = run("diff", str(base), str(new), "--format", "json", "--limit", "0")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    rows = doc if isinstance(doc, list) else doc["rows"]
    assert rows and not [r for r in rows if str(r["name"]).startswith("ProfilerStep#")]
    # calls are per step: the raw aten::empty events inside the new trace's steps, over its step count
    new_steps = [e for e in raw_events(new) if str(e.get("name", "")).startswith("ProfilerStep#")]
    empties = [e for e in raw_events(new) if e.get("name") == "aten::empty" and e.get("ph") == "X"
               and any(s["ts"] <= e["ts"] < s["ts"] + s["dur"] for s in new_steps)]
    row = next(r for r in rows if r["kind"] == "op" and r["name"] == "aten::empty")
    assert row["calls_new"] == len(empties) / len(new_steps)
    assert "times and calls are per step" in res.stderr


def test_real_files_that_are_not_traces_say_what_they_are():
    cases = {
        "generated/tf_keras_cpu_framework_op_stats.json": ("XProf/TensorBoard tool table", "trace viewer"),
        "hta/memory_analysis/memory_timeline.raw.gz": ("PyTorch memory timeline", "profile_memory=True"),
    }
    for relative, words in cases.items():
        path = shared_trace(relative)
        res = run("summary", str(path))
        assert res.returncode == 2
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"opscope: error: {path}: "), res.stderr
        assert all(w in lines[0] for w in words) and "profiler stopped" not in lines[0]


def test_summary_takes_limit_like_every_table_command(trace_file):
    # small_gpu_trace: three cpu ops (aten::conv2d, aten::convolution, aten::relu) and two kernels
    def top(*args: str) -> list[str]:
        res = run("summary", str(trace_file), "--format", "json", *args)
        assert res.returncode == 0, res.stderr
        return [r["section"] for r in json.loads(res.stdout) if r["section"].startswith("top_")]

    assert top("--limit", "1") == ["top_ops_self_ns", "top_kernels_ns"]
    assert top("--limit", "0").count("top_ops_self_ns") == 3 and top("-n", "0").count("top_kernels_ns") == 2
    res = run("summary", str(trace_file), "--limit", "1")
    assert res.returncode == 0 and "aten::relu" not in res.stdout


def test_record_runs_python_c(tmp_path):
    import pytest

    torch = pytest.importorskip("torch", reason="capture needs the torch extra")
    code = ("import sys, torch\n"
            "print('argv', sys.argv, __name__)\n"
            "m = torch.nn.Linear(8, 8); opt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
            "for _ in range(6):\n"
            "    m(torch.randn(4, 8)).sum().backward(); opt.step(); opt.zero_grad()\n")
    out = tmp_path / "rec"
    r = subprocess.run([sys.executable, "-m", "opscope.cli", "record", "-o", str(out), "--", "python", "-c", code,
                        "x1"], cwd=tmp_path, capture_output=True, text=True, timeout=limit(300))
    assert r.returncode == 0, r.stderr
    assert "argv ['-c', 'x1'] __main__" in r.stdout  # as python -c sets them
    info = json.loads((out / "run.json").read_text())
    assert info["steps"] == 6 and info["command"] == ["python", "-c", code, "x1"]
    assert info["traces"] == ["trace-1.pt.trace.json.gz"] and torch.__version__ == info["versions"]["torch"]
