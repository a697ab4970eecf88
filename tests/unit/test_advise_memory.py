"""memory rule on hand-built traces: peak near capacity and fragmentation."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from support.advise_memory import fragmented, near
from support.tracefiles import write_trace, x

from opscope.advise import advise
from opscope.advise.rules.memory import _fragmented_growth
from opscope.ingest import open_trace

GiB = 1 << 30
MiB = 1 << 20


def m(ts: float, addr: int, nbytes: int, allocated: int, reserved: int, device: int = 0, device_type: int = 1):
    """A Kineto ``[memory]`` instant event as torch writes it."""
    return {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": ts,
            "args": {"Total Reserved": reserved, "Total Allocated": allocated, "Bytes": nbytes,
                     "Device Id": device, "Device Type": device_type, "Addr": addr}}


def props(*totals: int) -> dict:
    return {"deviceProperties": [{"id": i, "name": "GPU", "totalGlobalMem": t, "computeMajor": 8, "computeMinor": 0}
                                 for i, t in enumerate(totals)]}


def hand_trace(tmp_path, header=None):
    """Two 10 GiB GPUs over two 1000 us steps.

    cuda:0 climbs to 9.5 GiB allocated, 9.6 GiB reserved (96% of 10 GiB) at 1200 us, in step 2.
    cuda:1 grows its reserve to 4 GiB at 300 us while 1 GiB is allocated (3 GiB unused, 75% of reserved), then
    allocates up to 2.5 GiB at 600 us (step 1).
    """
    events = [
        x("ProfilerStep#1", 0, 1000, cat="user_annotation"), x("ProfilerStep#2", 1000, 1000, cat="user_annotation"),
        x("aten::empty", 100, 10), x("aten::empty", 1100, 10),
        m(100, 0xA, 5 * GiB, 5 * GiB, 5 * GiB),
        m(1200, 0xB, GiB * 9 // 2, GiB * 19 // 2, GiB * 96 // 10),
        m(1500, 0xB, -(GiB * 9 // 2), 5 * GiB, GiB * 96 // 10),
        m(200, 0xC, GiB, GiB, 2 * GiB, device=1),
        m(300, 0xD, 100 * MiB, GiB + 100 * MiB, 4 * GiB, device=1),
        m(400, 0xD, -100 * MiB, GiB, 4 * GiB, device=1),
        m(600, 0xE, GiB * 3 // 2, GiB * 5 // 2, 4 * GiB, device=1),
    ]
    return open_trace(write_trace(tmp_path / "mem.json", events, header=header))


def test_hand_built_capacity_and_fragmentation(tmp_path):
    found = advise(hand_trace(tmp_path, props(10 * GiB, 10 * GiB)), only=["memory"]).findings
    (f,) = near(found)
    assert f.title == "cuda:0: reserved memory peaks at 96.0% of its 10.00 GiB" and f.saving_ns is None
    assert f.evidence == [{"device": "cuda:0", "capacity_bytes": 10 * GiB, "peak_allocated_bytes": GiB * 19 // 2,
                           "peak_reserved_bytes": GiB * 96 // 10, "allocated_pct": 95.0, "reserved_pct": 96.0,
                           "step": 2, "at_ns": 1_200_000}]  # 1200 us after the trace start (0)
    assert "0.40 GiB are left" in f.estimate and "expandable_segments" in f.remedy
    (g,) = fragmented(found)
    unused = 4 * GiB - (GiB + 100 * MiB)  # at 300 us, when the reserve grew to 4 GiB
    assert g.title.startswith(f"cuda:1: {unused / GiB:.2f} GiB reserved but not allocated")
    row = g.evidence[0]
    assert (row["reserved_bytes"], row["allocated_bytes"], row["unused_bytes"]) == (4 * GiB, GiB + 100 * MiB, unused)
    assert row["unused_pct"] == round(100 * unused / (4 * GiB), 2) and row["peak_allocated_bytes"] == GiB * 5 // 2
    assert (row["step"], row["at_ns"]) == (1, 300_000)
    assert "1.50 GiB stay unused" in g.estimate  # even at the allocated peak: 4 - 2.5 GiB
    assert g.saving_ns is None and "expandable_segments:True" in g.remedy


def test_capacity_from_run_json_and_a_bigger_gpu(tmp_path):
    run = {"gpus": [{"index": 0, "name": "GPU", "total_memory": 10 * GiB}]}
    trace = hand_trace(tmp_path)  # no deviceProperties: the capacity comes from run.json
    assert len(near(advise(trace, run=run, only=["memory"]).findings)) == 1
    # unknown capacity: no capacity finding; fragmentation still judged (3 GiB >= 256 MiB)
    found = advise(trace, only=["memory"]).findings
    assert not near(found) and len(fragmented(found)) == 1
    # 80 GiB GPUs: 9.6 GiB is 12%; 3 GiB unused is under 10% of the capacity
    (tmp_path / "mem.json").unlink()
    assert advise(hand_trace(tmp_path, props(80 * GiB, 80 * GiB)), only=["memory"]).findings == []


def test_no_records_is_not_applicable(tmp_path):
    t = open_trace(write_trace(tmp_path / "t.json", [x("aten::mm", 0, 10)]))
    assert "no memory records" in advise(t, only=["memory"]).not_applicable["memory"]


def test_fragmentation_needs_growth_while_the_cache_had_room(tmp_path):
    ev = [x("ProfilerStep#1", 0, 1000, cat="user_annotation"), x("aten::empty", 100, 10)]
    # 4 GiB reserved from the first record to the last, 1 GiB allocated: 3 GiB unused, but reserved never grew in
    # the trace (a reservation made before it): nothing shows fragmentation
    constant = ev + [m(100 + i, 0x10 + i, 10 * MiB, GiB + i * 10 * MiB, 4 * GiB, device=0) for i in range(5)]
    trace = open_trace(write_trace(tmp_path / "constant.json", constant))
    assert fragmented(advise(trace, only=["memory"]).findings) == []
    # reserved grows from 2 to 4 GiB for a 1.5 GiB request while the cache held 1 GiB free: it had to grow, the
    # cache could not serve it either way; no fragmentation
    needed = ev + [m(100, 0xA, GiB, GiB, 2 * GiB), m(200, 0xB, GiB * 3 // 2, GiB * 5 // 2, 4 * GiB)]
    trace = open_trace(write_trace(tmp_path / "needed.json", needed))
    assert fragmented(advise(trace, only=["memory"]).findings) == []
    # the same growth for a 512 MiB request with 1 GiB free: the free blocks did not fit; 4 - 1.5 GiB unused after
    frag = ev + [m(100, 0xA, GiB, GiB, 2 * GiB), m(200, 0xB, 512 * MiB, GiB * 3 // 2, 4 * GiB)]
    (g,) = fragmented(advise(open_trace(write_trace(tmp_path / "frag.json", frag)), only=["memory"]).findings)
    row = g.evidence[0]
    assert (row["cache_free_before_bytes"], row["request_bytes"], row["unused_bytes"]) == \
        (GiB, 512 * MiB, 4 * GiB - GiB * 3 // 2)


def _fragmented_by_hand(reserved: list, allocated: list):
    """The definition, record by record: the last growth of reserved memory while the cache held the request."""
    found = None
    for i in range(1, len(reserved)):
        r0, r1, a0, a1 = reserved[i - 1], reserved[i], allocated[i - 1], allocated[i]
        if None in (r0, r1, a0, a1) or r1 <= r0:
            continue
        if 0 < a1 - a0 <= r0 - a0:
            found = (i, r0 - a0, a1 - a0)
    return found


@pytest.mark.parametrize("seed", range(40))
def test_fragmented_growth_is_found_where_the_records_say_so(seed):
    rng = random.Random(seed)
    n = rng.randint(0, 30)
    reserved = [rng.choice([None, *range(0, 100, 10)]) if rng.random() < 0.2 else rng.randrange(0, 100, 10)
                for _ in range(n)]
    allocated = [None if rng.random() < 0.1 else rng.randrange(0, 100, 5) for _ in range(n)]
    got = _fragmented_growth(pa.array(reserved, pa.int64()), pa.array(allocated, pa.int64()))
    assert got == _fragmented_by_hand(reserved, allocated)
