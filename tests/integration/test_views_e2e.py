"""opscope scope / code through the CLI, on a real torch recording against sums computed from its raw JSON, and
on the real traces."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest
from support.shared import shared_trace
from support.timing import limit
from support.tracefiles import small_gpu_trace, write_trace
from support.views import US, hand_trace

from opscope.analyses import views
from opscope.ingest import open_trace


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "opscope.cli", *args], capture_output=True, text=True,
                          env=dict(os.environ), timeout=limit(120))


def test_cli(tmp_path):
    path = write_trace(tmp_path / "views.json", hand_trace())
    res = run("scope", str(path), "-f", "json")
    assert res.returncode == 0, res.stderr
    assert {r["path"]: r["total_ns"] for r in json.loads(res.stdout)}["Net_0/ReLU_0"] == 120 * US
    res = run("scope", str(path))
    assert res.returncode == 0 and "  Linear_0" in res.stdout and "(no module)" in res.stdout
    res = run("code", str(path), "--flat", "-f", "csv", "-n", "1")
    assert res.stdout.splitlines()[1].startswith("<built-in function linear>,2,")
    res = run("code", str(path), "--sort", "bogus")
    assert res.returncode == 2 and "cannot sort by" in res.stderr and "Traceback" not in res.stderr
    res = run("code", str(path), "--frames", "(")
    assert res.returncode == 2 and "invalid regular expression" in res.stderr
    # no Python events: one line saying how to record them, exit 0 (a valid trace without that data)
    plain = write_trace(tmp_path / "plain.json", small_gpu_trace())
    for command in ("scope", "code"):
        res = run(command, str(plain))
        assert res.returncode == 0 and res.stdout.count("\n") == 1 and "with_stack=True" in res.stdout
    res = run("scope", str(plain), "-f", "json")
    assert json.loads(res.stdout) == [] and "with_stack=True" in res.stderr


# --- a real torch recording -------------------------------------------------------------------------------

def _outermost_op_time(ops: list[tuple[Decimal, Decimal]]) -> Decimal:
    """Sum of the durations of the ops not inside another op of the list."""
    total, end = Decimal(0), None
    for ts, dur in sorted(ops, key=lambda o: (o[0], -o[1])):
        if end is not None and ts + dur <= end:
            continue
        total += dur
        end = ts + dur
    return total


def test_torch_recording_module_totals_equal_their_ops(tmp_path):
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = torch.nn.Linear(32, 64)
            self.decoder = torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Linear(64, 8))

        def forward(self, x):
            return self.decoder(self.encoder(x))

    model, data = Tiny(), torch.randn(16, 32)
    with profile(activities=[ProfilerActivity.CPU], with_stack=True, with_modules=True) as prof:
        for _ in range(2):
            model(data).sum().backward()
    path = tmp_path / "tiny.json"
    prof.export_chrome_trace(str(path))

    doc = json.loads(path.read_text(), parse_float=Decimal)
    events = doc["traceEvents"]
    ops = [e for e in events if e.get("cat") == "cpu_op"]
    expected: dict[str, Decimal] = {}
    for e in events:
        if e.get("cat") == "python_function" and e["name"].startswith("nn.Module: "):
            start, end = e["ts"], e["ts"] + e["dur"]
            inside = [(o["ts"], o["dur"]) for o in ops if o["tid"] == e["tid"] and start <= o["ts"] < end]
            name = e["name"][len("nn.Module: "):]
            expected[name] = expected.get(name, Decimal(0)) + _outermost_op_time(inside)
    rows = views.tree_table(views.module_tree(open_trace(path, use_cache=False))).to_pylist()
    ours = {r["path"].rsplit("/", 1)[-1]: r["total_ns"] for r in rows if r["path"] != views.OUTSIDE_MODULES}
    assert set(ours) == {"Tiny_0", "Linear_0", "Sequential_0", "ReLU_0", "Linear_1"} == set(expected)
    for name, total in expected.items():
        assert ours[name] == int(total * 1000), name
    paths = [r["path"] for r in rows]
    assert "Tiny_0/Sequential_0/Linear_1" in paths and "Tiny_0/Linear_0" in paths


# --- the real traces ------------------------------------------------------------------------------------

REAL = ["generated/torch_cpu_mobilenetv2_train.json",
        "tracelens/traces/h100/gaunernst_bert-small-uncased__1016001.json.gz",
        "tracelens/traces/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz",
        "tracelens/traces/b200/eager_trace.json.gz",
        "tracelens/traces/inference/vllm_decode_full/capture_traces/"
        "graph_capture_rank_0.1773709742341309550.pt.trace.json.gz",
        "tracelens/traces/inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz",
        "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"]


def _raw_outermost_cpu_op_time(path: Path) -> int:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        doc = json.load(f, parse_float=Decimal)
    per_thread: dict = {}
    for e in doc["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") == "cpu_op":
            per_thread.setdefault((e["pid"], e["tid"]), []).append((Decimal(e["ts"]), Decimal(e["dur"])))
    return int(sum(_outermost_op_time(o) for o in per_thread.values()) * 1000)


@pytest.mark.parametrize("relative", REAL)
def test_real_traces(relative):
    path = shared_trace(relative)
    trace = open_trace(path)
    has_python = "python" in set(trace.select(["kind"])["kind"].to_pylist())
    scope, code = views.module_tree(trace), views.code_tree(trace)
    if not has_python:
        assert scope.note == code.note == views.NO_PYTHON
        return
    assert scope.note is None and code.note is None
    # every selected op lands in exactly one root: the roots add up to the time of the outermost ops
    expected = _raw_outermost_cpu_op_time(path)
    for table in (views.tree_table(scope, max_depth=0), views.tree_table(code, max_depth=0)):
        assert sum(table["total_ns"].to_pylist()) == expected
    assert sum(views.flat_table(code)["self_ns"].to_pylist()) == expected
    deep = views.tree_table(scope)
    assert deep["depth"].to_pylist() and all(0 <= p <= 100 for p in deep["total_pct"].to_pylist())
