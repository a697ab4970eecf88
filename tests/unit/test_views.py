"""Scope / code views: op time by nn.Module path and by Python frame, checked by hand."""

from __future__ import annotations

import pytest
from support import make_trace, row
from support.tracefiles import write_trace
from support.views import US, hand_trace

from opscope.analyses import views
from opscope.analyses.filters import EventFilter
from opscope.ingest import open_trace


def frame(name: str, ts: float, dur: float) -> dict:
    """A Python frame as a model row (times in us), for traces built in memory."""
    return row("python", name, ts, dur)


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
