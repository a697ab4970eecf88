"""memcpy rule on hand-built traces: pageable host->device copies (measured against pinned ones of a similar size,
or a stated assumption) and tiny copies issued back to back."""

from __future__ import annotations

import pytest
from support.advise_copies import PAGEABLE
from support.tracefiles import write_trace, x

from opscope.advise import advise
from opscope.advise.rules.copies import ASSUMED_PINNED_SPEEDUP, BANDWIDTH_BYTES
from opscope.ingest import open_trace

PINNED = "Memcpy HtoD (Pinned -> Device)"


def copy(name, ts, dur, corr, nbytes, stream=7):
    return x(name, ts, dur, cat="gpu_memcpy", pid=0, tid=stream, device=0, stream=stream, correlation=corr,
             bytes=nbytes)


def call(ts, dur, corr, name="cudaMemcpyAsync"):
    return x(name, ts, dur, cat="cuda_runtime", correlation=corr)


def memcpy_findings(tmp_path, events, title_has=""):
    found = advise(open_trace(write_trace(tmp_path / "t.json", events)), only=["memcpy"]).findings
    return [f for f in found if title_has in f.title]


# --- pageable copies, by hand ----------------------------------------------------------------------------------

def test_pageable_copy_measured_against_pinned_copies_of_a_similar_size(tmp_path):
    # pinned 1 MB in 100 us (10 GB/s) measures the 2 MB pageable copy (500 us): 200 us at 10 GB/s, saves 300 us.
    # The 64 MB pinned copy at 32 GB/s is more than 4x larger: not used.
    events = [x("ProfilerStep#1", 0, 1000, cat="user_annotation"),
              call(1, 1, 1), call(2, 1, 2), call(3, 1, 3),
              copy(PINNED, 100, 100, 1, 1_000_000),
              copy(PAGEABLE, 300, 500, 2, 2_000_000),
              copy(PINNED, 10, 2000, 3, 64_000_000, stream=8)]  # 2000 us: runs past the step, on another stream
    f = memcpy_findings(tmp_path, events, "Pageable")
    assert len(f) == 1
    assert f[0].saving_ns == 300_000 and f[0].saving_pct == 30.0
    row = f[0].evidence[0]
    assert (row["bytes"], row["gbps"], row["pinned_gbps"], row["basis"], row["saving_ns"]) == \
        (2_000_000, 4.0, 10.0, "measured", 300_000)
    assert row["step"] == 1 and row["at_ns"] == 300_000
    assert "measured" in f[0].estimate and "ASSUMED" not in f[0].estimate
    assert "pin_memory" in f[0].remedy and "non_blocking=True" in f[0].remedy


def test_without_a_similar_pinned_copy_the_stated_assumption_is_used_for_large_copies_only(tmp_path):
    # 2 MB pageable in 500 us: assumed 2x -> saves 250 us; the 4 KB pageable copy (30 us) is latency: no saving
    events = [x("ProfilerStep#1", 0, 1000, cat="user_annotation"), call(1, 1, 1), call(2, 1, 2),
              copy(PAGEABLE, 300, 500, 1, 2_000_000), copy(PAGEABLE, 850, 30, 2, 4096)]
    f = memcpy_findings(tmp_path, events, "Pageable")
    assert f[0].saving_ns == 500_000 - 500_000 / ASSUMED_PINNED_SPEEDUP
    assert "ASSUMED" in f[0].estimate and f"{ASSUMED_PINNED_SPEEDUP:g}x" in f[0].estimate
    assert [(r["bytes"], r["basis"], r["saving_ns"]) for r in f[0].evidence] == \
        [(2_000_000, "assumed", 250_000), (4096, "latency", 0)]
    assert {tuple(sorted(r)) for r in f[0].evidence} == {tuple(sorted(f[0].evidence[0]))}


def test_pinned_copies_and_small_pageable_ones_stay_silent(tmp_path):
    events = [x("ProfilerStep#1", 0, 1000, cat="user_annotation"), call(1, 1, 1), call(2, 1, 2),
              copy(PINNED, 100, 400, 1, 4_000_000), copy(PAGEABLE, 600, 40, 2, BANDWIDTH_BYTES - 1)]
    assert memcpy_findings(tmp_path, events) == []


# --- tiny copies ----------------------------------------------------------------------------------------------

def test_tiny_copies_in_back_to_back_batches_by_hand(tmp_path):
    # 20 copies of 8 bytes host->device, each call 10 us; a kernel launch after the 12th splits them into two
    # batches: saving = (20 - 2) x 10 us. Two blocking device->host reads: each call runs 100 us, waiting 90 us
    # for earlier work (its copy starts 90 us in, ends before it returns): host time 10 us each, one batch.
    events = [x("ProfilerStep#1", 0, 10_000, cat="user_annotation")]
    corr = 0
    for i in range(20):
        corr += 1
        t = 100 + 20 * i + (100 if i >= 12 else 0)
        events += [call(t, 10, corr), copy(PINNED, t + 15, 2, corr, 8)]
        if i == 11:
            corr += 1
            events += [call(t + 20, 5, corr, "cudaLaunchKernel"),
                       x("k", t + 30, 50, cat="kernel", pid=0, tid=7, device=0, stream=7, correlation=corr)]
    for t in (2_000, 2_200):
        corr += 1
        events += [call(t, 100, corr), copy("Memcpy DtoH (Device -> Pinned)", t + 90, 2, corr, 4)]
    f = memcpy_findings(tmp_path, events, "tiny")
    assert len(f) == 1
    # 20 + 2 copies: more than TINY_PER_STEP; the saving is 18 x 10 us (host->device) + 1 x 10 us (device->host)
    assert f[0].saving_ns == 18 * 10_000 + 10_000 and f[0].saving_pct == pytest.approx(1.9)
    rows = {r["direction"]: r for r in f[0].evidence}
    assert (rows["htod"]["copies_per_step"], rows["htod"]["batches_per_step"], rows["htod"]["median_call_ns"]) == \
        (20, 2, 10_000)
    assert (rows["dtoh"]["copies_per_step"], rows["dtoh"]["batches_per_step"], rows["dtoh"]["median_call_ns"]) == \
        (2, 1, 10_000)
    assert "22 calls become 3" in f[0].estimate


def test_few_tiny_copies_stay_silent(tmp_path):
    events = [x("ProfilerStep#1", 0, 1000, cat="user_annotation")]
    for i in range(10):
        events += [call(10 + 20 * i, 10, i + 1), copy(PINNED, 25 + 20 * i, 2, i + 1, 8)]
    assert memcpy_findings(tmp_path, events) == []


# --- inputs missing, explain ----------------------------------------------------------------------------------

def test_not_applicable_without_gpu_or_copies(tmp_path):
    t = open_trace(write_trace(tmp_path / "t.json", [x("aten::mm", 0, 10)]))
    assert "no GPU" in advise(t, only=["memcpy"]).not_applicable["memcpy"]
    events = [x("ProfilerStep#1", 0, 100, cat="user_annotation"),
              x("cudaLaunchKernel", 1, 1, cat="cuda_runtime", correlation=1),
              x("k", 10, 50, cat="kernel", pid=0, tid=7, device=0, stream=7, correlation=1)]
    t = open_trace(write_trace(tmp_path / "k.json", events))
    assert "no copies" in advise(t, only=["memcpy"]).not_applicable["memcpy"]


def test_copies_without_sizes_or_launches_do_not_crash(tmp_path):
    events = [x("ProfilerStep#1", 0, 1000, cat="user_annotation"),
              x(PAGEABLE, 100, 500, cat="gpu_memcpy", pid=0, tid=7, device=0, stream=7)]
    assert memcpy_findings(tmp_path, events) == []  # no size: no saving claimed


def test_copy_sizes_read_from_args_text_as_a_dict_would():
    # the copies' "bytes" argument, read without building each args dict: the same value as json's dict would give
    import json

    from opscope.analyses.copies import _bytes_values

    texts = ['{"bytes": 128, "stream": 7}', '{"stream": 7}', '[1, 2]', "null", "not json", '{"bytes": 1, "bytes": 2}',
             '{"args": {"bytes": 5}}', '{"bytes": -3}', '{"bytes": 1.5}', '{"bytes": "64"}', None, ""]

    def by_dict(text):
        try:
            value = json.loads(text) if text else None
        except ValueError:
            return None
        return value.get("bytes") if isinstance(value, dict) else None

    assert _bytes_values(texts) == [by_dict(t) for t in texts] == [128, None, None, None, None, 2, None, -3, 1.5, "64",
                                                                    None, None]


def test_key_range_per_launch_is_the_group_by_it_replaces():
    """Each launch's least and greatest key, by a sort, as Arrow's group-by gives them (a null launch one group)."""
    import random

    import pyarrow as pa

    from opscope.advise.rules.copies import _key_range_per_launch

    rng = random.Random(3)
    for _ in range(200):
        n = rng.randint(0, 40)
        launch = pa.array([rng.choice([None, *range(6)]) for _ in range(n)], pa.int64())
        key = pa.array([rng.choice([-1, 0, 1, 2]) for _ in range(n)], pa.int64())
        grouped = pa.table({"launch": launch, "key": key}).group_by("launch").aggregate(
            [("key", "min"), ("key", "max")])
        expected = sorted(zip(*(grouped[c].to_pylist() for c in ("launch", "key_min", "key_max"))),
                          key=lambda row: (row[0] is None, row[0] or 0))
        got = list(zip(*(a.to_pylist() for a in _key_range_per_launch(launch, key))))
        assert got == expected
