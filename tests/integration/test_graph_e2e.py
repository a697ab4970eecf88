"""opscope graph through the CLI: the module tree against `opscope scope -f json`, an ONNX model against onnx.load,
SVG through Graphviz, and the one-line errors (no dot program, no graphviz package, not a model, existing file)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.cli import assert_one_line_error
from support.shared import shared_trace
from support.timing import limit
from support.tracefiles import write_trace
from support.views import hand_trace

MODEL = "generated/mini_mobilenet.onnx"
PROFILE = "generated/onnxruntime_cpu_profile.json"
MOBILENET = "generated/torch_cpu_mobilenetv2_train.json"
NEEDS_DOT = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot program is not installed")


def run(*args: str, env: dict | None = None, prelude: str = "") -> subprocess.CompletedProcess:
    code = f"{prelude}\nfrom opscope.cli import main\nimport sys\nsys.argv = ['opscope'] + sys.argv[1:]\nmain()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          env=env or dict(os.environ), timeout=limit(120))


def tooltips(dot_text: str) -> dict[str, tuple[int, float]]:
    """path -> (total_ns, total_pct) as the drawing's tooltips state them."""
    found = re.findall(r'tooltip="((?:[^"\\]|\\.)*): total_ns=(\d+) \(([\d.]+)%\)', dot_text)
    return {path: (int(ns), float(pct)) for path, ns, pct in found}


def test_module_tree_numbers_are_scope_numbers(tmp_path):
    trace = write_trace(tmp_path / "t.json", hand_trace())
    scope = run("scope", str(trace), "-f", "json", "-n", "0")
    assert scope.returncode == 0, scope.stderr
    rows = json.loads(scope.stdout)
    res = run("graph", str(trace), "-o", str(tmp_path / "t.dot"))
    assert res.returncode == 0, res.stderr
    drawn = tooltips((tmp_path / "t.dot").read_text())
    assert {r["path"]: (r["total_ns"], r["total_pct"]) for r in rows} == drawn and len(drawn) == 5
    text = (tmp_path / "t.dot").read_text()
    for r in rows:  # the visible labels too: the shares as scope's table prints them
        assert f"({r['total_pct']:.2f}%)\\nself " in text and f"({r['self_pct']:.2f}%)" in text
    assert "share = % of all selected op time" in text
    assert res.stdout == "" and "wrote" in res.stderr


def test_node_limit_said_on_stderr_and_in_the_drawing(tmp_path):
    trace = shared_trace(MOBILENET)
    out = tmp_path / "mb.dot"
    res = run("graph", str(trace), "-o", str(out), "--max-nodes", "20")
    assert res.returncode == 0, res.stderr
    text = out.read_text()
    modules = re.findall(r"^\s*m\d+ \[", text, re.M)
    folds = re.findall(r"^\s*f\d+ \[", text, re.M)
    assert len(modules) == 20 and folds
    note = re.search(r"drew 20 of (\d+) modules \(the 20 most expensive\); (\d+) folded into (\d+)", res.stderr)
    assert note and int(note.group(1)) - 20 == int(note.group(2)) and int(note.group(3)) == len(folds)
    assert note.group(0) in text


def test_onnx_model_counts_match_onnx_load(tmp_path):
    onnx = pytest.importorskip("onnx")
    path = shared_trace(MODEL)
    model = onnx.load(str(path), load_external_data=False)
    made = {t: i for i, n in enumerate(model.graph.node) for t in n.output}
    op_edges = {(made[t], i) for i, n in enumerate(model.graph.node) for t in n.input if t in made}
    out = tmp_path / "m.dot"
    res = run("graph", str(path), "-o", str(out))
    assert res.returncode == 0, res.stderr
    text = out.read_text()
    assert len(re.findall(r"^\s*n\d+ \[", text, re.M)) == len(model.graph.node)
    drawn = {(int(a), int(b)) for a, b in re.findall(r"^\s*n(\d+) -> n(\d+)", text, re.M)}
    assert drawn == op_edges
    assert 'label="c3\\nfloat[N,64,56,56]"' in text  # tensor name and (inferred) shape on the edge


@NEEDS_DOT
def test_svg_of_a_model_with_its_profile(tmp_path):
    model, profile = shared_trace(MODEL), shared_trace(PROFILE)
    per_node: dict[str, int] = {}
    for e in json.loads(profile.read_text()):
        if e.get("cat") == "Node":
            per_node[e["name"]] = per_node.get(e["name"], 0) + e["dur"] * 1000
    out = tmp_path / "m.svg"
    res = run("graph", str(model), "-o", str(out), "--profile", str(profile))
    assert res.returncode == 0, res.stderr
    svg = out.read_text()
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg
    assert f"Gemm fc: time_ns={per_node['fc_kernel_time']} " in svg
    assert f"Conv pw_conv: time_ns={per_node['c3_nchwc_kernel_time']} " in svg
    assert "not in this model" in res.stderr


@NEEDS_DOT
def test_svg_of_the_mobilenet_module_tree(tmp_path):
    out = tmp_path / "mb.svg"
    res = run("graph", str(shared_trace(MOBILENET)), "-o", str(out))
    assert res.returncode == 0, res.stderr
    svg = out.read_text()
    assert "<svg" in svg and "Sequential_1" in svg and "(no module)" in svg


def test_missing_dot_is_one_line(tmp_path):
    trace = write_trace(tmp_path / "t.json", hand_trace())
    empty = tmp_path / "bin"
    empty.mkdir()
    out = tmp_path / "t.svg"
    res = run("graph", str(trace), "-o", str(out), env={**os.environ, "PATH": str(empty)})
    line = assert_one_line_error(res, out, "apt-get install graphviz", "brew install graphviz", "-o graph.dot")
    assert "dot" in line and not out.exists()
    dot = run("graph", str(trace), "-o", str(tmp_path / "t.dot"), env={**os.environ, "PATH": str(empty)})
    assert dot.returncode == 0 and (tmp_path / "t.dot").read_text().startswith("digraph")


def test_missing_python_packages_are_one_line(tmp_path):
    trace = write_trace(tmp_path / "t.json", hand_trace())
    res = run("graph", str(trace), "-o", str(tmp_path / "t.dot"), prelude="import sys; sys.modules['graphviz'] = None")
    assert res.returncode == 2 and res.stderr.strip().splitlines() == [
        "opscope: error: drawing graphs needs the graphviz Python package: pip install 'opscope[view]'"]
    model = tmp_path / "m.onnx"
    model.write_bytes(b"\x08\x07")
    res = run("graph", str(model), "-o", str(tmp_path / "m.dot"), prelude="import sys; sys.modules['onnx'] = None")
    assert res.returncode == 2 and res.stderr.strip().splitlines() == [
        "opscope: error: reading ONNX models needs the onnx package: pip install 'opscope[onnx]'"]


@pytest.mark.parametrize("content", [b"", b"not a model at all \x00\xff" * 10, b"\x08\x07"])
def test_not_a_model_is_one_line(tmp_path, content):
    pytest.importorskip("onnx")
    model = tmp_path / "bad.onnx"
    model.write_bytes(content)
    out = tmp_path / "bad.dot"
    res = run("graph", str(model), "-o", str(out))
    assert_one_line_error(res, model, "not an ONNX model")
    assert not out.exists()


def test_not_a_trace_and_a_profile_without_nodes_are_one_line(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("this is not json")
    assert_one_line_error(run("graph", str(bad), "-o", str(tmp_path / "x.dot")), bad)
    profile = write_trace(tmp_path / "p.json", hand_trace())
    model = shared_trace(MODEL)
    res = run("graph", str(model), "-o", str(tmp_path / "m.dot"), "--profile", str(profile))
    assert_one_line_error(res, profile, "no ONNX Runtime node events")


def test_existing_output_is_kept_without_force(tmp_path):
    trace = write_trace(tmp_path / "t.json", hand_trace())
    out = tmp_path / "t.dot"
    out.write_text("precious")
    res = run("graph", str(trace), "-o", str(out))
    assert_one_line_error(res, out, "already exists", "--force")
    assert out.read_text() == "precious"
    forced = run("graph", str(trace), "-o", str(out), "--force")
    assert forced.returncode == 0 and out.read_text().startswith("digraph")


def test_unknown_output_suffix_is_one_line(tmp_path):
    trace = write_trace(tmp_path / "t.json", hand_trace())
    res = run("graph", str(trace), "-o", str(tmp_path / "t.txt"))
    assert res.returncode == 2 and "name the file with one of .svg" in res.stderr


def test_hostile_labels_reach_the_svg_as_text(tmp_path: Path):
    if shutil.which("dot") is None:
        pytest.skip("Graphviz's dot program is not installed")
    from support.tracefiles import x
    events = [x("ProfilerStep#1", 0, 1000, cat="user_annotation"),
              x('nn.Module: </text><script>alert(1)</script>"\\', 10, 500, cat="python_function"),
              x("aten::mm", 20, 100)]
    out = tmp_path / "h.svg"
    res = run("graph", str(write_trace(tmp_path / "h.json", events)), "-o", str(out))
    assert res.returncode == 0, res.stderr
    svg = out.read_text()
    assert "<script" not in svg and "&lt;/text&gt;&lt;script&gt;alert(1)&lt;/script&gt;&quot;\\" in svg
