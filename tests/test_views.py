"""opscope scope / code: op time by nn.Module path and by Python frame, checked by hand, on a real torch
recording against sums computed from its raw JSON, and on the real traces."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest
from support import make_trace, row
from support.shared import shared_trace
from support.tracefiles import small_gpu_trace, write_trace, x

from opscope.analyses import views
from opscope.analyses.filters import EventFilter
from opscope.ingest import open_trace

US = 1000


def py(name: str, ts: float, dur: float, tid=1) -> dict:
    return x(name, ts, dur, cat="python_function", tid=tid)


def frame(name: str, ts: float, dur: float) -> dict:
    """A Python frame as a model row (times in us), for traces built in memory."""
    return row("python", name, ts, dur)


def hand_trace() -> list[dict]:
    """Thread 1 runs the forward; thread 2 a backward op with no Python around it. Times in us.

    train.py(10): <module> [0, 1000)
      nn.Module: Net_0 [10, 900) > model.py(5): forward [12, 890)
        nn.Module: Linear_0 [20, 300) > linear.py(125): forward > <built-in function linear> [25, 280)
            aten::linear [30, 270) > aten::addmm [40, 260)           -> 240 (20 + 220)
        nn.Module: ReLU_0 [400, 500) > <built-in method relu ... at 0x7f00> [405, 495)
            aten::relu [410, 490)                                    -> 80
        nn.Module: ReLU_0 [520, 580) > <built-in method relu ... at 0x7f99> [522, 578)
            aten::relu [530, 570)                                    -> 40
        nn.Module: Linear_1 [600, 800) > linear.py(125): forward > <built-in function linear> [605, 780)
            aten::linear [610, 770)                                  -> 160
        aten::add [850, 880) directly in model.py(5): forward        -> 30
      aten::sum [950, 990) in <module>, outside Net_0                -> 40
    thread 2: autograd::engine::evaluate_function: AddmmBackward0 [100, 400) -> 300
    """
    return [
        x("ProfilerStep#1", 0, 1000, cat="user_annotation"),
        py("train.py(10): <module>", 0, 1000),
        py("nn.Module: Net_0", 10, 890),
        py("model.py(5): forward", 12, 878),
        py("nn.Module: Linear_0", 20, 280),
        py("torch/nn/modules/linear.py(125): forward", 22, 268),
        py("<built-in function linear>", 25, 255),
        x("aten::linear", 30, 240),
        x("aten::addmm", 40, 220),
        py("nn.Module: ReLU_0", 400, 100),
        py("<built-in method relu of type object at 0x7f00>", 405, 90),
        x("aten::relu", 410, 80),
        py("nn.Module: ReLU_0", 520, 60),
        py("<built-in method relu of type object at 0x7f99>", 522, 56),
        x("aten::relu", 530, 40),
        py("nn.Module: Linear_1", 600, 200),
        py("torch/nn/modules/linear.py(125): forward", 602, 188),
        py("<built-in function linear>", 605, 175),
        x("aten::linear", 610, 160),
        x("aten::add", 850, 30),
        x("aten::sum", 950, 40),
        x("autograd::engine::evaluate_function: AddmmBackward0", 100, 300, tid=2),
    ]


@pytest.fixture
def hand(tmp_path):
    return open_trace(write_trace(tmp_path / "views.json", hand_trace()), use_cache=False)


def rows_by(table, key: str) -> dict:
    return {r[key]: r for r in table.to_pylist()}


def test_scope_tree_by_hand(hand):
    table = views.tree_table(views.module_tree(hand), column="module")
    rows = rows_by(table, "path")
    net = rows["Net_0"]
    assert (net["calls"], net["wall_ns"], net["total_ns"], net["self_ns"], net["ops"]) == (
        1, 890 * US, 550 * US, 30 * US, 6)
    assert (rows["Net_0/Linear_0"]["total_ns"], rows["Net_0/Linear_0"]["self_ns"]) == (240 * US, 240 * US)
    relu = rows["Net_0/ReLU_0"]
    assert (relu["calls"], relu["wall_ns"], relu["total_ns"], relu["ops"], relu["depth"]) == (2, 160 * US, 120 * US,
                                                                                             2, 1)
    assert rows["Net_0/Linear_1"]["total_ns"] == 160 * US
    outside = rows[views.OUTSIDE_MODULES]
    assert (outside["total_ns"], outside["ops"], outside["calls"]) == (340 * US, 2, None)
    assert net["total_pct"] == round(100 * 550 / 890, 2)
    # tree order, siblings by total: Net_0 (550) before (no module) (340); Linear_0, Linear_1, ReLU_0 below it
    assert table["path"].to_pylist() == ["Net_0", "Net_0/Linear_0", "Net_0/Linear_1", "Net_0/ReLU_0",
                                         views.OUTSIDE_MODULES]
    ordered = views.tree_table(views.module_tree(hand), sort="order", column="module")
    assert ordered["path"].to_pylist()[:4] == ["Net_0", "Net_0/Linear_0", "Net_0/ReLU_0", "Net_0/Linear_1"]
    top = views.tree_table(views.module_tree(hand), max_depth=0, column="module")
    assert top["path"].to_pylist() == ["Net_0", views.OUTSIDE_MODULES] and top["total_ns"][0].as_py() == 550 * US


def test_scope_filters(hand):
    linear = views.tree_table(views.module_tree(hand, EventFilter(kinds=("cpu_op",), match="linear")))
    rows = rows_by(linear, "path")
    # only aten::linear counts; aten::addmm inside it is no longer a selected op, so it stays in its time
    assert rows["Net_0"]["total_ns"] == 400 * US and rows["Net_0/Linear_0"]["total_ns"] == 240 * US
    assert "Net_0/ReLU_0" in rows and rows["Net_0/ReLU_0"]["total_ns"] == 0
    assert views.OUTSIDE_MODULES not in rows
    assert views.tree_table(views.module_tree(hand, EventFilter(kinds=("cpu_op",), steps=[2]))).num_rows == 0
    same = views.tree_table(views.module_tree(hand, EventFilter(kinds=("cpu_op",), steps=[1])))
    assert same.equals(views.tree_table(views.module_tree(hand)))


def test_code_tree_and_flat_by_hand(hand):
    tree = views.code_tree(hand)
    rows = rows_by(views.tree_table(tree), "path")
    root = rows["train.py:10 <module>"]
    assert (root["total_ns"], root["self_ns"], root["depth"]) == (590 * US, 40 * US, 0)
    forward = rows["train.py:10 <module>;nn.Module: Net_0;model.py:5 forward"]
    assert (forward["total_ns"], forward["self_ns"]) == (550 * US, 30 * US)
    assert rows[views.OUTSIDE_FRAMES]["total_ns"] == 300 * US
    flat = rows_by(views.flat_table(tree), "frame")
    linear = flat["<built-in function linear>"]
    assert (linear["calls"], linear["total_ns"], linear["self_ns"], linear["ops"]) == (2, 400 * US, 400 * US, 3)
    relu = flat["<built-in method relu of type object>"]  # object addresses dropped: one frame, two calls
    assert (relu["calls"], relu["total_ns"], relu["wall_ns"]) == (2, 120 * US, 146 * US)
    assert flat["torch/nn/modules/linear.py:125 forward"]["self_ns"] == 0
    assert views.flat_table(tree)["frame"][0].as_py() == "<built-in function linear>"  # largest self time first
    kept = rows_by(views.tree_table(views.code_tree(hand, frames=r"model\.py|train\.py")), "path")
    assert set(kept) == {"train.py:10 <module>", "train.py:10 <module>;model.py:5 forward", views.OUTSIDE_FRAMES}
    assert kept["train.py:10 <module>;model.py:5 forward"]["self_ns"] == 550 * US


def test_scope_falls_back_on_forward_frames():
    """Older torch wrote no nn.Module events: the frames of forward methods stand for the modules."""
    events = [frame("train.py(3): <module>", 0, 100), frame("torch/nn/modules/module.py(1102): _call_impl", 5, 90),
              frame("net.py(7): forward", 6, 88), frame("torch/nn/modules/conv.py(446): forward", 10, 40),
              row("cpu_op", "aten::conv2d", 12, 30), row("cpu_op", "aten::relu", 60, 10)]
    rows = rows_by(views.tree_table(views.module_tree(make_trace(events))), "path")
    assert rows["net.py:7 forward"]["total_ns"] == 40 * US and rows["net.py:7 forward"]["self_ns"] == 10 * US
    assert rows["net.py:7 forward/torch/nn/modules/conv.py:446 forward"]["total_ns"] == 30 * US


def test_recursive_frame_counts_once_per_stack():
    events = [frame("f.py(1): rec", 0, 100), frame("f.py(1): rec", 10, 80), row("cpu_op", "aten::mul", 20, 60)]
    tree = views.code_tree(make_trace(events))
    flat = rows_by(views.flat_table(tree), "frame")["f.py:1 rec"]
    assert (flat["calls"], flat["total_ns"], flat["self_ns"], flat["wall_ns"]) == (2, 60 * US, 60 * US, 100 * US)
    paths = rows_by(views.tree_table(tree), "path")
    assert paths["f.py:1 rec;f.py:1 rec"]["total_ns"] == paths["f.py:1 rec"]["total_ns"] == 60 * US


def test_innermost_enclosing_walks_up_closed_spans():
    import pyarrow as pa

    # thread 7: A [0, 100) > B [10, 20), C [30, 40); thread 8: D [0, 50)
    spans = pa.table({"thread": [7, 7, 7, 8], "ts": [0, 10, 30, 0], "end": [100, 20, 40, 50],
                      "parent": pa.array([None, 0, 0, None], pa.int64())})
    queries = pa.table({"thread": [7, 7, 7, 8, 7, 9], "ts": [15, 35, 50, 49, 100, 5]})
    assert views.innermost_enclosing(spans, queries).to_pylist() == [1, 2, 0, 3, None, None]
    accept = spans.append_column("accept", pa.array([True, False, True, True]))
    assert views.innermost_enclosing(accept, queries).to_pylist() == [0, 2, 0, 3, None, None]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "opscope.cli", *args], capture_output=True, text=True,
                          env=dict(os.environ), timeout=120)


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
