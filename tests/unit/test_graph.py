"""opscope graph as data: the module tree (numbers of scope), the node limit, an ONNX model with an ORT profile,
label escaping. Expected values come from the analyses, from onnx.load and from the profile JSON, never from the
graph code."""

from __future__ import annotations

import json
import re
import shutil
from collections import defaultdict
from pathlib import Path

import pytest
from support.shared import shared_trace
from support.tracefiles import write_trace, x
from support.views import US, hand_trace

from opscope.analyses.filters import EventFilter
from opscope.analyses.ort_nodes import node_times
from opscope.analyses.views import module_tree, tree_table
from opscope.compose.graph.modules import module_graph
from opscope.compose.graph.onnx import onnx_graph
from opscope.ingest import open_trace
from opscope.render import dot
from opscope.units import format_ns, format_pct

MODEL = "generated/mini_mobilenet.onnx"
PROFILE = "generated/onnxruntime_cpu_profile.json"


def py(name: str, ts: float, dur: float) -> dict:
    return x(name, ts, dur, cat="python_function")


def wide_trace(children: int) -> list[dict]:
    """Net_0 calling ``children`` modules one after another, module k holding one op of (k + 1) * 10 us."""
    events = [x("ProfilerStep#1", 0, 100_000, cat="user_annotation"), py("nn.Module: Net_0", 1, 99_000)]
    ts = 10
    for k in range(children):
        dur = (k + 1) * 10
        events += [py(f"nn.Module: Block_{k}", ts, dur + 4), x(f"aten::op{k}", ts + 2, dur)]
        ts += dur + 10
    return events


def tree_rows(trace) -> list[dict]:
    return tree_table(module_tree(trace, EventFilter(kinds=("cpu_op",))), column="module").to_pylist()


def test_module_graph_carries_the_scope_numbers(tmp_path):
    trace = open_trace(write_trace(tmp_path / "t.json", hand_trace()), use_cache=False)
    rows = tree_rows(trace)
    graph = module_graph(tree_table(module_tree(trace, EventFilter(kinds=("cpu_op",))), column="module"), "t.json")
    modules = graph.of_kind("module")
    assert len(modules) == len(rows) == 5 and not graph.of_kind("fold") and not graph.notes
    by_name = {n.lines[0]: n for n in modules}
    for r in rows:
        node = by_name[r["module"]]
        assert (node.time_ns, node.self_ns, node.share) == (r["total_ns"], r["self_ns"], r["total_pct"])
        assert node.lines[1] == f"total {format_ns(r['total_ns'])} ({format_pct(r['total_pct'])})"
        assert node.lines[2] == f"self {format_ns(r['self_ns'])} ({format_pct(r['self_pct'])})"
    # by hand (support.views): Net_0 550 us of 890 us selected op time; Linear_0 under Net_0
    assert by_name["Net_0"].time_ns == 550 * US and by_name["Net_0"].share == round(100 * 550 / 890, 2)
    root = graph.of_kind("root")[0]
    assert root.time_ns == 890 * US and "890.000 us" in graph.legend[0]
    edges = {(e.src, e.dst) for e in graph.edges}
    assert ("root", by_name["Net_0"].id) in edges and (by_name["Net_0"].id, by_name["Linear_0"].id) in edges
    assert ("root", by_name["(no module)"].id) in edges and len(edges) == 5


def test_node_limit_keeps_the_most_expensive_and_folds_the_rest(tmp_path):
    trace = open_trace(write_trace(tmp_path / "wide.json", wide_trace(12)), use_cache=False)
    table = tree_table(module_tree(trace, EventFilter(kinds=("cpu_op",))), column="module")
    graph = module_graph(table, "wide.json", max_nodes=5)
    modules = graph.of_kind("module")
    # Net_0 plus the 4 largest blocks (11, 10, 9, 8); blocks 0..7 fold into one box under Net_0
    assert len(modules) == 5
    assert sorted(n.lines[0] for n in modules) == ["Block_10", "Block_11", "Block_8", "Block_9", "Net_0"]
    [fold] = graph.of_kind("fold")
    assert fold.lines[0] == "… 8 more modules" and fold.time_ns == sum((k + 1) * 10 for k in range(8)) * US
    net = next(n for n in modules if n.lines[0] == "Net_0")
    assert (net.id, fold.id) in {(e.src, e.dst) for e in graph.edges}
    assert graph.notes == ["drew 5 of 13 modules (the 5 most expensive); 8 folded into 1 '… more' box"]
    assert graph.notes[0] in dot.digraph(graph).source.replace("\\n", "\n")
    by_pct = module_graph(table, "wide.json", min_pct=10.0)  # >= 10% of 780 us: blocks 7..11 (80 us and more)
    assert sorted(n.lines[0] for n in by_pct.of_kind("module")) == ["Block_10", "Block_11", "Block_7", "Block_8",
                                                                    "Block_9", "Net_0"]


def expected_onnx(path: Path) -> tuple[int, set[tuple[int, int, str]]]:
    """Operator count and operator->operator tensor edges of the model, straight from onnx.load."""
    onnx = pytest.importorskip("onnx")
    model = onnx.load(str(path), load_external_data=False)
    made = {t: i for i, n in enumerate(model.graph.node) for t in n.output}
    edges = {(made[t], i, t) for i, n in enumerate(model.graph.node) for t in n.input if t in made}
    return len(model.graph.node), edges


def test_onnx_graph_nodes_edges_and_profile_times():
    from opscope.ingest.onnx_model import read_onnx

    model_path, profile_path = shared_trace(MODEL), shared_trace(PROFILE)
    count, edges = expected_onnx(model_path)
    model = read_onnx(model_path)
    plain = onnx_graph(model, "m.onnx")
    ops = plain.of_kind("op")
    assert len(ops) == count == 10
    drawn = {(e.src, e.dst, e.lines[0]) for e in plain.edges if e.src.startswith("n") and e.dst.startswith("n")}
    assert drawn == {(f"n{a}", f"n{b}", t) for a, b, t in edges} and len(drawn) == 9
    [first_edge] = [e for e in plain.edges if e.src == "i0"]
    assert (first_edge.dst, first_edge.lines) == ("n0", ["x", "float[N,3,112,112]"])

    raw = json.loads(profile_path.read_text())
    per_node: dict[str, int] = defaultdict(int)
    for e in raw:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            per_node[e["name"][: -len("_kernel_time")]] += e["dur"] * 1000
    whole = sum(per_node.values())
    timed = onnx_graph(model, "m.onnx", node_times(open_trace(profile_path, use_cache=False)), "p.json")
    by_name = {n.lines[1]: n for n in timed.of_kind("op")}
    # names ORT kept: the node's own kernel time; ORT's rewrites (r1_nchwc writes r1, made by stem_relu) count for
    # the operator producing that tensor
    assert by_name["fc"].time_ns == per_node["fc"] and by_name["flat"].time_ns == per_node["flat"]
    assert by_name["stem_relu"].time_ns == per_node["r1_nchwc"] and by_name["pw_conv"].time_ns == per_node["c3_nchwc"]
    assert by_name["fc"].share == round(100 * per_node["fc"] / whole, 2)
    assert by_name["stem_conv"].time_ns is None and by_name["stem_conv"].muted
    [unmatched] = timed.of_kind("unmatched")
    assert unmatched.lines[1] == "ReorderOutput" and unmatched.time_ns == per_node["ReorderOutput"]
    assert sum(n.time_ns or 0 for n in timed.nodes if n.kind in ("op", "unmatched")) == whole

    limited = onnx_graph(model, "m.onnx", node_times(open_trace(profile_path, use_cache=False)), "p.json",
                         max_nodes=3)
    top3 = sorted(per_node, key=per_node.__getitem__, reverse=True)[:3]  # c3, r1, p (not r2: 11.655 < 11.705 ms)
    assert sorted(n.time_ns for n in limited.of_kind("op")) == sorted(per_node[k] for k in top3)
    assert len(limited.of_kind("fold")) == 1 and "drew 3 of 10 operators (the 3 most expensive)" in limited.notes[0]
    first = onnx_graph(model, "m.onnx", max_nodes=4)
    assert [n.id for n in first.of_kind("op")] == ["n0", "n1", "n2", "n3"]
    assert first.notes[0].startswith("drew 4 of 10 operators (the 4 first in graph order)")


HOSTILE = ['a"b\\N\\"c', "new\nline", "<b>html</b>", "{rec|ord}", "\x1b[31mred\x1b[0m", "amp &lt; &amp; &#945;",
           "back\\", "\\l\\G\\E"]


def test_labels_escape_hostile_text(tmp_path):
    events = [x("ProfilerStep#1", 0, 10_000, cat="user_annotation")]
    for k, name in enumerate(HOSTILE):
        events += [py(f"nn.Module: {name}", 100 + k * 100, 90), x("aten::mm", 110 + k * 100, 50 + k)]
    trace = open_trace(write_trace(tmp_path / "h.json", events), use_cache=False)
    graph = module_graph(tree_table(module_tree(trace), column="module"), "h.json")
    source = dot.digraph(graph).source
    assert not re.search(r"(label|tooltip)=<", source)  # never an HTML-like label
    assert 'label="back\\\\\\n' in source  # the trailing backslash doubled: it cannot escape the quote
    assert 'label="\\\\x1b[31mred\\\\x1b[0m\\n' in source and "\x1b" not in source  # ESC spelled out
    assert 'label="new\\\\x0aline\\n' in source and 'label="amp &amp;lt; &amp;amp; &amp;#945;\\n' in source
    if shutil.which("dot") is None:
        pytest.skip("Graphviz's dot program is not installed: the SVG round trip needs it")
    svg = dot.draw(graph, "svg").decode()
    texts = [_xml_text(t) for t in re.findall(r"<text[^>]*>(.*?)</text>", svg)]
    for name in HOSTILE:  # each label's first line reads exactly as the trace wrote it, control characters spelled
        spelled = name.replace("\n", "\\x0a").replace("\x1b", "\\x1b")
        assert spelled in texts, (spelled, texts)


def _xml_text(value: str) -> str:
    return value.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", '"').replace("&#45;", "-") \
        .replace("&#160;", " ").replace("&amp;", "&")
