"""The real ONNX Runtime profile through the CLI: numbers equal to sums taken from the file with json.load."""

from __future__ import annotations

import json
from collections import defaultdict

from support.cli import assert_one_line_error, run_cli, run_cli_many
from support.shared import shared_trace

PROFILE = "generated/onnxruntime_cpu_profile.json"


def reference(path) -> dict:
    raw = json.loads(path.read_text())
    nodes = [e for e in raw if e["cat"] == "Node" and e["name"].endswith("_kernel_time")]
    by_op: dict[str, list[int]] = defaultdict(list)
    for e in nodes:
        by_op[e["args"]["op_name"]].append(e["dur"] * 1000)
    runs = sorted((e["ts"], e["dur"] * 1000) for e in raw if e["cat"] == "Session" and e["name"] == "model_run")
    return {"nodes": nodes, "by_op": by_op, "runs": [d for _, d in runs]}


def test_real_profile_summary_ops_steps(tmp_path):
    path = shared_trace(PROFILE)
    ref = reference(path)
    # the survey's figures (docs/surveys/formats.md), measured from the same file
    assert len(ref["nodes"]) == 160 and sum(sum(v) for v in ref["by_op"].values()) == 83_173_000
    assert sum(ref["by_op"]["Conv"]) == 68_711_000 and len(ref["runs"]) == 20 and sum(ref["runs"]) == 88_843_000
    summary, ops, steps = run_cli_many([("summary", str(path), "-f", "json"), ("ops", str(path), "-f", "json"),
                                        ("steps", str(path), "-f", "json")], cache=tmp_path / "cache")
    for res in (summary, ops, steps):
        assert res.returncode == 0, res.stderr
    rows = {(r["section"], r["metric"]): r["value"] for r in json.loads(summary.stdout)}
    assert rows[("overview", "steps")] == 20
    # the nodes run one after another on one thread: CPU busy is their sum
    assert rows[("overview", "cpu_busy_ns")] == 83_173_000
    assert rows[("time_by_kind_ns", "cpu_op")] == 83_173_000
    assert not any(section == "not_mapped" for section, _ in rows)
    got = {r["name"]: r for r in json.loads(ops.stdout)}
    assert set(got) == set(ref["by_op"])
    for op, durs in ref["by_op"].items():
        assert (got[op]["calls"], got[op]["total_ns"], got[op]["self_ns"]) == (len(durs), sum(durs), sum(durs))
        assert (got[op]["min_ns"], got[op]["max_ns"]) == (min(durs), max(durs))
    assert [r["dur_ns"] for r in json.loads(steps.stdout)] == ref["runs"]


def test_real_profile_graph_node_times_unchanged(tmp_path):
    """`graph --profile` groups by the node name the reader keeps in args: the same per-node sums as the file."""
    from opscope.analyses.ort_nodes import node_times
    from opscope.ingest import open_trace

    path = shared_trace(PROFILE)
    per_node: dict[str, int] = defaultdict(int)
    for e in reference(path)["nodes"]:
        per_node[e["name"][: -len("_kernel_time")]] += e["dur"] * 1000
    got = {r["node"]: r["time_ns"] for r in node_times(open_trace(path, use_cache=False)).to_pylist()}
    assert got == per_node and got["c3_nchwc"] == 38_226_000 and got["ReorderOutput"] == 304_000


def test_truncated_real_profile(tmp_path):
    path = shared_trace(PROFILE)
    text = path.read_text()
    lines = text.splitlines(keepends=True)
    cut = tmp_path / "cut.json"
    whole = next(i for i in range(100, len(lines)) if '"cat" : "Node"' in lines[i])  # cut inside a Node event
    cut.write_text("".join(lines[:whole]) + lines[whole][:400])
    res = run_cli("summary", str(cut), "-f", "json", cache=tmp_path / "cache")
    assert res.returncode == 0, res.stderr
    rows = {(r["section"], r["metric"]): r["value"] for r in json.loads(res.stdout)}
    assert rows[("overview", "events")] == whole - 1
    assert any(s == "not_mapped" and m.startswith("file is truncated") for s, m in rows)
    expected = sum(json.loads(ln.rstrip(",\n"))["dur"] * 1000 for ln in lines[1:whole] if '"cat" : "Node"' in ln)
    assert rows[("time_by_kind_ns", "cpu_op")] == expected

    head_only = tmp_path / "head.json"
    head_only.write_text(lines[0] + lines[1][:60])  # ORT's first event, cut: nothing whole
    assert_one_line_error(run_cli("summary", str(head_only), cache=tmp_path / "cache"), head_only, "truncated")
