"""Collective calls of one rank from hand-written Kineto traces, and the job analyses (matching across ranks, clock
offsets, timing and bus bandwidth) on hand-built per-rank tables: every expected value worked out by hand."""

from __future__ import annotations

import math
import random

import pyarrow as pa
import pytest
from support import make_trace, row
from support.collectives import call, calls_table, job
from support.tracefiles import write_trace, x

from opscope.analyses.collectives import (
    COLLECTIVE_CALLS,
    canonical_ranks,
    collective_calls,
    collective_calls_with_notes,
    expand_ranks,
    message_bytes,
    normalise_collective,
    normalise_dtype,
    parse_kernel_name,
    parse_pg_ranks,
)
from opscope.analyses.job.clocks import NOT_ALIGNED, NOT_POSSIBLE, apply_offsets, clock_offsets, no_offsets
from opscope.analyses.job.links import link_peak_gbps
from opscope.analyses.job.match import LONG, match_instances
from opscope.analyses.job.timing import PER_RANK, bus_factor, collective_timing, size_bucket
from opscope.ingest import open_trace

ALLREDUCE_KERNEL = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"
COMM_ARGS = {"Collective name": "allreduce", "In msg nelems": 1000, "Out msg nelems": 1000, "Group size": 2,
             "dtype": "Float", "Process Group Name": "0", "Process Group Description": "default_pg",
             "Process Group Ranks": "[0, 1]"}


def kernel(name, ts, dur, correlation, external=None, **args):
    extra = {"External id": external} if external is not None else {}
    return x(name, ts, dur, cat="kernel", pid=0, tid=7, device=0, stream=7, correlation=correlation,
             **extra, **args)


def launch(ts, correlation):
    return x("cudaLaunchKernel", ts, 2, cat="cuda_runtime", correlation=correlation)


def one_rank(tmp_path, events, name="rank.json"):
    return collective_calls_with_notes(open_trace(write_trace(tmp_path / name, events)))


# --- one rank ----------------------------------------------------------------------------------------------------

def test_kernel_args_give_every_field(tmp_path):
    # step 1 [0, 1000) us: two allreduces and a broadcast on pg 0; step 2: one allreduce
    events = [
        x("ProfilerStep#1", 0, 1000, cat="user_annotation"),
        launch(10, 1), kernel(ALLREDUCE_KERNEL, 100, 50, 1, **COMM_ARGS),
        launch(20, 2), kernel("ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclDevComm*)", 200, 10, 2,
                              **{**COMM_ARGS, "Collective name": "broadcast", "dtype": "Long",
                                 "In msg nelems": 53, "Out msg nelems": 53}),
        launch(30, 3), kernel(ALLREDUCE_KERNEL, 300, 40, 3, **{**COMM_ARGS, "In msg nelems": 7,
                                                                  "Out msg nelems": 7}),
        x("ProfilerStep#2", 1000, 1000, cat="user_annotation"),
        launch(1010, 4), kernel(ALLREDUCE_KERNEL, 1100, 25, 4, **COMM_ARGS),
    ]
    table, notes = one_rank(tmp_path, events)
    assert table.schema == COLLECTIVE_CALLS and notes == []
    rows = table.to_pylist()
    assert rows[0] == {
        "pg": "0", "pg_desc": "default_pg", "pg_ranks": "0,1", "group_size": 2, "collective": "allreduce",
        "in_nelems": 1000, "out_nelems": 1000, "dtype": "Float", "bytes": 4000, "algorithm": "RING", "protocol": "LL",
        "kernel": ALLREDUCE_KERNEL, "device": 0, "stream": 7, "start_ns": 100_000, "end_ns": 150_000,
        "dur_ns": 50_000, "step": 1, "seq": 0, "matched_by": "process group"}
    assert [(r["collective"], r["bytes"], r["step"], r["seq"]) for r in rows] == [
        ("allreduce", 4000, 1, 0), ("broadcast", 53 * 8, 1, 1), ("allreduce", 28, 1, 2), ("allreduce", 4000, 2, 0)]


def test_record_param_comms_args_when_the_kernel_has_none(tmp_path):
    # the b200 trace's shape: _allgather_base of 25136 BFloat16 per rank over 8 ranks -> 201088 gathered
    rpc = {"Collective name": "_allgather_base", "In msg nelems": 25136, "Out msg nelems": 201088, "Group size": 8,
           "dtype": "BFloat16", "Process Group Name": "3", "Process Group Description": "undefined",
           "Process Group Ranks": "[0, 1, 2, 3, 4, 5, 6, 7]"}
    events = [
        x("c10d::_allgather_base_", 0, 100, **{"External id": 41}),
        x("record_param_comms", 5, 90, **{"External id": 42, **rpc}),
        launch(10, 9),
        kernel("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 50, 22, 9, external=42),
    ]
    table, notes = one_rank(tmp_path, events)
    row = table.to_pylist()[0]
    assert (row["collective"], row["in_nelems"], row["out_nelems"], row["dtype"], row["bytes"]) == \
        ("allgather", 25136, 201088, "BFloat16", 201088 * 2)
    assert (row["pg"], row["pg_ranks"], row["group_size"], row["algorithm"], row["protocol"]) == \
        ("3", "0,1,2,3,4,5,6,7", 8, "RING", "LL")
    assert row["step"] is None and row["seq"] == 0 and notes == []


def test_nccl_annotation_then_kernel_name_alone(tmp_path):
    # older Kineto (the sampled_rank traces): no collective args anywhere; the first kernel's launch sits in
    # nccl:all_reduce (Input Dims [[1000, 3]], float), the second has nothing but its name
    events = [
        x("ProfilerStep#1", 0, 1000, cat="user_annotation"),
        x("nccl:all_reduce", 5, 20, cat="user_annotation", **{"Input Dims": [[1000, 3]], "Input type": ["float"]}),
        launch(10, 1),
        kernel("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", 100, 30, 1,
               external=1),
        launch(50, 2),
        kernel("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL128(ncclDevKernelArgsStorage<4096ul>)", 200, 30, 2),
    ]
    table, notes = one_rank(tmp_path, events)
    first, second = table.to_pylist()
    assert (first["collective"], first["in_nelems"], first["out_nelems"], first["dtype"], first["bytes"]) == \
        ("allreduce", 3000, 3000, "Float", 12000)
    assert (first["pg"], first["group_size"], first["matched_by"], first["algorithm"], first["protocol"]) == \
        ("", None, "order", "RING", "SIMPLE")
    assert (second["collective"], second["bytes"], second["algorithm"], second["protocol"], second["seq"]) == \
        ("reduce_scatter", None, "RING", "LL128", 0)
    assert any(n.startswith("1 collective call(s) described only by the nccl:<name> annotation") for n in notes)
    assert any(n.startswith("1 collective call(s) known only from the kernel name") for n in notes)
    assert "1 kernel(s) whose name names another collective than the one recorded for their launch (e.g. a sendrecv " \
        "kernel under allreduce): the recorded one is used" in notes
    assert any(n.startswith("2 collective call(s) without a process group") for n in notes)


def test_hostile_process_group_ranks_and_sizes(tmp_path):
    bad_ranks = ["[0, 1]; __import__('os').system('true')", "[0, 0]", "[" + "1," * 600_000 + "1]", "[0, 1, 2]",
                 "{0, 1}", 12]
    events = [launch(i * 10, i + 1) for i in range(len(bad_ranks))]
    events += [kernel(ALLREDUCE_KERNEL, 100 + i * 100, 10, i + 1, **{**COMM_ARGS, "Process Group Ranks": text})
               for i, text in enumerate(bad_ranks)]
    events += [launch(90, 50), kernel(ALLREDUCE_KERNEL, 900, 10, 50,
                                      **{**COMM_ARGS, "In msg nelems": "1000", "Out msg nelems": -3,
                                         "Group size": True, "dtype": "<b>x</b>" * 100})]
    table, notes = one_rank(tmp_path, events)
    assert table.column("pg_ranks").to_pylist() == [""] * 6 + ["0,1"]
    assert table.column("group_size").to_pylist() == [2] * 7  # the last from its ranks (Group size was a bool)
    last = table.to_pylist()[-1]
    assert (last["in_nelems"], last["out_nelems"], last["bytes"], len(last["dtype"])) == (None, None, None, 64)
    assert any(n.startswith("6 collective call(s) with a malformed Process Group Ranks") for n in notes)


def test_parsers():
    assert [normalise_collective(n) for n in (
        "_allgather_base", "allreduce_coalesced", "nccl:all_reduce", "c10d::reduce_scatter_tensor_coalesced_",
        "allgather_into_tensor_coalesced", "all_to_all_single", "recvAnySource", "barrier", "broadcast", "mystery",
        "", None)] == ["allgather", "allreduce", "allreduce", "reduce_scatter", "allgather", "alltoall", "recv",
                       "barrier", "broadcast", "other", None, None]
    assert parse_kernel_name(ALLREDUCE_KERNEL) == ("allreduce", "RING", "LL")
    assert parse_kernel_name("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)") == \
        ("allgather", "RING", "LL")
    assert parse_kernel_name("ncclDevKernel_AllReduce_Sum_bf16_NVLS_TREE_SIMPLE") == \
        ("allreduce", "NVLS_TREE", "SIMPLE")
    assert parse_kernel_name("ncclDevKernel_ReduceScatter_Sum_f32_COLLNET_DIRECT_LL128") == \
        ("reduce_scatter", "COLLNET_DIRECT", "LL128")
    assert parse_kernel_name("ncclKernel_AllReduce_TREE_LL128_Sum_half") == ("allreduce", "TREE", "LL128")
    assert parse_kernel_name("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)") == ("sendrecv", "", "")
    assert parse_kernel_name("ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)") == (None, "", "")
    assert parse_kernel_name("ampere_sgemm_128x64_nn") == (None, "", "")
    assert [normalise_dtype(d) for d in ("Float", "float", "c10::BFloat16", "c10::Half", "long int", "unsigned char",
                                         "Float8_e4m3fn", "Quux", None)] == \
        ["Float", "Float", "BFloat16", "Half", "Long", "Byte", "Float8_e4m3fn", "Quux", None]
    assert message_bytes("allgather", 10, 80, "Half") == 160
    assert message_bytes("reduce_scatter", 80, 10, "Float") == 320
    assert message_bytes("alltoall", 8, 8, "Double") == 64
    assert message_bytes("allreduce", 8, 8, "Quux") is None
    assert parse_pg_ranks("[3, 1,2]") == [1, 2, 3] and parse_pg_ranks("[]") == [] and parse_pg_ranks(None) == []
    assert parse_pg_ranks("[1, -2]") is None and parse_pg_ranks("[1e3]") is None


# --- matching ----------------------------------------------------------------------------------------------------

def test_instances_by_process_group_and_step():
    a = [call(100, 200, 0), call(300, 400, 1), call(500, 600, 0, step=2)]
    b = [call(110, 205, 0), call(305, 401, 1), call(510, 602, 0, step=2)]
    matched = match_instances({1: calls_table(b), 0: calls_table(a)})
    assert matched.long.schema == LONG and matched.notes == []
    rows = matched.long.to_pylist()
    assert [(r["instance"], r["rank"], r["step"], r["seq"], r["start_ns"]) for r in rows] == [
        (0, 0, 1, 0, 100), (0, 1, 1, 0, 110), (1, 0, 1, 1, 300), (1, 1, 1, 1, 305), (2, 0, 2, 0, 500),
        (2, 1, 2, 0, 510)]


def test_disagreeing_instance_left_out_and_named():
    a = [call(100, 200, 0), call(300, 400, 1, bytes=4096), call(500, 600, 2)]
    b = [call(110, 205, 0), call(305, 401, 1, bytes=2048), call(510, 602, 2, collective="broadcast")]
    matched = match_instances({0: calls_table(a), 1: calls_table(b)})
    assert sorted(set(matched.long["instance"].to_pylist())) == [0]
    assert matched.long["start_ns"].to_pylist() == [100, 110]
    assert matched.notes == [
        "2 collective instance(s) whose ranks disagree on the collective or its size are left out; the first: "
        "process group '0', step 1, call #1: allreduce 4096 B on rank(s) 0; allreduce 2048 B on rank(s) 1"]


def test_trace_text_in_notes_is_plain():
    pg = "[bold red]boom[/] " + "x" * 100
    a, b = [call(0, 10, 0, pg=pg, bytes=1)], [call(0, 10, 0, pg=pg, bytes=2)]
    (note,) = match_instances({0: calls_table(a), 1: calls_table(b)}).notes
    assert "process group '?bold?red?boom????" + "x" * 22 + "', step 1" in note and "[" not in note


def test_missing_member_order_matching_and_uneven_alltoall():
    # rank 2 is given but is no member of pg 0 (ranks 0,1): not expected there. Rank 1 lacks call #1.
    a = [call(100, 200, 0), call(300, 400, 1), call(0, 50, 0, pg="", collective="sendrecv"),
         call(700, 800, 0, pg="1", collective="alltoall", bytes=100)]
    b = [call(110, 205, 0), call(5, 55, 0, pg="", collective="sendrecv"),
         call(710, 805, 0, pg="1", collective="alltoall", bytes=900)]
    c = [call(0, 10, 0, pg="9", pg_ranks="2", group_size=1)]
    matched = match_instances({0: calls_table(a), 1: calls_table(b), 2: calls_table(c)})
    got = [(r["instance"], r["rank"], r["collective"], r["matched_by"]) for r in matched.long.to_pylist()]
    assert got == [(0, 0, "allreduce", "process group"), (0, 1, "allreduce", "process group"),
                   (1, 0, "allreduce", "process group"),
                   (2, 0, "alltoall", "process group"), (2, 1, "alltoall", "process group"),
                   (3, 2, "allreduce", "process group"),
                   (4, 0, "sendrecv", "order"), (4, 1, "sendrecv", "order")]
    # the order-matched sendrecv: expected on every rank given (0, 1, 2), rank 2 lacks it, like pg 0's call #1
    assert matched.notes == [
        "1 collective instance(s) matched across ranks by order (collective, step, position) because their calls "
        "record no process group: an inference",
        "2 collective instance(s) lack some of their member ranks (a rank's profiling window or file may not cover "
        "them); kept with the ranks that have them"]
    timing = collective_timing(matched.long)
    assert timing.instances.to_pylist()[2]["bytes"] == 900
    assert any(n.startswith("1 all-to-all instance(s) with different sizes") for n in timing.notes)


def test_same_group_name_with_other_ranks_is_another_instance():
    # new_subgroups: pg "5" is rank 0 alone on rank 0 and rank 1 alone on rank 1
    matched = match_instances({0: calls_table([call(0, 10, 0, pg="5", pg_ranks="0", group_size=1)]),
                               1: calls_table([call(0, 10, 0, pg="5", pg_ranks="1", group_size=1)])})
    assert matched.long.select(["instance", "rank"]).to_pylist() == [{"instance": 0, "rank": 0},
                                                                     {"instance": 1, "rank": 1}]
    assert matched.notes == []


# --- clocks ------------------------------------------------------------------------------------------------------

FOUR = {"pg_ranks": "0,1,2,3", "group_size": 4}


def test_offsets_recovered_exactly_without_noise():
    offsets = {0: 0, 1: 5_000_000_123, 2: -777_777, 3: 1_700_000_000_000_000_000}
    ends = [1_000_000 * (i + 1) + 37 * i * i for i in range(12)]
    long = match_instances(job(dict.fromkeys(offsets, ends), offsets, **FOUR)).long
    clocks = clock_offsets(long)
    assert clocks.notes == [] and clocks.reference == 0
    assert clocks.table.to_pylist() == [
        {"rank": r, "clock_offset_ns": offsets[r], "offset_uncertainty_ns": 0, "instances": 12, "end_spread_ns": 0,
         "aligned": True} for r in range(4)]
    # relative to rank 2 instead
    again = clock_offsets(long, reference=2)
    assert again.table["clock_offset_ns"].to_pylist() == [offsets[r] - offsets[2] for r in range(4)]
    aligned = apply_offsets(long, clocks)
    assert set(aligned.filter(pa.compute.equal(aligned["instance"], 3))["end_ns"].to_pylist()) == {ends[3]}


def test_offsets_within_tolerance_with_noise_and_one_outlier():
    rng = random.Random(18)
    offsets = {r: rng.randrange(-10**12, 10**12) for r in range(8)}
    offsets[0] = 0
    true_ends = [2_000_000 * (i + 1) for i in range(40)]
    ends = {r: [e + rng.randrange(-2000, 2001) for e in true_ends] for r in offsets}
    ends[5][7] += 5_000_000  # one rank's kernel ends 5 ms late once
    ends[3] = [e + 3_000_000 for e in ends[3][:1]] + ends[3][1:]
    fields = {"pg_ranks": ",".join(map(str, range(8))), "group_size": 8}
    clocks = clock_offsets(match_instances(job(ends, offsets, **fields)).long)
    for got in clocks.table.to_pylist():
        assert abs(got["clock_offset_ns"] - offsets[got["rank"]]) <= 2000
        assert got["aligned"] and got["instances"] == 40
        if got["rank"]:
            assert 0 < got["offset_uncertainty_ns"] < 1500 and got["end_spread_ns"] < 3000


def test_uncertainty_by_hand():
    # rank 1 reads 100 ns more, with end noise 0, +10, -10 ns on ends 0, 1000, 2000. Alternating medians of two
    # ranks: c = 0, 1005, 1995; rank 1's residuals 0, +5, -5 -> MAD 5 -> sqrt(pi/2) * 1.4826 * 5 / sqrt(3) = 5.36
    calls = {0: calls_table([call(e - 50, e, i, dur_ns=50) for i, e in enumerate((0, 1000, 2000))]),
             1: calls_table([call(e - 50, e, i, dur_ns=50) for i, e in enumerate((100, 1110, 2090))])}
    table = clock_offsets(match_instances(calls).long).table.to_pylist()
    assert table[1] == {"rank": 1, "clock_offset_ns": 100,
                        "offset_uncertainty_ns": round(math.sqrt(math.pi / 2) * 1.4826 * 5 / math.sqrt(3)),
                        "instances": 3, "end_spread_ns": 5, "aligned": True}
    assert table[0]["offset_uncertainty_ns"] == 0


def test_disconnected_ranks_get_no_offset():
    pair = {"pg_ranks": "0,1"}
    other = {"pg": "7", "pg_ranks": "2,3"}
    calls = {r: calls_table([call(100 * i, 100 * i + 50 + r, i, **(pair if r < 2 else other)) for i in range(3)])
             for r in range(4)}
    clocks = clock_offsets(match_instances(calls).long, ranks=[0, 1, 2, 3, 4])
    rows = clocks.table.to_pylist()
    assert [(r["rank"], r["clock_offset_ns"], r["aligned"]) for r in rows] == [
        (0, 0, True), (1, 1, True), (2, None, False), (3, None, False), (4, None, False)]
    assert clocks.notes == ["3 rank(s) share no blocking collective with reference rank 0 (directly or through other "
                            "ranks), so their clocks are not aligned: 2, 3, 4"]
    long = match_instances(calls).long
    assert apply_offsets(long, clocks)["end_ns"].to_pylist()[:4] == [50, 50, 150, 150]


def test_no_collectives_to_align_on_and_no_align():
    only_p2p = {r: calls_table([call(0, 10, 0, pg="", collective="sendrecv")]) for r in (0, 1)}
    clocks = clock_offsets(match_instances(only_p2p).long)
    assert clocks.notes == [NOT_POSSIBLE] and NOT_POSSIBLE == \
        "clock alignment was not possible: no collective ends to align on"
    assert clocks.table.select(["rank", "clock_offset_ns", "aligned"]).to_pylist() == [
        {"rank": 0, "clock_offset_ns": None, "aligned": False}, {"rank": 1, "clock_offset_ns": None, "aligned": False}]
    assert clock_offsets(match_instances({}).long, ranks=[3]).table["aligned"].to_pylist() == [False]
    off = clock_offsets(match_instances(job({0: [10], 1: [20]}, {0: 0, 1: 5})).long, no_align=True)
    assert off.notes == [NOT_ALIGNED] and off.table["clock_offset_ns"].to_pylist() == [0, 0]
    assert off.table["aligned"].to_pylist() == [False, False]
    same = no_offsets(match_instances(job({0: [10], 1: [20]}, {0: 0, 1: 5})).long, [0, 1, 2])
    assert same.notes == [NOT_ALIGNED] and same.table["rank"].to_pylist() == [0, 1, 2]


# --- timing ------------------------------------------------------------------------------------------------------

def test_two_ranks_late_and_early():
    # rank 0 arrives at 0, rank 1 at 300; both end at 1000
    calls = {0: calls_table([call(0, 1000, 0)]), 1: calls_table([call(300, 1000, 0)])}
    timing = collective_timing(match_instances(calls).long)
    assert timing.per_rank.schema == PER_RANK
    assert timing.per_rank.to_pylist() == [
        {"instance": 0, "rank": 0, "arrival_ns": 0, "wait_ns": 300, "transfer_ns": 700, "late_ns": -300, "step": 1,
         "dur_ns": 1000},
        {"instance": 0, "rank": 1, "arrival_ns": 300, "wait_ns": 0, "transfer_ns": 700, "late_ns": 300, "step": 1,
         "dur_ns": 700}]
    inst = timing.instances.to_pylist()[0]
    assert (inst["skew_ns"], inst["last_rank"], inst["transfer_ns"], inst["wait_ns"], inst["ranks"]) == \
        (300, 1, 700, 150, 2)
    assert inst["algbw_gbps"] == pytest.approx(1024 / 700) and inst["busbw_gbps"] == pytest.approx(1024 / 700)


def test_leave_one_out_lateness_and_clamps():
    # three ranks arrive at 0, 100, 1000; rank 0's kernel (0, 100) ends before the last arrival (clocks off)
    fields = {"pg_ranks": "0,1,2", "group_size": 3}
    calls = {0: calls_table([call(0, 100, 0, **fields)]), 1: calls_table([call(100, 1500, 0, **fields)]),
             2: calls_table([call(1000, 1500, 0, **fields)])}
    per_rank = collective_timing(match_instances(calls).long).per_rank.to_pylist()
    assert [(r["late_ns"], r["wait_ns"], r["transfer_ns"]) for r in per_rank] == [
        (0 - 550, 100, 0), (100 - 500, 900, 500), (1000 - 50, 0, 500)]


def test_bus_bandwidth_by_hand():
    # 8 ranks all-reduce 1 GiB in 10 ms: algbw = 2**30 / 1e7 ns = 107.374 GB/s, busbw = algbw * 2 * 7 / 8 = 187.9;
    # the slowest link of the group is 300 GB/s -> 62.6 % of peak. An allgather of 64 KiB: factor 7/8, no peak known.
    fields = {"pg_ranks": ",".join(map(str, range(8))), "group_size": 8, "bytes": 2**30}
    calls = {r: calls_table([call(0, 10_000_000, 0, **fields),
                             call(20_000_000, 20_001_000, 1, **{**fields, "collective": "allgather",
                                                                  "bytes": 65536})]) for r in range(8)}
    peaks = dict.fromkeys(range(8), 450.0) | {6: 300.0}
    timing = collective_timing(match_instances(calls).long, peaks)
    big, small = timing.instances.to_pylist()
    algbw = 2**30 / 1e7
    assert big["algbw_gbps"] == pytest.approx(algbw) and big["busbw_gbps"] == pytest.approx(algbw * 2 * 7 / 8)
    assert big["peak_gbps"] == 300.0 and big["pct_of_peak"] == pytest.approx(100 * algbw * 2 * 7 / 8 / 300)
    assert small["busbw_gbps"] == pytest.approx(65536 / 1000 * 7 / 8)
    assert [bus_factor(c, 4) for c in ("allreduce", "allgather", "reduce_scatter", "alltoall", "broadcast", "send",
                                       "barrier")] == [1.5, 0.75, 0.75, 0.75, 1.0, 1.0, None]
    assert bus_factor("allreduce", None) is None and bus_factor("broadcast", None) == 1.0
    assert timing.summary.to_pylist() == [
        {"collective": "allgather", "size_bucket": "64 KiB-1 MiB", "calls": 1, "total_bytes": 65536,
         "median_skew_ns": 0, "mean_wait_ns": 0, "mean_transfer_ns": 1000,
         "median_busbw_gbps": pytest.approx(65536 / 1000 * 7 / 8), "median_pct_of_peak": pytest.approx(
             100 * 65536 / 1000 * 7 / 8 / 300)},
        {"collective": "allreduce", "size_bucket": ">=256 MiB", "calls": 1, "total_bytes": 2**30,
         "median_skew_ns": 0, "mean_wait_ns": 0, "mean_transfer_ns": 10_000_000,
         "median_busbw_gbps": pytest.approx(algbw * 1.75), "median_pct_of_peak": pytest.approx(
             100 * algbw * 1.75 / 300)}]


def test_size_buckets_and_unknowns():
    assert [size_bucket(b) for b in (0, 65535, 65536, 2**20 - 1, 2**20, 16 * 2**20, 256 * 2**20 - 1, 256 * 2**20,
                                     None)] == ["<64 KiB", "<64 KiB", "64 KiB-1 MiB", "64 KiB-1 MiB", "1-16 MiB",
                                                "16-256 MiB", "16-256 MiB", ">=256 MiB", "unknown"]
    calls = {r: calls_table([call(0, 100, 0, bytes=None, group_size=None, pg_ranks=""),
                             call(200, 300, 1, bytes=800, group_size=None, pg_ranks="")]) for r in (0, 1)}
    timing = collective_timing(match_instances(calls).long, {0: 450.0})
    unknown, known = timing.instances.to_pylist()
    assert unknown["algbw_gbps"] is None and unknown["pct_of_peak"] is None
    assert known["algbw_gbps"] == 8.0 and known["busbw_gbps"] is None and known["pct_of_peak"] is None
    assert any(n.startswith("1 collective instance(s) without a known group size") for n in timing.notes)
    assert [r["size_bucket"] for r in timing.summary.to_pylist()] == ["<64 KiB", "unknown"]


def test_link_peaks():
    names = {"NVIDIA H100 80GB HBM3": 450.0, "NVIDIA H100 PCIe": None, "NVIDIA H100 NVL": None, "NVIDIA H200": 450.0,
             "NVIDIA B200": 900.0, "NVIDIA GB200": 900.0, "NVIDIA A100-SXM4-80GB": 300.0,
             "NVIDIA A100 80GB PCIe": None, "Tesla V100-SXM2-32GB": 150.0, "AMD Instinct MI300X": 448.0,
             "AMD Instinct MI250X": None, "NVIDIA GeForce RTX 4090": None, "": None}
    assert {n: link_peak_gbps(n) for n in names} == names
    assert link_peak_gbps(None) is None


def test_trace_without_collectives():
    table, notes = collective_calls_with_notes(make_trace([row("kernel", "gemm", 0, 10, stream=7, device=0)]))
    assert table.schema == COLLECTIVE_CALLS and table.num_rows == 0 and notes == []
    assert collective_calls(make_trace([])).num_rows == 0


def test_rank_lists_canonical_truncated_and_expanded(tmp_path):
    assert canonical_ranks([2, 0, 1]) == "0,1,2"
    assert canonical_ranks(list(range(1024))) == "0-1023"
    assert canonical_ranks(list(range(0, 1024, 8))) == "0-1016:8"
    assert canonical_ranks([*range(100, 140), 500, 7, 9]) == "7,9,100-139,500"
    for ranks in ([], [5], list(range(1024)), list(range(3, 900, 7)), [*range(100, 140), 500, 7, 9]):
        assert expand_ranks(canonical_ranks(ranks)) == sorted(ranks)
    assert expand_ranks("0-2000000") is None and expand_ranks("5-1") is None and expand_ranks("0,x") is None
    # torch keeps the first 30 ranks: "[0, 2, ..., 58, ...]"; completed from Global rank start/stride, Group size
    cut = "[" + ", ".join(str(2 * k) for k in range(30)) + ", ...]"
    strided = {**COMM_ARGS, "Process Group Ranks": cut, "Group size": 64, "Global rank start": 0,
               "Global rank stride": 2}
    no_stride = {**strided, "Global rank stride": -1}
    events = [launch(10, 1), kernel(ALLREDUCE_KERNEL, 100, 10, 1, **strided),
              launch(20, 2), kernel(ALLREDUCE_KERNEL, 200, 10, 2, **no_stride)]
    table, notes = one_rank(tmp_path, events)
    assert table["pg_ranks"].to_pylist() == ["0-126:2", ""]
    assert expand_ranks("0-126:2") == list(range(0, 128, 2)) and table["group_size"].to_pylist() == [64, 64]
    assert any(n.startswith("1 collective call(s) whose Process Group Ranks list is cut short") for n in notes)


def test_leave_one_out_median_against_the_plain_definition():
    from statistics import median

    from opscope.analyses.job.timing import _leave_one_out_medians

    rng = random.Random(3)
    for n in range(1, 12):
        values = [rng.randrange(0, 50) for _ in range(n)]  # ties included
        plain = [median(values[:k] + values[k + 1:]) if n > 1 else None for k in range(n)]
        assert _leave_one_out_medians(values) == plain
