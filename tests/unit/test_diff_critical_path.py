"""diff's critical-path table: each side's mean time per step on the critical path, by category."""

from __future__ import annotations

from support.replay import one_step

from opscope.diff.critical_path import critical_path_delta


def test_a_longer_kernel_shows_as_device_compute_grown_on_the_path():
    # base: gemm 69 us on the path of a 100 us step; new: gemm 100 us, the step 131 us, all else the same
    table = {r["category"]: r for r in critical_path_delta(one_step(), one_step(kernel_us=100)).to_pylist()}
    assert (table["device compute"]["base_ns"], table["device compute"]["new_ns"]) == (69_000, 100_000)
    assert table["device compute"]["delta_ns"] == 31_000
    assert all(r["delta_ns"] == 0 for c, r in table.items() if c != "device compute")
    assert table["device compute"]["base_share"] == 0.69 and round(table["device compute"]["new_share"], 3) == 0.763
