"""opscope perf's rate and the spread of the runs it comes from (a rate from the middle half hides a busy host)."""

from __future__ import annotations

from opscope.analyses import noise
from opscope.analyses.perf_report import PerfNumbers, migraphx_text, perf_table


def numbers(total: float, mean: float, median: float, p90: float, batch: int = 1) -> PerfNumbers:
    return PerfNumbers(nodes=[], op_types=[], batch=batch, runs=100, total_ms=total, min_ms=0.9 * total,
                       max_ms=4 * p90, mean_ms=mean, median_ms=median, percentiles_ms=(p90, p90, p90),
                       node_total_ms=total, overhead_ms=None, overhead_calc_ms=0.0)


def test_steady_runs_give_no_warning():
    assert numbers(total=1.0, mean=1.03, median=1.0, p90=1.1).spread_note is None


def test_a_heavy_tail_is_said_with_the_rate_from_the_mean():
    # the middle half of the runs took 0.787 ms (1,271/s), the mean of all of them is 8x that: a busy host
    p = numbers(total=0.787, mean=6.3, median=0.79, p90=20.0, batch=1)
    note = p.spread_note
    assert note is not None and "spread widely" in note
    assert f"{1000 / 0.787:.6g}/s" in note and f"{1000 / 6.3:.6g}/s" in note  # both rates, each said
    # the 90th percentile alone is enough: a tail the mean does not show yet
    assert numbers(total=1.0, mean=1.2, median=1.0, p90=1.6).spread_note is not None


def test_each_node_and_the_runs_have_median_p10_p90_and_runs():
    # runs of 1, 2, 3, 4, 5 ms: median 3; p10 at position 0.4: 1.4; p90 at position 3.6: 4.6
    node = {"index": 0, "node": "conv", "op": "Conv", "provider": "CPU", "inputs": "", "output": "", "runs": 5,
            "time_ms": 3.0, "pct": 100, "spread": noise.spread([5.0, 1.0, 4.0, 2.0, 3.0])}
    p = numbers(total=3.0, mean=3.0, median=3.0, p90=4.0)
    p.nodes = [node]
    p.runs, p.spread = 5, noise.spread([1.0, 2.0, 3.0, 4.0, 5.0])
    rows = {(r["section"], r["name"]): r for r in perf_table(p).to_pylist()}
    conv = rows[("node", "conv")]
    assert (conv["count"], conv["median"]) == (5, 3.0)
    assert round(conv["p10"], 9) == 1.4 and round(conv["p90"], 9) == 4.6
    total = rows[("total", "total_time")]
    assert (total["count"], total["median"], round(total["p10"], 9), round(total["p90"], 9)) == (5, 3.0, 1.4, 4.6)
    assert rows[("total", "rate")]["median"] is None  # a figure that is not a time of the runs has no spread
    assert "Spread: median 3ms, p10-p90 1.4ms-4.6ms over 5 runs" in migraphx_text(p).splitlines()
