"""opscope perf MODEL.onnx: migraphx-driver perf's report on ONNX Runtime, checked against the profile it leaves.

Models are built here with onnx.helper. Expected values are computed from the written ORT profile with json.load
and MIGraphX's formulas written out again here (common average = mean of the middle half of the sorted per-run
times; share = ceil; percentile = sorted[floor(p * (n - 1))]), never with opscope's code.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from support.cli import assert_one_line_error, run_cli, run_cli_many
from support.shared import shared_trace
from support.timing import limit

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
np = pytest.importorskip("numpy")
pytest.importorskip("onnxconverter_common")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def conv_model(path: Path, batch: str | int = "N") -> Path:
    """Conv -> Relu -> MatMul -> Add, input x [batch, 3, 8, 8] (symbolic batch by default)."""
    rng = np.random.default_rng(1)
    weights = [numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "W"),
               numpy_helper.from_array(rng.standard_normal((8, 5)).astype(np.float32), "M"),
               numpy_helper.from_array(rng.standard_normal((5,)).astype(np.float32), "B")]
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "M"], ["m"], name="mm"),
             helper.make_node("Add", ["m", "B"], ["y"], name="add")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4, 8, 5])], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def two_symbolic_model(path: Path) -> Path:
    """x [N, S] -> Relu: the second dim cannot be guessed."""
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "S"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "S"])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def nan_model(path: Path) -> Path:
    """x [2, 6] -> Sqrt (NaN where x < 0) -> Add 1 -> Relu: the first NaN appears at Sqrt."""
    one = numpy_helper.from_array(np.array([1.0], np.float32), "one")
    nodes = [helper.make_node("Sqrt", ["x"], ["s"], name="sqrt"), helper.make_node("Add", ["s", "one"], ["a"],
                                                                                  name="plus1"),
             helper.make_node("Relu", ["a"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 6])], [one])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


# --- MIGraphX's formulas, written out again ---------------------------------------------------------

def common_average(values: list[float]) -> float:
    v = sorted(values)
    cut = len(v) // 4
    middle = v[cut:len(v) - cut]
    return sum(middle) / len(middle)


def expected_from_profile(profile: Path) -> dict:
    events = json.loads(profile.read_text())
    runs = sorted((e["ts"], e["dur"]) for e in events if e["name"] == "model_run")
    per_node: dict[str, list[float]] = defaultdict(lambda: [0.0] * len(runs))
    first: dict[str, tuple[int, int]] = {}
    op_of: dict[str, str] = {}
    for e in sorted(events, key=lambda e: e["ts"]):
        if e["cat"] != "Node" or not e["name"].endswith("_kernel_time"):
            continue
        node = e["name"].removesuffix("_kernel_time")
        run = next(i for i, (ts, dur) in enumerate(runs) if ts <= e["ts"] <= ts + dur)
        per_node[node][run] += e["dur"] / 1000  # µs -> ms
        first.setdefault(node, (run, e["ts"]))
        op_of[node] = e["args"]["op_name"]
    order = sorted(per_node, key=lambda n: first[n])
    times = {n: common_average(per_node[n]) for n in order}
    totals = sorted(d / 1000 for _, d in runs)
    execute = sorted((e["ts"], e["dur"]) for e in events if e["name"] == "SequentialExecutor::Execute")
    return {"runs": len(runs), "order": order, "times": times, "op_of": op_of, "totals": totals,
            "per_node": {n: sorted(per_node[n]) for n in order},
            "total": common_average(totals), "node_total": sum(times[n] for n in order),
            "outside": common_average([(r - x) / 1000 for (_, r), (_, x) in zip(runs, execute)]),
            "input_shape": next(e["args"]["input_type_shape"][0] for e in events if e["cat"] == "Node")}


def rows_by_section(stdout: str) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = defaultdict(list)
    for row in json.loads(stdout):
        out[row["section"]].append(row)
    return out


# --- the report against the profile ----------------------------------------------------------------

def test_report_equals_the_profile(tmp_path, cache):
    model = conv_model(tmp_path / "m.onnx")
    profile = tmp_path / "p.json"
    res = run_cli("perf", str(model), "-n", "9", "--batch", "2", "-o", str(profile), "--format", "json", cache=cache)
    assert res.returncode == 0, res.stderr
    assert "profiler" in res.stderr and "common average" in res.stderr  # the caveats are said
    want = expected_from_profile(profile)
    got = rows_by_section(res.stdout)
    assert want["runs"] == 9  # the warm-up run is not in the profile
    assert want["input_shape"] == {"float": [2, 3, 8, 8]}  # --batch 2 filled the symbolic batch dim

    nodes = got["node"]
    assert [r["name"] for r in nodes] == want["order"]
    assert [r["index"] for r in nodes] == list(range(len(nodes)))
    for r in nodes:
        assert r["value"] == pytest.approx(want["times"][r["name"]], rel=1e-12)
        assert r["op"] == want["op_of"][r["name"]]
        assert r["count"] == 9
        assert r["pct"] == math.ceil(100 * want["times"][r["name"]] / want["node_total"])
    for r in nodes:  # each node's per-run times: median (9 runs: the 5th), p10 (position 0.8), p90 (position 7.2)
        v = want["per_node"][r["name"]]
        assert r["median"] == pytest.approx(v[4], rel=1e-12)
        assert r["p10"] == pytest.approx(v[0] + 0.8 * (v[1] - v[0]), rel=1e-12, abs=1e-12)
        assert r["p90"] == pytest.approx(v[7] + 0.2 * (v[8] - v[7]), rel=1e-12, abs=1e-12)
    totals = {r["name"]: r for r in got["total"]}
    t = want["totals"]
    spread = totals["total_time"]
    assert spread["count"] == 9 and spread["median"] == pytest.approx(t[4], rel=1e-12)
    assert spread["p10"] == pytest.approx(t[0] + 0.8 * (t[1] - t[0]), rel=1e-12)
    assert spread["p90"] == pytest.approx(t[7] + 0.2 * (t[8] - t[7]), rel=1e-12)
    assert f"median {t[4]:.6g}ms, p10-p90 " in res.stderr  # the headline says the spread
    # total node time is the sum of the per-node times, exactly as listed
    assert totals["total_node_time"]["value"] == pytest.approx(sum(r["value"] for r in nodes), rel=1e-12)
    assert totals["total_node_time"]["value"] == pytest.approx(want["node_total"], rel=1e-12)
    assert totals["total_time"]["value"] == pytest.approx(want["total"], rel=1e-12)
    assert totals["rate"]["value"] == pytest.approx(1000 / want["total"] * 2, rel=1e-12)
    assert totals["batch"]["value"] == 2
    t = want["totals"]
    assert totals["min"]["value"] == pytest.approx(t[0]) and totals["max"]["value"] == pytest.approx(t[-1])
    assert totals["median"]["value"] == pytest.approx(t[4])
    assert totals["mean"]["value"] == pytest.approx(sum(t) / 9)
    assert totals["p90"]["value"] == pytest.approx(t[7])  # floor(0.9 * 8) = 7
    assert totals["p99"]["value"] == pytest.approx(t[7])  # floor(0.99 * 8) = 7
    assert totals["overhead_calc"]["value"] == pytest.approx(want["total"] - want["node_total"], rel=1e-9)
    assert totals["overhead_calc"]["pct"] == round(100 * (want["total"] - want["node_total"]) / want["total"])
    assert totals["overhead_executor"]["value"] == pytest.approx(want["outside"], rel=1e-9)

    by_op: dict[str, list[float]] = defaultdict(list)
    for n in want["order"]:
        by_op[want["op_of"][n]].append(want["times"][n])
    ops = got["op_type"]
    assert {r["name"]: (r["value"], r["count"]) for r in ops} == \
        {op: (pytest.approx(sum(v), rel=1e-12), len(v)) for op, v in by_op.items()}
    assert [r["value"] for r in ops] == sorted((r["value"] for r in ops), reverse=True)


def test_real_model_report_equals_its_profile(tmp_path, cache):
    """The mini MobileNet in ../shared (the survey's ORT profile was recorded from it): ORT runs its 10 nodes as
    the 8 of its optimised graph (survey, section 2), and the report's figures are the profile's."""
    model = shared_trace("generated/mini_mobilenet.onnx")
    profile = tmp_path / "p.json"
    res = run_cli("perf", str(model), "-n", "8", "-o", str(profile), "--format", "json", cache=cache)
    assert res.returncode == 0, res.stderr
    want = expected_from_profile(profile)
    assert want["order"] == ["r1_nchwc", "r2_nchwc", "c3_nchwc", "p_nchwc", "g_nchwc", "ReorderOutput", "flat", "fc"]
    got = rows_by_section(res.stdout)
    assert [(r["name"], r["op"]) for r in got["node"]] == [(n, want["op_of"][n]) for n in want["order"]]
    assert [r["value"] for r in got["node"]] == [pytest.approx(want["times"][n], rel=1e-12) for n in want["order"]]
    totals = {r["name"]: r["value"] for r in got["total"]}
    assert totals["total_node_time"] == pytest.approx(sum(r["value"] for r in got["node"]), rel=1e-12)
    assert totals["rate"] == pytest.approx(1000 / want["total"], rel=1e-12)
    conv = next(r for r in got["op_type"] if r["name"] == "Conv")
    assert conv["count"] == 3  # r1, r2 and c3 (Conv+Relu and Conv+BN+Relu fused by ORT)


def test_terminal_report_is_migraphx_text(tmp_path, cache):
    model = conv_model(tmp_path / "m.onnx", batch=1)
    profile = tmp_path / "p.json"
    res = run_cli("perf", str(model), "-n", "4", "-o", str(profile), cache=cache)
    assert res.returncode == 0, res.stderr
    want = expected_from_profile(profile)
    lines = res.stdout.splitlines()
    for node in want["order"]:
        line = next(ln for ln in lines if ln.startswith(f"{node} = {want['op_of'][node]}("))
        assert line.endswith("%") and f"{want['times'][node]:.6g}ms" in line
    for label in ("Summary:", "Batch size: 1", "Rate: ", "Total time: ", "Percentiles (90%, 95%, 99%): (",
                  "Spread: median ", "Total node time: ", "Overhead time: ", "Overhead: "):
        assert any(ln.startswith(label) for ln in lines), label
    rate = next(ln for ln in lines if ln.startswith("Rate: "))
    assert rate == f"Rate: {1000 / want['total']:.6g} inferences/sec"
    assert "include the profiler's own cost" in res.stdout
    # 4 runs: median between the 2nd and 3rd, p10 at position 0.3, p90 at 2.7
    t = want["totals"]
    spread = next(ln for ln in lines if ln.startswith("Spread: "))
    assert spread == (f"Spread: median {(t[1] + t[2]) / 2:.6g}ms, p10-p90 {t[0] + 0.3 * (t[1] - t[0]):.6g}ms-"
                      f"{t[2] + 0.7 * (t[3] - t[2]):.6g}ms over 4 runs")


def test_input_dim_sets_the_exact_shape(tmp_path, cache):
    model = conv_model(tmp_path / "m.onnx")
    profile = tmp_path / "p.json"
    res = run_cli("perf", str(model), "--input-dim", "@x", "3", "3", "8", "8", "-n", "2", "-o", str(profile),
                  "--format", "csv", cache=cache)
    assert res.returncode == 0, res.stderr
    assert expected_from_profile(profile)["input_shape"] == {"float": [3, 3, 8, 8]}
    assert res.stdout.splitlines()[0] == "section,index,name,op,provider,count,value,unit,pct,median,p10,p90"


# --- errors -------------------------------------------------------------------------------------------

def test_bad_input_is_one_line_exit_2(tmp_path, cache):
    model = conv_model(tmp_path / "m.onnx")
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\x08\x07this is not a model\xff\xfe" * 10)
    text = tmp_path / "notes.onnx"
    text.write_text("hello")
    missing = tmp_path / "missing.onnx"
    two = two_symbolic_model(tmp_path / "two.onnx")
    existing = tmp_path / "taken.json"
    existing.write_text("keep me")
    out = str(tmp_path / "p.json")
    cases = [
        (("perf", str(missing), "-o", out), missing, ("no such file",)),
        (("perf", str(garbage), "-o", out), garbage, ("not an ONNX model",)),
        (("perf", str(text), "-o", out), text, ("not an ONNX model",)),
        (("perf", str(two), "-o", out), two, ("--input-dim @x",)),
        (("perf", str(model), "-o", str(existing)), existing, ("already exists", "--force")),
        (("perf", str(model), "--input-dim", "@nope", "1", "3", "8", "8", "-o", out), "@nope", ("no input",)),
        (("perf", str(model), "--input-dim", "x", "1", "3", "-o", out), "'x 1 3'", ("@NAME",)),
        (("perf", str(model), "--input-dim", "@x", "1", "3", "-o", out), "@x", ("declares 4 dims",)),
        (("perf", str(model), "--input-dim", "@x", "1", "5", "8", "8", "-o", out), "@x", ("fixed at 3",)),
    ]
    results = run_cli_many([c[0] for c in cases], cache=cache)
    for (_, named, words), res in zip(cases, results):
        assert_one_line_error(res, named, *words)
    assert existing.read_text() == "keep me"
    assert not Path(out).exists()


def test_unknown_provider_lists_the_available_ones(tmp_path, cache):
    model = conv_model(tmp_path / "m.onnx")
    res = run_cli("perf", str(model), "--provider", "NoSuchExecutionProvider", "-o", str(tmp_path / "p.json"),
                  cache=cache)
    assert res.returncode == 2 and res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("opscope: error: ")
    assert "NoSuchExecutionProvider" in lines[0]
    for name in ort.get_available_providers():
        assert name in lines[0]


def test_force_replaces_and_default_name_is_fresh(tmp_path, cache):
    model = conv_model(tmp_path / "m.onnx")
    existing = tmp_path / "taken.json"
    existing.write_text("old")
    res = run_cli("perf", str(model), "-n", "2", "-o", str(existing), "--force", "--format", "json", cache=cache)
    assert res.returncode == 0, res.stderr
    assert expected_from_profile(existing)["runs"] == 2


# --- trace-eval and numerics-diff ---------------------------------------------------------------------

def test_trace_eval_finds_the_first_nan(tmp_path, cache):
    model = nan_model(tmp_path / "nan.onnx")
    dump = tmp_path / "nan.parquet"
    res = run_cli("perf", str(model), "--trace-eval", "--dump", str(dump), cache=cache)
    assert res.returncode == 0, res.stderr
    x = np.random.default_rng(0).standard_normal((2, 6)).astype(np.float32)  # the seeded input (seed 0)
    first_nan = int(np.flatnonzero(x < 0)[0])
    blocks = res.stdout.split("Run node: ")[1:]
    assert [b.split(" =")[0] for b in blocks] == ["sqrt", "plus1", "relu"]
    sqrt = blocks[0]
    assert sqrt.startswith("sqrt = Sqrt(x: float32[2x6]) -> float32, {2, 6}")
    assert "Output has normal, nan" in sqrt
    assert f"First NaN at index {first_nan} (flat; {int((x < 0).sum())} NaN, 0 Inf)" in sqrt
    values = np.sqrt(x.astype(np.float64).clip(0)).astype(np.float32)
    finite = np.sqrt(x[x >= 0]).astype(np.float64)
    assert f"Max value: {finite.max():.6g}" in sqrt and f"Min value: {finite.min():.6g}" in sqrt
    shown = sqrt.split("Output: ")[1].splitlines()[0].split(", ")
    assert len(shown) == 11 and shown[5] == "..."  # 12 values: first 5, ..., last 5
    assert shown[:5] == ["nan" if v < 0 else f"{values.reshape(-1)[i]:.6g}" for i, v in enumerate(x.reshape(-1)[:5])]
    assert "first NaN/Inf: sqrt (Sqrt)" in res.stdout

    from opscope.analyses.numerics import first_nonfinite, load_dump

    table = load_dump(dump)
    assert table["op"].to_pylist() == ["Sqrt", "Add", "Relu"]
    assert table["module"].to_pylist() == ["sqrt", "plus1", "relu"]
    assert table["nan_count"].to_pylist()[0] == int((x < 0).sum())
    assert first_nonfinite(table)["op"] == "Sqrt"


def test_numerics_diff_of_fp32_and_fp16_trace_evals(tmp_path, cache):
    model = conv_model(tmp_path / "m.onnx")
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    ra, rb = run_cli_many([("perf", str(model), "--trace-eval", "--dump", str(a), "--format", "json"),
                           ("perf", str(model), "--trace-eval", "--fp16", "--dump", str(b), "--format", "json")],
                          cache=cache)
    assert ra.returncode == 0 and rb.returncode == 0, (ra.stderr, rb.stderr)
    assert [r["dtype"] for r in json.loads(ra.stdout)] == ["float32"] * 4
    same, diff = run_cli_many([("numerics-diff", str(a), str(a), "--format", "json"),
                               ("numerics-diff", str(a), str(b), "--format", "json", "--all")], cache=cache)
    assert same.returncode == 0 and json.loads(same.stdout) == []
    rows = json.loads(diff.stdout)
    assert diff.returncode in (0, 1), diff.stderr
    # the fp16 model gains Cast nodes; the four nodes of the model are matched by sequence
    assert [r["op"] for r in rows] == ["Conv", "Relu", "MatMul", "Add"]
    assert all(r["dtype"] == "float32 vs float16" for r in rows)
    assert all(r["max_abs_err"] is not None and r["max_abs_err"] < 0.1 for r in rows)


def test_diff_of_two_perf_profiles_per_op_type(tmp_path, cache):
    model = conv_model(tmp_path / "m.onnx")
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    ra, rb = run_cli_many([("perf", str(model), "-n", "3", "-o", str(a), "--format", "json"),
                           ("perf", str(model), "-n", "5", "--fp16", "-o", str(b), "--format", "json")], cache=cache)
    assert ra.returncode == 0 and rb.returncode == 0, (ra.stderr, rb.stderr)
    res = run_cli("diff", str(a), str(b), "--steps", "0-2", "--format", "json", cache=cache)
    assert res.returncode == 0, res.stderr
    rows = {r["name"]: r for r in json.loads(res.stdout) if r["kind"] == "op"}

    def mean_per_op(profile: Path) -> dict[str, float]:
        events = json.loads(profile.read_text())
        runs = sorted((e["ts"], e["dur"]) for e in events if e["name"] == "model_run")[:3]
        sums: dict[str, float] = defaultdict(float)
        for e in events:
            if e["cat"] == "Node" and any(ts <= e["ts"] <= ts + d for ts, d in runs):
                sums[e["args"]["op_name"]] += e["dur"] * 1000 / 3
        return sums

    base, new = mean_per_op(a), mean_per_op(b)
    assert set(base) <= set(rows) and set(new) <= set(rows)
    assert "Cast" in new and rows["Cast"]["status"] == "added"  # fp16 with fp32 inputs/outputs adds casts
    for op, ns in base.items():
        assert rows[op]["base_ns"] == pytest.approx(ns, abs=1)
    for op, ns in new.items():
        assert rows[op]["new_ns"] == pytest.approx(ns, abs=1)


# --- pure parts -----------------------------------------------------------------------------------------

def test_common_average_and_percentile_are_migraphx_s():
    from opscope.analyses.perf_report import common_average as ca
    from opscope.analyses.perf_report import percentile

    assert ca([8, 1, 7, 2, 6, 3, 5, 4]) == 4.5  # sorted 1..8, a quarter (2) cut each end: mean(3, 4, 5, 6)
    assert ca([5, 100, 1]) == pytest.approx(106 / 3)  # fewer than 4: nothing cut
    assert percentile([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 0.9) == 9  # index floor(0.9 * 9) = 8


def test_without_o_the_profile_lands_under_a_fresh_name(tmp_path, cache):
    conv_model(tmp_path / "m.onnx")
    env = {**os.environ, "OPSCOPE_CACHE_DIR": str(cache)}
    for _ in range(2):
        res = subprocess.run([sys.executable, "-m", "opscope.cli", "perf", "m.onnx", "-n", "1", "--format", "json"],
                             cwd=tmp_path, env=env, capture_output=True, text=True, timeout=limit(60))
        assert res.returncode == 0, res.stderr
    assert expected_from_profile(tmp_path / "m.ort-profile.json")["runs"] == 1
    assert expected_from_profile(tmp_path / "m-1.ort-profile.json")["runs"] == 1


def test_default_names_never_replace_a_file(tmp_path):
    from opscope.capture.onnxruntime_perf import free_name

    target = tmp_path / "m.v2.ort-profile.json"
    assert free_name(target, ".ort-profile.json") == target
    target.write_text("1")
    assert free_name(target, ".ort-profile.json") == tmp_path / "m.v2-1.ort-profile.json"
    (tmp_path / "m.v2-1.ort-profile.json").write_text("2")
    assert free_name(target, ".ort-profile.json") == tmp_path / "m.v2-2.ort-profile.json"


def test_drop_warmup_keeps_orts_lines():
    from opscope.capture.onnxruntime_perf import drop_warmup

    text = ('[\n{"cat" : "Session","ts" :1,"dur" :2,"name" :"session_initialization","args" : {}},\n'
            '{"cat" : "Node","ts" :10,"dur" :3,"name" :"a_kernel_time","args" : {}},\n'
            '{"cat" : "Session","ts" :9,"dur" :6,"name" :"model_run","args" : {}},\n'
            '{"cat" : "Node","ts" :20,"dur" :3,"name" :"a_kernel_time","args" : {}},\n'
            '{"cat" : "Session","ts" :19,"dur" :6,"name" :"model_run","args" : {}}\n]\n')
    kept = drop_warmup(text, 1)
    events = json.loads(kept)
    assert [(e["name"], e["ts"]) for e in events] == [("session_initialization", 1), ("a_kernel_time", 20),
                                                      ("model_run", 19)]
    assert '{"cat" : "Node","ts" :20' in kept  # ORT's own spacing stays
