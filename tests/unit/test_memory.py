"""Memory analysis: peaks, holders at the peak, allocations by op, timeline; checked by hand."""

from __future__ import annotations

import pytest
from support.memory import MiB, hand_trace, m
from support.tracefiles import write_trace, x

from opscope.analyses import memory as mem
from opscope.ingest import open_trace

US = 1000


@pytest.fixture
def hand(tmp_path):
    return open_trace(write_trace(tmp_path / "mem.json", hand_trace()), use_cache=False)


def test_peak_per_device(hand):
    rec = mem.memory_records(hand)
    peaks = {r["device"]: r for r in mem.peak_table(rec).to_pylist()}
    assert set(peaks) == {"cpu", "cuda:0"}
    cuda = peaks["cuda:0"]
    assert cuda["peak_allocated_bytes"] == 15300 and cuda["peak_at_ns"] == 400 * US and cuda["peak_step"] == 1
    assert cuda["peak_reserved_bytes"] == 4 * MiB and cuda["reserved_at_ns"] == 400 * US
    assert cuda["end_allocated_bytes"] == 9500
    assert (cuda["allocs"], cuda["frees"], cuda["alloc_bytes"]) == (5, 3, 1000 + 4000 + 2000 + 8000 + 500)
    cpu = peaks["cpu"]
    assert (cpu["peak_allocated_bytes"], cpu["peak_at_ns"], cpu["allocs"], cpu["frees"]) == (64, 160 * US, 1, 1)
    assert rec.problems["frees without an allocation in the trace (made before it started)"] == 1


def test_holders_at_the_peak_add_up(hand):
    holders = mem.holders_table(mem.memory_records(hand)).to_pylist()
    cuda = {r["op"]: (r["bytes"], r["allocations"]) for r in holders if r["device"] == "cuda:0"}
    # alive at 400: A (no op), B and C (aten::empty), D (aten::conv2d); 300 bytes from before the trace
    assert cuda == {"aten::conv2d": (8000, 1), "aten::empty": (6000, 2), mem.NO_OP: (1000, 1),
                    mem.BEFORE_TRACE: (300, None)}
    assert next(r["op"] for r in holders if r["device"] == "cuda:0") == "aten::conv2d"  # largest first
    top = next(r for r in holders if r["op"] == "aten::conv2d")
    assert top["peak_pct"] == round(100 * 8000 / 15300, 2)
    # the cpu allocation at the same address is a different device: alive at the cpu peak, freed at 170
    assert [(r["op"], r["bytes"]) for r in holders if r["device"] == "cpu"] == [("aten::empty", 64)]


def test_allocations_by_op(hand):
    rows = mem.allocation_table(mem.memory_records(hand, devices=["cuda:0"])).to_pylist()
    assert [(r["op"], r["allocations"], r["bytes"], r["max_bytes"], r["avg_bytes"]) for r in rows] == [
        ("aten::conv2d", 1, 8000, 8000, 8000),
        ("aten::empty", 2, 6000, 4000, 3000),
        (mem.NO_OP, 1, 1000, 1000, 1000),
        ("aten::relu", 1, 500, 500, 500),
    ]
    by_count = mem.allocation_table(mem.memory_records(hand, devices=["cuda:0"]), sort="-allocations")
    assert by_count["allocations"].to_pylist()[0] == 1


def test_timeline_carries_the_level_between_records(hand):
    line = mem.timeline_table(mem.memory_records(hand, devices=["cuda:0"]), buckets=4).to_pylist()
    # buckets of 250 us; the level before the first record is 1300 - 1000 = 300
    assert [r["allocated_bytes"] for r in line] == [5300, 15300, 15300, 13300]
    assert [r["start_ns"] for r in line] == [0, 250 * US, 500 * US, 750 * US]
    assert [r["reserved_bytes"] for r in line] == [2 * MiB, 4 * MiB, 4 * MiB, 4 * MiB]


def test_steps_window_and_unknown_device(hand, tmp_path):
    rec = mem.memory_records(hand, steps=[2])
    assert rec.table.num_rows == 0 and mem.peak_table(rec).num_rows == 0
    from opscope.errors import UsageError

    with pytest.raises(UsageError, match="cuda:0"):
        mem.memory_records(hand, devices=["cuda:3"])


def test_negative_totals_and_missing_totals(tmp_path):
    events = [x("aten::empty", 0, 100), m(10, 1, 100, -5), m(20, 2, 50, 40), m(30, 1, -100, -60)]
    rec = mem.memory_records(open_trace(write_trace(tmp_path / "neg.json", events), use_cache=False))
    assert rec.problems["records with a negative total allocated (ignored for peaks)"] == 2
    assert mem.peak_table(rec).to_pylist()[0]["peak_allocated_bytes"] == 40
    # no totals at all: the level is rebuilt from the bytes
    bare = [x("aten::empty", 0, 100)] + [dict(e, args={k: v for k, v in e["args"].items() if k != "Total Allocated"})
                                         for e in (m(10, 1, 100, 0), m(20, 2, 50, 0), m(30, 1, -100, 0))]
    rec = mem.memory_records(open_trace(write_trace(tmp_path / "bare.json", bare), use_cache=False))
    assert mem.peak_table(rec).to_pylist()[0]["peak_allocated_bytes"] == 150
    assert any("without totals" in n for n in rec.notes())
