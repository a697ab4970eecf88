"""Run-to-run noise: how far apart two samples of timings are, with a confidence interval, and how one sample
spreads.

**The difference of two samples** (:func:`shift`) is the Hodges-Lehmann estimate: the median of all
``len(base) x len(new)`` pairwise differences ``new[j] - base[i]``, a median difference that one slow step does
not move. Its 95% confidence interval is the distribution-free one that inverts the Mann-Whitney test: with the
pairwise differences in order ``D(1) <= ... <= D(mn)``, the interval is ``[D(k), D(mn + 1 - k)]``, where ``k`` is
the largest count with ``P(U <= k - 1) <= 2.5%`` for the Mann-Whitney statistic ``U`` of two samples of these
sizes drawn from one distribution. That probability is exact (``U``'s distribution counted, :func:`_lower_tail`)
while ``m x n <= EXACT_PAIRS``, and from the normal approximation with a continuity correction beyond. The
interval assumes only that the steps of a run are independent draws and that the runs differ by a shift; it
needs no seed, no resampling and no distribution, and it holds at least 95% (the exact coverage of small
samples, ``1 - 2 P(U <= k - 1)``, is a little above it: 96.8% for 5 against 5).

Why not the difference of the two medians with a bootstrap interval: the bootstrap's percentiles of a median jump
between a handful of values on small samples (a run records 3 to 20 steps), its coverage there is below what it
says, and it needs a seed to be repeatable. Hodges-Lehmann is the estimate that goes with the rank test, and
both are exact on small samples.

**Too few samples.** :data:`MIN_SAMPLES` (5) per side: with 4 against 4 the interval exists only as the whole range
of the pairwise differences (``k = 1``: one outlying step on either side moves it), from 5 on it leaves out the
extreme pairs (``k = 3`` of 25). Fewer than 5 on either side gives no interval.

**The spread of one sample** (:func:`spread`): its median, 10th and 90th percentiles (linear interpolation between
order statistics, as ``statistics.quantiles(method="inclusive")``) and its size.

**The verdict** (:attr:`Shift.verdict`): ``faster`` when the whole interval lies below 0, ``slower`` when it lies
above, ``no difference`` when it holds 0; without an interval, ``too few runs to tell``. repro's variants,
tune-threads and record's overhead check say it in these words (diff's tables mark an interval that holds 0
"within noise"). A speed-up is the base's median over the base's median plus the difference; its interval puts the
interval's bounds in the difference's place.

Times are integer nanoseconds; estimates and bounds are rounded to integers (half to even), relative figures are
in % of the base sample's median (to 2 decimals in the columns of :func:`shift_columns`).
"""

from __future__ import annotations

import math
import statistics
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import pyarrow as pa
import pyarrow.compute as pc

#: The confidence of every interval.
CONFIDENCE = 0.95
#: Samples each side needs before an interval is given (see the module's docstring).
MIN_SAMPLES = 5
#: ``U``'s distribution is counted exactly up to this many pairs; beyond it the normal approximation, which is then
#: within a fraction of a pair of the exact bound.
EXACT_PAIRS = 2_500
#: How the difference and its interval are computed, as the output names it.
METHOD = "Hodges-Lehmann median difference, 95% CI from the Mann-Whitney U distribution"
#: Pairwise differences held at once when intervals of many rows are computed together (:func:`shift_columns`).
_CHUNK_PAIRS = 2_000_000


@dataclass(frozen=True)
class Shift:
    """How much ``new`` takes over ``base``: the median difference (``delta``), the bounds of its interval
    (``low``, ``high``), all in the samples' unit, and each sample's median (the relative figures are of the
    base's)."""

    delta: int
    low: int
    high: int
    base_median: float
    new_median: float
    n_base: int
    n_new: int
    #: the interval's exact coverage (at least :data:`CONFIDENCE`)
    coverage: float

    @property
    def delta_pct(self) -> float | None:
        return relative_pct(self.delta, self.base_median)

    @property
    def low_pct(self) -> float | None:
        return relative_pct(self.low, self.base_median)

    @property
    def high_pct(self) -> float | None:
        return relative_pct(self.high, self.base_median)

    @property
    def within_noise(self) -> bool:
        """The interval holds 0: the samples do not tell the runs apart."""
        return self.low <= 0 <= self.high

    @property
    def verdict(self) -> str:
        """:data:`FASTER` when the whole interval is below 0 (``new`` takes less time), :data:`SLOWER` when it is
        above, else :data:`NO_DIFFERENCE`."""
        return FASTER if self.high < 0 else SLOWER if self.low > 0 else NO_DIFFERENCE

    @property
    def speedup(self) -> float | None:
        """How many times faster ``new`` runs: the base's median over the base's median plus the median difference
        (None when that is not positive)."""
        return _times(self.base_median, self.delta)

    @property
    def speedup_low(self) -> float | None:
        """The speed-up at the interval's upper bound (the slowest ``new`` the interval allows)."""
        return _times(self.base_median, self.high)

    @property
    def speedup_high(self) -> float | None:
        """The speed-up at the interval's lower bound (None when that bound leaves no positive time: unbounded)."""
        return _times(self.base_median, self.low)


#: The three verdicts of an interval (:attr:`Shift.verdict`), in the words every command shows.
FASTER, SLOWER, NO_DIFFERENCE = "faster", "slower", "no difference"
#: What a command shows instead of a verdict where a side has too few samples for an interval.
TOO_FEW = "too few runs to tell"


def _times(base: float, delta: float) -> float | None:
    return base / (base + delta) if base > 0 and base + delta > 0 else None


def verdict(s: Shift | None) -> str:
    """:attr:`Shift.verdict`, or :data:`TOO_FEW` where there is no interval."""
    return TOO_FEW if s is None else s.verdict


@dataclass(frozen=True)
class Spread:
    """One sample of timings: its median, 10th and 90th percentiles, and its size."""

    median: float
    p10: float
    p90: float
    n: int


def relative_pct(value: float, base: float) -> float | None:
    """``value`` in % of ``base``; None when ``base`` is 0."""
    return 100.0 * value / base if base else None


def spread(values: Sequence[float]) -> Spread | None:
    """The median, p10 and p90 of ``values`` (None for no values)."""
    ordered = sorted(values)
    if not ordered:
        return None
    return Spread(statistics.median(ordered), quantile(ordered, 0.1), quantile(ordered, 0.9), len(ordered))


def quantile(ordered: Sequence[float], q: float) -> float:
    """The ``q`` quantile of values in ascending order, interpolated linearly between the two order statistics
    around position ``q x (n - 1)``."""
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def shift(base: Sequence[int], new: Sequence[int], min_samples: int = MIN_SAMPLES) -> Shift | None:
    """The median difference ``new - base`` and its 95% interval (the module's docstring says how); None when a side
    has fewer than ``min_samples`` values or the sizes allow no 95% interval. Values are integers (nanoseconds)."""
    xs, ys = sorted(int(v) for v in base), sorted(int(v) for v in new)
    m, n = len(xs), len(ys)
    if min(m, n) < max(1, min_samples):
        return None
    bound = interval_rank(m, n)
    if bound is None:
        return None
    k, coverage = bound
    pairs = m * n
    delta = _median_of(lambda r: _kth_difference(xs, ys, r), pairs)
    return Shift(delta, _kth_difference(xs, ys, k), _kth_difference(xs, ys, pairs + 1 - k),
                 statistics.median(xs), statistics.median(ys), m, n, coverage)


def _median_of(kth, count: int) -> int:
    """The median of ``count`` ordered values given the ``r``-th smallest (1-based) by ``kth``, rounded half to
    even."""
    if count % 2:
        return kth(count // 2 + 1)
    return round((kth(count // 2) + kth(count // 2 + 1)) / 2)


def _kth_difference(xs: list[int], ys: list[int], k: int) -> int:
    """The ``k``-th smallest (1-based) of ``y - x`` over all pairs, for ascending integer lists: the smallest ``d``
    with at least ``k`` differences ``<= d``, found by bisection on ``d`` (each count is a binary search per ``y``:
    no list of all pairs)."""
    m = len(xs)

    def at_most(d: int) -> int:  # pairs with y - x <= d, i.e. x >= y - d
        return sum(m - bisect_left(xs, y - d) for y in ys)

    lo, hi = ys[0] - xs[-1], ys[-1] - xs[0]
    while lo < hi:
        mid = (lo + hi) // 2
        if at_most(mid) >= k:
            hi = mid
        else:
            lo = mid + 1
    return lo


@lru_cache(maxsize=256)
def interval_rank(m: int, n: int, confidence: float = CONFIDENCE) -> tuple[int, float] | None:
    """``(k, coverage)``: the interval of the median difference of samples of ``m`` and ``n`` values is
    ``[D(k), D(mn + 1 - k)]`` of their ordered pairwise differences; None when no ``k`` reaches ``confidence``."""
    if m < 1 or n < 1:
        return None
    tail = (1 - confidence) / 2
    if m * n <= EXACT_PAIRS:
        counts, total = _lower_tail(m, n), math.comb(m + n, m)
        k, below = 0, 0  # below: arrangements with U <= k - 1
        for count in counts:
            if (below + count) / total > tail:
                break
            below += count
            k += 1
        return (k, 1 - 2 * below / total) if k else None
    mean, sd = m * n / 2, math.sqrt(m * n * (m + n + 1) / 12)
    z = statistics.NormalDist().inv_cdf(1 - tail)
    k = math.floor(mean + 0.5 - z * sd)  # the largest k with P(U <= k - 1) <= tail, continuity corrected
    if k < 1:
        return None
    return k, 1 - 2 * statistics.NormalDist(mean, sd).cdf(k - 0.5)


def _lower_tail(m: int, n: int) -> list[int]:
    """How many of the ``C(m + n, m)`` orderings of two samples have ``U = 0, 1, ..., floor(mn / 2)``: the
    coefficients of the Gaussian binomial ``prod_{i=1..s} (1 - q^(l + i)) / (1 - q^i)`` (``s``, ``l``: the smaller
    and larger size), truncated past the middle."""
    s, big = min(m, n), max(m, n)
    top = m * n // 2
    poly = [1] + [0] * top
    for i in range(1, s + 1):
        a = big + i
        for u in range(top, a - 1, -1):  # times (1 - q^a)
            poly[u] -= poly[u - a]
        for u in range(i, top + 1):  # divided by (1 - q^i): a running sum with stride i
            poly[u] += poly[u - i]
    return poly


def shift_columns(base: pa.Array, new: pa.Array, m: int, n: int) -> pa.Table:
    """:func:`shift` of many pairs of samples at once, all of sizes ``m`` and ``n``: ``base`` holds row ``r``'s
    ``m`` values at ``r x m ... r x m + m - 1``, ``new`` its ``n`` values likewise. One row per pair: ``delta``,
    ``low``, ``high`` (int64), ``base_median`` (float64), ``low_pct`` and ``high_pct`` (float64, null where the base
    median is 0); all null when the sizes give no interval (fewer than :data:`MIN_SAMPLES` a side). The pairwise
    differences are made, ordered and picked by Arrow, a bounded number of rows at a time."""
    rows = len(base) // m if m else len(new) // n if n else 0
    bound = interval_rank(m, n) if min(m, n) >= MIN_SAMPLES else None
    if bound is None or rows == 0:
        nulls = pa.nulls(rows, pa.int64())
        return pa.table({"delta": nulls, "low": nulls, "high": nulls, "base_median": pa.nulls(rows, pa.float64()),
                         "low_pct": pa.nulls(rows, pa.float64()), "high_pct": pa.nulls(rows, pa.float64())})
    k = bound[0]
    per_chunk = max(1, _CHUNK_PAIRS // (m * n))
    parts = [_shift_chunk(base.slice(r * m, min(per_chunk, rows - r) * m), new.slice(r * n, min(per_chunk,
                                                                                                rows - r) * n), m, n, k)
             for r in range(0, rows, per_chunk)]
    table = pa.concat_tables(parts)
    medians = table["base_median"]
    pct = {name: pc.if_else(pc.equal(medians, 0.0), pa.scalar(None, pa.float64()),
                            pc.round(pc.divide(pc.multiply(pc.cast(table[name], pa.float64()), 100.0), medians), 2))
           for name in ("low", "high")}
    return table.append_column("low_pct", pct["low"]).append_column("high_pct", pct["high"])


def _shift_chunk(base: pa.Array, new: pa.Array, m: int, n: int, k: int) -> pa.Table:
    from opscope.analyses.arrays import arange

    pairs = m * n
    rows = len(base) // m
    index = arange(rows * pairs)
    row = pc.divide(index, pairs)  # integer division on integers
    i = pc.divide(pc.subtract(index, pc.multiply(row, pairs)), n)
    j = pc.subtract(pc.subtract(index, pc.multiply(row, pairs)), pc.multiply(i, n))
    base, new = pc.cast(base, pa.int64()), pc.cast(new, pa.int64())
    diff = pc.subtract(pc.take(new, pc.add(pc.multiply(row, n), j)), pc.take(base, pc.add(pc.multiply(row, m), i)))
    ordered = pc.take(diff, pc.sort_indices(pa.table({"r": row, "d": diff}), [("r", "ascending"),
                                                                              ("d", "ascending")]))
    starts = pc.multiply(arange(rows), pairs)

    def kth(r: int) -> pa.Array:  # each row's r-th smallest difference (1-based)
        return pc.take(ordered, pc.add(starts, r - 1))

    mid = kth(pairs // 2 + 1)
    if pairs % 2 == 0:
        mid = pc.round(pc.divide(pc.add(pc.cast(kth(pairs // 2), pa.float64()), pc.cast(mid, pa.float64())), 2.0),
                       round_mode="half_to_even")
    sorted_base = pc.take(base, pc.sort_indices(pa.table({"r": pc.divide(arange(rows * m), m), "v": base}),
                                                [("r", "ascending"), ("v", "ascending")]))
    first = pc.multiply(arange(rows), m)
    upper = pc.cast(pc.take(sorted_base, pc.add(first, m // 2)), pa.float64())
    lower = pc.cast(pc.take(sorted_base, pc.add(first, (m - 1) // 2)), pa.float64())
    return pa.table({"delta": pc.cast(mid, pa.int64()), "low": kth(k), "high": kth(pairs + 1 - k),
                     "base_median": pc.divide(pc.add(lower, upper), 2.0)})
