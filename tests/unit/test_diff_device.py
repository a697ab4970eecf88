"""opscope diff's device time by op and by kernel class on a hand-built pair of runs on two vendors
(support.diff_device): every expected figure is worked out by hand from the events written there."""

from __future__ import annotations

import pytest
from support.diff_device import ADDMM, CONV, LINEAR, base_events, new_events
from support.tracefiles import write_trace

from opscope.diff import compare
from opscope.diff.device_ops import NO_OP, Totals, match_ops
from opscope.diff.report import comparison_report
from opscope.errors import UsageError
from opscope.ingest import open_trace

US = 1000
BASE_TOTAL, NEW_TOTAL = 376, 508  # us of device time over the two steps of each run


def dims(shapes) -> str:
    import json

    return json.dumps(shapes, separators=(",", ":"))


@pytest.fixture
def vendors(tmp_path):
    return (open_trace(write_trace(tmp_path / "h100.json", base_events()), use_cache=False),
            open_trace(write_trace(tmp_path / "mi300.json", new_events()), use_cache=False))


def test_op_rows_pair_the_same_op_whatever_its_kernels_are_called(vendors):
    c = compare(*vendors)
    rows = {(r["op"], r["shapes"]): r for r in c.op_rows.to_pylist()}
    # per step (two steps each): linear's GEMM 100 us (cuBLAS) against 150 us (Tensile)
    assert rows[("aten::linear", dims(LINEAR))] == {
        "op": "aten::linear", "shapes": dims(LINEAR), "class": "gemm", "matched_by": "op+shapes",
        "base_ns": 100 * US, "new_ns": 150 * US, "delta_ns": 50 * US, "calls_base": 1.0, "calls_new": 1.0}
    # conv2d: cuDNN 40 + 10 us against MIOpen 60 + 8 us, under the vendor's own convolution op
    conv = rows[("aten::conv2d", dims(CONV))]
    assert (conv["class"], conv["matched_by"], conv["base_ns"], conv["new_ns"], conv["calls_base"]) == \
        ("conv", "op+shapes", 50 * US, 68 * US, 2.0)
    # aten::add ran on other shapes: matched by op alone, shapes left empty
    add = rows[("aten::add", None)]
    assert (add["matched_by"], add["base_ns"], add["new_ns"], add["class"]) == ("op", 20 * US, 24 * US, "elementwise")
    # only in one run: softmax once in two base steps (30 us), gelu in every new step (12 us)
    softmax = rows[("aten::softmax", dims([[4, 16], []]))]
    assert (softmax["matched_by"], softmax["base_ns"], softmax["new_ns"], softmax["calls_base"],
            softmax["class"]) == ("unmatched", 15 * US, 0, 0.5, "softmax")
    gelu = rows[("aten::gelu", dims([[8, 16], []]))]
    assert (gelu["matched_by"], gelu["base_ns"], gelu["new_ns"]) == ("unmatched", 0, 12 * US)
    # the kernel launched outside any op (6 us in two steps)
    outside = rows[(NO_OP, None)]
    assert (outside["matched_by"], outside["base_ns"], outside["new_ns"], outside["class"]) == \
        ("unmatched", 3 * US, 0, "other")
    assert len(rows) == 6
    deltas = [abs(r["delta_ns"]) for r in c.op_rows.to_pylist()]
    assert deltas == sorted(deltas, reverse=True)


def test_matched_shares_of_device_time(vendors):
    c = compare(*vendors)
    # base: linear + conv2d 2 x 150 us by op+shapes, add 2 x 20 us by op, softmax 30 + outside 6 us unmatched
    assert c.device_match.base == {"op+shapes": round(100 * 300 / BASE_TOTAL, 1), "op": round(100 * 40 / BASE_TOTAL, 1),
                                   "unmatched": round(100 * 36 / BASE_TOTAL, 1),
                                   "class": round(100 * (200 + 100 + 40) / BASE_TOTAL, 1),  # not softmax, other
                                   "other": round(100 * 6 / BASE_TOTAL, 1)}
    # new: 2 x 218 us by op+shapes, 2 x 24 us by op, gelu 2 x 12 us unmatched; every class is in base too
    assert c.device_match.new == {"op+shapes": round(100 * 436 / NEW_TOTAL, 1), "op": round(100 * 48 / NEW_TOTAL, 1),
                                  "unmatched": round(100 * 24 / NEW_TOTAL, 1), "class": 100.0, "other": 0.0}
    assert (f"; device time matched by op (and input shapes): {100 * 340 / BASE_TOTAL:.1f}% of base, "
            f"{100 * 484 / NEW_TOTAL:.1f}% of new. ") in c.summary
    # then what each side ran on, and how many steps were compared (2 each, on device 0, which has no name here)
    assert c.summary.endswith("base: device 0 (not named in the trace), 2 steps; "
                              "new: device 0 (not named in the trace), 2 steps")


def test_launching_level_leaves_the_vendors_convolution_ops_unmatched(vendors):
    c = compare(*vendors, op_level="launching")
    rows = {(r["op"], r["shapes"]): r for r in c.op_rows.to_pylist()}
    assert rows[("aten::addmm", dims(ADDMM))]["matched_by"] == "op+shapes"
    assert rows[("aten::cudnn_convolution", dims(CONV))]["matched_by"] == "unmatched"
    assert rows[("aten::miopen_convolution", dims(CONV))]["new_ns"] == 68 * US
    assert c.device_match.base["op+shapes"] == round(100 * 200 / BASE_TOTAL, 1)
    assert c.device_match.base["unmatched"] == round(100 * (100 + 36) / BASE_TOTAL, 1)


def test_class_rows(vendors):
    c = compare(*vendors)
    rows = {r["class"]: r for r in c.classes.to_pylist()}
    assert list(rows) == ["gemm", "conv", "elementwise", "softmax", "other"]  # the fixed class order
    assert rows["gemm"] == {"class": "gemm", "base_ns": 100 * US, "new_ns": 150 * US, "delta_ns": 50 * US,
                            "base_pct": round(100 * 200 / BASE_TOTAL, 2), "new_pct": round(100 * 300 / NEW_TOTAL, 2),
                            "calls_base": 1.0, "calls_new": 1.0}
    # the layout and transpose helpers count as convolution: a convolution op launched them
    assert (rows["conv"]["base_ns"], rows["conv"]["new_ns"], rows["conv"]["calls_new"]) == (50 * US, 68 * US, 2.0)
    assert (rows["elementwise"]["base_ns"], rows["elementwise"]["new_ns"]) == (20 * US, 36 * US)
    assert (rows["softmax"]["new_ns"], rows["softmax"]["new_pct"]) == (0, 0.0)
    assert (rows["other"]["base_ns"], rows["other"]["base_pct"]) == (3 * US, round(100 * 6 / BASE_TOTAL, 2))


def test_by_op_only_sums_the_shapes_that_found_no_partner():
    """aten::add with shapes A in both and B only in base, C only in new: A by op+shapes, B and C summed by op."""
    base = {("aten::add", "A"): Totals(10, 1), ("aten::add", "B"): Totals(5, 1), ("aten::mul", "A"): Totals(7, 1)}
    new = {("aten::add", "A"): Totals(12, 1), ("aten::add", "C"): Totals(4, 2), (None, ""): Totals(3, 1)}
    got = [(m.op, m.shapes, m.matched_by, m.base and m.base.ns, m.new and m.new.ns) for m in match_ops(base, new)]
    assert got == [("aten::add", "A", "op+shapes", 10, 12), ("aten::add", None, "op", 5, 4),
                   ("aten::mul", "A", "unmatched", 7, None), (NO_OP, None, "unmatched", None, 3)]


def test_report_tables_and_their_notes(vendors):
    c = compare(*vendors)
    for table, key in (("ops", "ops"), ("classes", "classes"), ("kernel-choice", "kernel_choice"),
                       ("critical-path", "critical_path"), (None, "rows")):
        report = comparison_report(c, full_names=False, limit=None, table=table)
        data = report.data_section()
        assert data is not None and data.key == key
        terminal = [s.key for s in report.sections if s.terminal]
        assert terminal == (["headline", "rows", "ops", "classes", "kernel_choice"] if table is None
                            else ["headline", key])
    notes = comparison_report(c, False, None, table="ops").data_section().said
    assert "per step, over steps 1-2 (base) and steps 1-2 (new)" in notes[0]
    assert notes[2] == (f"share of device time matched: base op+shapes {100 * 300 / BASE_TOTAL:.1f}%, op "
                        f"{100 * 40 / BASE_TOTAL:.1f}%, unmatched {100 * 36 / BASE_TOTAL:.1f}%; new op+shapes "
                        f"{100 * 436 / NEW_TOTAL:.1f}%, op {100 * 48 / NEW_TOTAL:.1f}%, unmatched "
                        f"{100 * 24 / NEW_TOTAL:.1f}%")
    with pytest.raises(UsageError, match="--table"):
        comparison_report(c, False, None, table="everything")


def test_whole_trace_comparison_gives_totals(tmp_path):
    """Without steps in either trace, the figures are whole-trace totals and calls are counts."""
    strip = [e for e in base_events() if not e["name"].startswith("ProfilerStep")]
    strip_new = [e for e in new_events() if not e["name"].startswith("ProfilerStep")]
    a = open_trace(write_trace(tmp_path / "a.json", strip), use_cache=False)
    b = open_trace(write_trace(tmp_path / "b.json", strip_new), use_cache=False)
    c = compare(a, b)
    linear = next(r for r in c.op_rows.to_pylist() if r["op"] == "aten::linear")
    assert (linear["base_ns"], linear["new_ns"], linear["calls_base"]) == (200 * US, 300 * US, 2)
    assert "over the whole trace" in comparison_report(c, False, None, table="classes").data_section().said[0]
