"""Kernel launch details (``kernels --details``): the launch fields of each kernel's args, per (name, grid, block)."""

from __future__ import annotations

import json

import pytest
from support import make_trace, row

from opscope.analyses.filters import EventFilter
from opscope.analyses.kernel_launch import FIELDS, kernel_launch_table, recorded
from opscope.analyses.reports import kernels_report
from opscope.errors import UsageError


def kineto_args(grid, block, registers, shared, occupancy, blocks, warps, **extra) -> dict:
    return {"queued": 0, "device": 0, "context": 1, "stream": 7, "correlation": 1, "registers per thread": registers,
            "shared memory": shared, "blocks per SM": blocks, "warps per SM": warps, "grid": grid, "block": block,
            "est. achieved occupancy %": occupancy, **extra}


def _trace():
    # gemm launched with two configurations (3 + 1 launches), elementwise with one; a memcpy without launch args
    launches = [
        ("gemm", 0, 10, kineto_args([40, 2, 1], [128, 1, 1], 88, 33792, 4, 0.606061, 2.424242)),
        ("gemm", 20, 12, kineto_args([40, 2, 1], [128, 1, 1], 88, 33792, 4, 0.606061, 2.424242)),
        ("gemm", 40, 14, kineto_args([40, 2, 1], [128, 1, 1], 88, 33792, 4, 0.606061, 2.424242)),
        ("gemm", 60, 100, kineto_args([16, 15, 1], [256, 1, 1], 230, 147456, 0, 1.818182, 14.545455)),
        ("elementwise", 200, 5, kineto_args([564, 1, 1], [128, 1, 1], 32, 0, 27, 4.272727, 17.09091,
                                            **{"Tensor Cores used": False})),
        ("Memcpy HtoD (Pageable -> Device)", 300, 7, {"device": 0, "stream": 7, "bytes": 64}),
    ]
    events = [row("memcpy" if n.startswith("Memcpy") else "kernel", n, ts, dur, pid=0, tid=7, device=0, stream=7)
              for n, ts, dur, _ in launches]
    return make_trace(events, args=[json.dumps(a) for *_, a in launches])


def _rows(table):
    return {(r["name"], tuple(r["grid"] or ()), tuple(r["block"] or ())): r for r in table.to_pylist()}


def test_values_are_the_args():
    rows = _rows(kernel_launch_table(_trace(), names="raw"))
    small = rows[("gemm", (40, 2, 1), (128, 1, 1))]
    assert (small["calls"], small["total_ns"], small["avg_ns"]) == (3, 36_000, 12_000)
    assert (small["registers_per_thread"], small["shared_memory_bytes"], small["occupancy_pct"]) == (88, 33792, 4.0)
    assert (small["blocks_per_sm"], small["warps_per_sm"]) == (0.606, 2.424)
    assert small["tensor_cores"] is None and small["theoretical_occupancy_pct"] is None
    big = rows[("gemm", (16, 15, 1), (256, 1, 1))]
    assert (big["calls"], big["registers_per_thread"], big["shared_memory_bytes"], big["occupancy_pct"]) == \
        (1, 230, 147456, 0.0)
    assert (big["blocks_per_sm"], big["warps_per_sm"]) == (1.818, 14.545)
    ew = rows[("elementwise", (564, 1, 1), (128, 1, 1))]
    assert (ew["registers_per_thread"], ew["shared_memory_bytes"], ew["occupancy_pct"], ew["tensor_cores"]) == \
        (32, 0, 27.0, "false")
    copy = rows[("Memcpy HtoD (Pageable -> Device)", (), ())]
    assert copy["grid"] is None and copy["registers_per_thread"] is None and copy["calls"] == 1
    assert sum(r["pct"] for r in rows.values()) == pytest.approx(100.0, abs=0.05)


def test_one_name_with_two_configurations_is_two_rows_sorted_by_time():
    table = kernel_launch_table(_trace(), names="raw")
    assert table["name"].to_pylist()[:2] == ["gemm", "gemm"]
    assert table["total_ns"].to_pylist() == sorted(table["total_ns"].to_pylist(), reverse=True)


def test_launches_that_differ_within_a_row_show_the_largest_and_say_so():
    args = [kineto_args([1, 1, 1], [32, 1, 1], 16, 1024, 5, 0.1, 0.1),
            kineto_args([1, 1, 1], [32, 1, 1], 16, 4096, 5, 0.1, 0.1)]
    trace = make_trace([row("kernel", "k", 0, 1, device=0, stream=7), row("kernel", "k", 5, 1, device=0, stream=7)],
                       args=[json.dumps(a) for a in args])
    (r,) = kernel_launch_table(trace).to_pylist()
    assert (r["calls"], r["shared_memory_bytes"], r["shared_memory_varies"], r["registers_varies"]) == \
        (2, 4096, True, False)


def test_a_trace_without_launch_args_has_empty_columns_and_says_so():
    # ROCm writes grid and block only; one kernel here has no args at all, one has args that are not JSON
    trace = make_trace([row("kernel", "a", 0, 5, device=0, stream=0), row("kernel", "b", 10, 5, device=0, stream=0),
                        row("kernel", "c", 20, 5, device=0, stream=0)],
                       args=[json.dumps({"grid": [141, 1, 1], "block": [512, 1, 1], "kind": "Dispatch Kernel"}),
                             None, "{not json"])
    table = kernel_launch_table(trace, names="raw")
    rows = {r["name"]: r for r in table.to_pylist()}
    assert rows["a"]["grid"] == [141, 1, 1] and rows["a"]["block"] == [512, 1, 1]
    assert rows["b"]["grid"] is None and rows["c"]["grid"] is None
    have, lacks = recorded(table)
    assert have == ["grid", "block"] and lacks == [c for c in FIELDS if c not in have]
    report = kernels_report(trace, EventFilter(), False, "total_ns", "short", None, details=True)
    (note,) = report.sections[0].notes
    assert note.startswith("the trace records grid, block; not registers_per_thread")


@pytest.mark.parametrize("bad", [[1, 2], ["a", 1, 1], [1.5, 1, 1], [True, 1, 1], "128", None])
def test_malformed_dimensions_are_empty(bad):
    trace = make_trace([row("kernel", "k", 0, 1, device=0, stream=7)],
                       args=[json.dumps({"grid": bad, "block": [1, 1, 1], "registers per thread": "many"})])
    (r,) = kernel_launch_table(trace).to_pylist()
    assert r["grid"] is None and r["block"] == [1, 1, 1] and r["registers_per_thread"] is None


def test_filters_and_the_by_op_conflict():
    trace = _trace()
    table = kernel_launch_table(trace, EventFilter(match="^gemm$"), names="raw")
    assert set(table["name"].to_pylist()) == {"gemm"} and table.num_rows == 2
    with pytest.raises(UsageError, match="--details and --by-op"):
        kernels_report(trace, EventFilter(), True, "total_ns", "short", None, details=True)


def test_values_out_of_range_are_empty_and_the_rest_stays():
    text = ('{"grid": [1, 1, 1], "block": [99999999999999999999999, 1, 1], "registers per thread": 40, '
            '"shared memory": 1e400, "warps per SM": 123456789012345678901234567890123456789, '
            '"est. achieved occupancy %": 50}')
    trace = make_trace([row("kernel", "k", 0, 1, device=0, stream=7)], args=[text])
    (r,) = kernel_launch_table(trace).to_pylist()
    assert (r["grid"], r["block"], r["registers_per_thread"], r["shared_memory_bytes"], r["occupancy_pct"]) == \
        ([1, 1, 1], None, 40, None, 50.0)
    assert r["warps_per_sm"] is None or r["warps_per_sm"] > 1e37


def test_a_text_that_would_split_the_batch_leaves_the_others_in_place():
    # the texts are decoded as one JSON array: a text holding "},{" would read as two launches and move every
    # later kernel's values by one; an empty text is no launch
    trace = make_trace([row("kernel", n, ts, 1, device=0, stream=7) for n, ts in (("a", 0), ("b", 10), ("c", 20),
                                                                                 ("d", 30))],
                       args=['{"grid": [1, 1, 1]},{"grid": [9, 9, 9]}', json.dumps({"grid": [2, 1, 1]}), "",
                             json.dumps({"grid": [4, 1, 1]})])
    rows = {r["name"]: r["grid"] for r in kernel_launch_table(trace, names="raw").to_pylist()}
    assert rows == {"a": None, "b": [2, 1, 1], "c": None, "d": [4, 1, 1]}
