"""Collective calls on the real traces, checked against their raw JSON (read here with json/gzip), then matched
across the two real sampled ranks, and a two-rank job made from the real nccl_data calls with known clock offsets,
jitter and a late rank."""

from __future__ import annotations

import gzip
import json
import random
from collections import Counter
from math import prod

import pytest
from support.collectives import calls_table
from support.shared import shared_trace

from opscope.analyses.collectives import collective_calls, collective_calls_with_notes
from opscope.analyses.job.clocks import apply_offsets, clock_offsets
from opscope.analyses.job.links import link_peak_gbps
from opscope.analyses.job.match import match_instances
from opscope.analyses.job.timing import collective_timing
from opscope.ingest import open_trace

NCCL_DATA = "hta/nccl_parser_config/nccl_data.json.gz"
SAMPLED = "hta/trace_filter/sampled_rank-{}.json.gz"
B200 = "tracelens/traces/b200/eager_trace.json.gz"
SIZES = {"Float": 4, "Long": 8, "BFloat16": 2, "float": 4, "long": 8, "int": 4, "unsigned char": 1,
         "signed char": 1}
ANNOTATION_NAMES = {"nccl:all_reduce": "allreduce", "nccl:all_to_all": "alltoall",
                    "nccl:_all_gather_base": "allgather"}


def raw(path):
    with gzip.open(path) as f:
        return json.load(f)["traceEvents"]


def nccl_kernels(events):
    return sorted((e for e in events if e.get("cat") == "kernel" and "nccl" in e["name"].lower()),
                  key=lambda e: e["ts"])


def test_nccl_data_calls_match_the_kernel_args():
    path = shared_trace(NCCL_DATA)
    kernels = nccl_kernels(raw(path))
    table, notes = collective_calls_with_notes(open_trace(path))
    rows = table.to_pylist()
    assert len(rows) == len(kernels) == 21 and notes == []
    assert Counter(r["collective"] for r in rows) == {"allreduce": 15, "broadcast": 6}
    for row, k in zip(rows, kernels):
        a = k["args"]
        assert row["collective"] == a["Collective name"]
        assert row["in_nelems"] == a["In msg nelems"] and row["dtype"] == a["dtype"]
        assert row["bytes"] == a["In msg nelems"] * SIZES[a["dtype"]]
        assert (row["pg"], row["pg_ranks"], row["group_size"]) == ("0", "0,1", 2)
        assert (row["algorithm"], row["protocol"], row["matched_by"]) == ("RING", "LL", "process group")
        assert abs(row["start_ns"] - k["ts"] * 1000) <= 1 and abs(row["dur_ns"] - k["dur"] * 1000) <= 1
    assert sum(r["dtype"] == "Float" for r in rows) == 18
    # 7 calls in each of the 3 steps, numbered 0..6 in each
    assert [(r["step"], r["seq"]) for r in rows] == [(s, i) for s in (4, 5, 6) for i in range(7)]


def expected_sampled(path):
    """Per NCCL kernel of a sampled rank, from the JSON: (collective, bytes or None, step) from the nccl:
    annotation around the runtime call that has the kernel's correlation id, and the ProfilerStep around it."""
    events = raw(path)
    runtime = {e["args"]["correlation"]: e for e in events
               if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    annotations = [e for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("nccl:")]
    steps = [e for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")]
    out = []
    for k in nccl_kernels(events):
        call = runtime[k["args"]["correlation"]]
        around = [a for a in annotations if a["tid"] == call["tid"] and a["ts"] <= call["ts"]
                  and call["ts"] + call["dur"] <= a["ts"] + a["dur"]]
        inner = max(around, key=lambda a: a["ts"])
        collective = ANNOTATION_NAMES[inner["name"]]
        nelems = prod(inner["args"]["Input Dims"][0])
        size = None if collective == "allgather" else nelems * SIZES[inner["args"]["Input type"][0]]
        step = next(int(s["name"].split("#")[1]) for s in steps if s["ts"] <= call["ts"] < s["ts"] + s["dur"])
        out.append((collective, size, step, k["name"]))
    return out


def test_sampled_ranks_from_annotations_and_kernel_names_matched_by_order():
    expected = {r: expected_sampled(shared_trace(SAMPLED.format(r))) for r in (0, 1)}
    calls = {}
    for r in (0, 1):
        table, notes = collective_calls_with_notes(open_trace(shared_trace(SAMPLED.format(r))))
        rows = table.to_pylist()
        assert [(x["collective"], x["bytes"], x["step"]) for x in rows] == [e[:3] for e in expected[r]]
        assert all(e[3].startswith("ncclKernel_SendRecv_RING_SIMPLE") for e in expected[r])
        assert {(x["algorithm"], x["protocol"], x["pg"], x["matched_by"]) for x in rows} == \
            {("RING", "SIMPLE", "", "order")}
        assert "10 collective call(s) without a process group: they are matched across ranks by order " \
            "(collective, step, position), which is an inference" in notes
        calls[r] = table
    # by order: the n-th call of a collective in a step on both ranks; kept only where their sizes agree
    keyed = {}
    for r in (0, 1):
        seen: Counter = Counter()
        for collective, size, step, _ in expected[r]:
            keyed.setdefault((collective, step, seen[(collective, step)]), {})[r] = size
            seen[(collective, step)] += 1
    agreeing = {k for k, v in keyed.items() if len(v) == 2 and v[0] == v[1]}
    matched = match_instances(calls)
    got = {(x["collective"], x["step"], x["seq"]) for x in matched.long.to_pylist()}
    assert got == agreeing and len(agreeing) == 4
    assert matched.long.num_rows == 2 * len(agreeing)
    assert any(n.startswith(f"{len(keyed) - len(agreeing)} collective instance(s) whose ranks disagree")
               for n in matched.notes)
    timing = collective_timing(apply_offsets(matched.long, clock_offsets(matched.long)))
    assert timing.instances.num_rows == 4 and any("matched by order" in n for n in timing.notes)


def test_b200_allgather_from_its_args():
    path = shared_trace(B200)
    (k,) = nccl_kernels(raw(path))
    (row,) = collective_calls(open_trace(path)).to_pylist()
    assert k["args"]["Out msg nelems"] == 201088 and k["args"]["dtype"] == "BFloat16"
    assert (row["collective"], row["bytes"], row["out_nelems"], row["in_nelems"]) == \
        ("allgather", 201088 * 2, 201088, 25136)
    assert (row["pg"], row["pg_ranks"], row["group_size"], row["algorithm"], row["protocol"]) == \
        ("3", "0,1,2,3,4,5,6,7", 8, "RING", "LL")
    assert link_peak_gbps("NVIDIA B200") == 900.0


def test_two_rank_job_from_real_calls_recovers_offsets_and_the_late_rank():
    """Rank 1 is rank 0's real calls on a clock reading 1.234567890 s more, with +-1 us of end jitter; it arrives
    250 us late at every allreduce (its kernels start later, they end together)."""
    rank0 = collective_calls(open_trace(shared_trace(NCCL_DATA)))
    offset, delay = 1_234_567_890, 250_000
    rng = random.Random(5)
    rows = []
    for r in rank0.to_pylist():
        end = r["end_ns"] + offset + rng.randrange(-1000, 1001)
        start = r["start_ns"] + offset + (delay if r["collective"] == "allreduce" else 0)
        rows.append({**r, "start_ns": start, "end_ns": end, "dur_ns": end - start})
    calls = {0: rank0, 1: calls_table(rows)}
    matched = match_instances(calls)
    assert matched.notes == [] and matched.long.num_rows == 42
    clocks = clock_offsets(matched.long)
    got = clocks.table.to_pylist()[1]
    assert abs(got["clock_offset_ns"] - offset) <= 2000 and got["aligned"] and got["instances"] == 21
    timing = collective_timing(apply_offsets(matched.long, clocks), {0: 300.0, 1: 300.0})
    late = [r["late_ns"] for r in timing.per_rank.to_pylist() if r["rank"] == 1]
    is_allreduce = [r["collective"] == "allreduce" for r in rank0.to_pylist()]
    for value, delayed in zip(late, is_allreduce):
        assert value == pytest.approx(delay if delayed else 0, abs=2000)
    allreduce = [i for i in timing.instances.to_pylist() if i["collective"] == "allreduce"]
    assert all(i["last_rank"] == 1 and abs(i["skew_ns"] - delay) <= 2000 for i in allreduce)
    # bus bandwidth of 2 ranks: allreduce factor 2 * 1 / 2 = 1, so busbw == algbw == bytes / transfer
    assert all(i["busbw_gbps"] == pytest.approx(i["bytes"] / i["transfer_ns"]) for i in allreduce)
