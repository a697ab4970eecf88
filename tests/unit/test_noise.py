"""The noise helper: the Hodges-Lehmann median difference and its Mann-Whitney interval, checked against hand
computations and against enumerating every pairwise difference and every ordering of two samples."""

from __future__ import annotations

import itertools
import math
import random
import statistics
from collections import Counter

import pyarrow as pa
import pytest

from opscope.analyses import noise
from opscope.analyses.noise import interval_rank, shift, shift_columns, spread


def _u_counts(m: int, n: int) -> Counter:
    """How many of the C(m + n, m) orderings of m x's and n y's have U = u (pairs with the y above the x), counted
    one ordering at a time."""
    counts: Counter = Counter()
    for xs in itertools.combinations(range(m + n), m):
        taken = set(xs)
        counts[sum(1 for x in xs for y in range(x + 1, m + n) if y not in taken)] += 1
    return counts


def _rank_by_enumeration(m: int, n: int) -> int:
    """The largest k with P(U <= k - 1) <= 2.5%, from every ordering."""
    counts, total = _u_counts(m, n), math.comb(m + n, m)
    k, below = 0, 0
    while below + counts[k] <= 0.025 * total:
        below += counts[k]
        k += 1
    return k


def test_five_against_five_by_hand():
    """base 10..50 by 10, new 15..55 by 10: the 25 differences are 5 + 10 x (j - i): -35 once, -25 twice, -15
    three times, -5 four, 5 five, 15 four, 25 three, 35 twice, 45 once. For 5 against 5, P(U <= 2) = 4/252 and
    P(U <= 3) = 7/252 > 2.5%: k = 3, the interval is the 3rd smallest to the 3rd largest, [-25, 35], and covers
    1 - 8/252 = 96.8%; the median, the 13th, is 5."""
    found = shift([10, 20, 30, 40, 50], [15, 25, 35, 45, 55])
    assert (found.delta, found.low, found.high) == (5, -25, 35)
    assert found.coverage == pytest.approx(1 - 8 / 252)
    assert (found.base_median, found.new_median, found.n_base, found.n_new) == (30, 35, 5, 5)
    assert found.low_pct == pytest.approx(-25 / 30 * 100) and found.high_pct == pytest.approx(35 / 30 * 100)
    assert found.within_noise
    # shifted by 100 more: the interval moves with it and leaves 0
    later = shift([10, 20, 30, 40, 50], [115, 125, 135, 145, 155])
    assert (later.delta, later.low, later.high, later.within_noise) == (105, 75, 135, False)


def test_the_rank_agrees_with_every_ordering():
    for m, n in [(4, 4), (5, 5), (3, 5), (5, 7), (6, 6), (4, 9), (8, 8)]:
        k, coverage = interval_rank(m, n)
        assert k == _rank_by_enumeration(m, n), (m, n)
        below = sum(c for u, c in _u_counts(m, n).items() if u < k)
        assert coverage == pytest.approx(1 - 2 * below / math.comb(m + n, m)) and coverage >= 0.95
    assert interval_rank(3, 3) is None  # 1/20 of the orderings have U = 0: more than 2.5%
    assert interval_rank(10, 10)[0] == 24  # the tables' critical U of 23 for two sides of 10 at 5%


def test_the_normal_approximation_meets_the_exact_count():
    """Past EXACT_PAIRS the rank comes from the normal approximation: within one pair of the exact count."""
    for m, n in [(60, 60), (50, 80)]:
        assert m * n > noise.EXACT_PAIRS
        counts, total = noise._lower_tail(m, n), math.comb(m + n, m)
        k, below = 0, 0
        while below + counts[k] <= 0.025 * total:
            below += counts[k]
            k += 1
        assert abs(interval_rank(m, n)[0] - k) <= 1, (m, n)


def test_random_samples_against_all_pairwise_differences():
    rng = random.Random(7)
    for _ in range(150):
        m, n = rng.randint(5, 14), rng.randint(5, 14)
        base = [rng.randint(900, 1100) for _ in range(m)]
        new = [rng.randint(950, 1200) for _ in range(n)]
        ordered = sorted(y - x for x in base for y in new)
        k = interval_rank(m, n)[0]
        found = shift(base, new)
        assert (found.low, found.high) == (ordered[k - 1], ordered[-k])
        assert found.delta == round(statistics.median(ordered))
        assert found.base_median == statistics.median(base)


def test_large_samples_pick_the_same_order_statistics():
    rng = random.Random(3)
    base = [rng.randint(0, 10**6) for _ in range(80)]
    new = [rng.randint(0, 10**6) + 5_000 for _ in range(70)]
    ordered = sorted(y - x for x in base for y in new)
    k = interval_rank(80, 70)[0]
    found = shift(base, new)
    assert (found.low, found.high, found.delta) == (ordered[k - 1], ordered[-k], round(statistics.median(ordered)))


def test_too_few_samples_give_no_interval():
    assert noise.MIN_SAMPLES == 5
    assert shift([1, 2, 3, 4], [5, 6, 7, 8, 9]) is None
    assert shift([], [1, 2, 3, 4, 5]) is None
    # asked for with 4 a side, the interval is the whole range of the differences (k = 1)
    found = shift([1, 2, 3, 4], [11, 12, 13, 14], min_samples=4)
    assert (found.low, found.high, found.delta) == (7, 13, 10)
    assert shift([1, 2, 3], [4, 5, 6], min_samples=1) is None  # no k reaches 95%


def test_a_base_median_of_zero_has_no_relative_figure():
    found = shift([0, 0, 0, 0, 0], [5, 5, 6, 6, 7])
    assert found.low == 5 and found.low_pct is None and found.high_pct is None


def test_many_rows_at_once_match_one_at_a_time():
    rng = random.Random(11)
    for m, n in [(5, 5), (6, 9), (12, 7), (3, 8)]:
        rows = 30
        base = [[rng.randint(0, 1000) for _ in range(m)] for _ in range(rows)]
        new = [[rng.randint(0, 1300) for _ in range(n)] for _ in range(rows)]
        base[0] = [0] * m  # a row added in new: no share of a base
        table = shift_columns(pa.array([v for r in base for v in r], pa.int64()),
                              pa.array([v for r in new for v in r], pa.int64()), m, n).to_pylist()
        assert len(table) == rows
        for got, b, nw in zip(table, base, new):
            want = shift(b, nw)
            if want is None:
                assert set(got.values()) == {None}
                continue
            assert (got["delta"], got["low"], got["high"], got["base_median"]) == \
                (want.delta, want.low, want.high, want.base_median)
            expected_pct = [None if p is None else round(p, 2) for p in (want.low_pct, want.high_pct)]
            assert [got["low_pct"], got["high_pct"]] == expected_pct
    empty = shift_columns(pa.array([], pa.int64()), pa.array([], pa.int64()), 5, 5)
    assert empty.num_rows == 0 and "low_pct" in empty.column_names


def test_many_rows_in_several_chunks(monkeypatch):
    monkeypatch.setattr(noise, "_CHUNK_PAIRS", 60)  # two rows of 25 pairs a chunk
    rng = random.Random(5)
    base = [rng.randint(0, 100) for _ in range(5 * 7)]
    new = [rng.randint(0, 100) for _ in range(5 * 7)]
    table = shift_columns(pa.array(base, pa.int64()), pa.array(new, pa.int64()), 5, 5).to_pylist()
    assert [(r["low"], r["high"]) for r in table] == [
        (s.low, s.high) for s in (shift(base[i:i + 5], new[i:i + 5]) for i in range(0, 35, 5))]


def test_spread_of_one_sample():
    values = [7, 1, 10, 3, 2, 8, 5, 4, 9, 6]
    found = spread(values)
    deciles = statistics.quantiles(values, n=10, method="inclusive")
    assert (found.median, found.n) == (5.5, 10)
    assert found.p10 == pytest.approx(1.9) == pytest.approx(deciles[0])
    assert found.p90 == pytest.approx(9.1) == pytest.approx(deciles[-1])
    assert spread([42]) == noise.Spread(42, 42, 42, 1)
    assert spread([]) is None


def test_verdicts_and_speedups_of_an_interval():
    from opscope.analyses import noise

    base = [100, 110, 120, 130, 140]
    # new = base - 60: differences 10 (j - i) - 60; 5 against 5: the 3rd and 23rd of 25, -90 and -30
    faster = shift(base, [v - 60 for v in base])
    assert (faster.delta, faster.low, faster.high, faster.verdict) == (-60, -90, -30, "faster")
    assert (faster.speedup, faster.speedup_low, faster.speedup_high) == (2.0, 120 / 90, 4.0)
    assert shift(base, [v + 100 for v in base]).verdict == "slower"  # interval [70, 130]
    assert shift(base, [v + 5 for v in base]).verdict == "no difference"  # interval [-25, 35]
    assert noise.verdict(None) == "too few runs to tell" == noise.verdict(shift(base, [1, 2, 3]))
    # a lower bound that leaves no positive time: the speed-up's upper end is unbounded
    assert shift(base, [v - 125 for v in base]).speedup_high is None
