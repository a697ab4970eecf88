"""opscope's per-op table against torch's own ``key_averages()`` of the same profile."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from opscope.analyses.filters import EventFilter  # noqa: E402
from opscope.analyses.ops import op_table  # noqa: E402
from opscope.capture.demo import record_demo  # noqa: E402
from opscope.ingest import open_trace  # noqa: E402


@pytest.fixture(scope="module")
def demo_profile(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo")
    path, prof = record_demo(out, steps=2, batch=4, image=32, threads=1, with_stack=True)
    return path, prof


def _close(a: float, b: float, rel: float = 0.01, abs_ns: float = 10.0) -> bool:
    return abs(a - b) <= max(rel * max(abs(a), abs(b)), abs_ns)


def test_ops_match_key_averages(demo_profile):
    path, prof = demo_profile
    reference = {e.key: e for e in prof.key_averages()}
    table = op_table(open_trace(path, use_cache=False), filt=EventFilter(kinds=("cpu_op",)))
    rows = {r["name"]: r for r in table.to_pylist()}
    assert len(rows) > 30, "the demo should run dozens of distinct operators"
    compared = 0
    for name, row in rows.items():
        ref = reference.get(name)
        assert ref is not None, f"{name} is in the trace but not in key_averages()"
        assert row["calls"] == ref.count, name
        # key_averages() reports microseconds; opscope integer nanoseconds.
        assert _close(row["total_ns"], ref.cpu_time_total * 1000), (name, row["total_ns"], ref.cpu_time_total)
        assert _close(row["self_ns"], ref.self_cpu_time_total * 1000), (name, row["self_ns"],
                                                                         ref.self_cpu_time_total)
        compared += 1
    # Every aten op torch aggregated must appear in opscope's table too.
    missing = [k for k in reference if k.startswith("aten::") and k not in rows]
    assert not missing, missing
    assert compared == len(rows)


def test_shapes_grouping_matches_key_averages(demo_profile):
    path, prof = demo_profile
    reference: dict[tuple[str, str], int] = {}
    for e in prof.key_averages(group_by_input_shape=True):
        if e.key == "aten::conv2d":
            reference[(e.key, str(e.input_shapes).replace(" ", ""))] = e.count
    table = op_table(open_trace(path, use_cache=False), by=("name", "shapes"),
                     filt=EventFilter(kinds=("cpu_op",), match="^aten::conv2d$"))
    ours = {(r["name"], r["shapes"]): r["calls"] for r in table.to_pylist()}
    assert ours == reference


def test_steps_found_in_demo(demo_profile):
    path, _ = demo_profile
    trace = open_trace(path, use_cache=False)
    assert trace.steps["name"].to_pylist() == ["ProfilerStep#2", "ProfilerStep#3"]
