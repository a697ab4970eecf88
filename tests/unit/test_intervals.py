"""Interval unions: the grouped form agrees with the plain one group by group, and both with brute force."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from opscope.analyses.intervals import union_by_group, union_ns


def _brute_force(spans: list[tuple[int, int]]) -> int:
    covered: set[int] = set()
    for s, d in spans:
        covered.update(range(s, s + d))
    return len(covered)


@pytest.mark.parametrize("seed", range(5))
def test_union_by_group_matches_per_group_union(seed):
    rng = random.Random(seed)
    rows = [(rng.choice([1, 2, 7, None]), rng.randrange(0, 500), rng.randrange(0, 60)) for _ in range(300)]
    groups = pa.chunked_array([[g for g, _, _ in rows]], pa.int64())
    starts = pa.chunked_array([[s for _, s, _ in rows]], pa.int64())
    durs = pa.chunked_array([[d for _, _, d in rows]], pa.int64())
    got = union_by_group(starts, durs, groups)
    for g in {g for g, _, _ in rows if g is not None}:
        spans = [(s, d) for k, s, d in rows if k == g]
        expected = _brute_force(spans)
        assert got[g] == expected
        assert union_ns(pa.array([s for s, _ in spans], pa.int64()), pa.array([d for _, d in spans], pa.int64())) \
            == expected
    assert None not in got


def test_union_by_group_hand_example():
    # group 1: [0,10) and [5,20) -> 20; group 2: [100,110) and [200,201) -> 11
    got = union_by_group(pa.chunked_array([[0, 5, 100, 200]]), pa.chunked_array([[10, 15, 10, 1]]),
                         pa.chunked_array([[1, 1, 2, 2]]))
    assert got == {1: 20, 2: 11}


@pytest.mark.parametrize("seed", range(4))
def test_union_by_group_on_time_ordered_rows_matches_brute_force(seed):
    # starts in time order: merged_intervals then sorts by group alone (stable), which must give the same unions
    rng = random.Random(100 + seed)
    rows = sorted((rng.randrange(0, 400), rng.randrange(0, 50), rng.choice([3, 1, 2])) for _ in range(250))
    got = union_by_group(pa.chunked_array([[s for s, _, _ in rows]], pa.int64()),
                         pa.chunked_array([[d for _, d, _ in rows]], pa.int64()),
                         pa.chunked_array([[g for _, _, g in rows]], pa.int64()))
    for g in (1, 2, 3):
        assert got.get(g, 0) == _brute_force([(s, d) for s, d, k in rows if k == g])


@pytest.mark.parametrize("seed", range(6))
def test_covered_within_arrays_and_lists_agree_with_brute_force(seed):
    from opscope.analyses.intervals import covered_within

    rng = random.Random(seed)
    points = sorted(rng.sample(range(1000), 2 * rng.randint(0, 25)))
    starts, ends = points[0::2], points[1::2]
    spans = [tuple(sorted(rng.sample(range(-20, 1020), 2))) for _ in range(12)] + [(5, 5), (9, 3)]
    brute = [sum(max(0, min(hi, e) - max(lo, s)) for s, e in zip(starts, ends)) if hi > lo else 0
             for lo, hi in spans]
    assert covered_within(starts, ends, spans) == brute
    # Arrow arrays (read in place), including a slice with an offset into its buffer
    padded_s = pa.array([-5] + starts, pa.int64()).slice(1)
    padded_e = pa.array([-1] + ends, pa.int64()).slice(1)
    assert covered_within(padded_s, padded_e, spans) == brute


@pytest.mark.parametrize("seed", range(6))
def test_covered_spans_agrees_with_brute_force_in_any_query_order(seed):
    # the C loop searches from the last query's answer: queries in time order, reversed and shuffled, spans that
    # touch, queries before the first and after the last interval, on boundaries
    from opscope.analyses.intervals import covered_spans

    rng = random.Random(50 + seed)
    points = sorted(rng.sample(range(2000), 2 * rng.randint(1, 200)))
    starts, ends = points[0::2], points[1::2]
    ends[0] = starts[1] if len(starts) > 1 else ends[0]  # two intervals that touch
    queries = [tuple(sorted(rng.sample(range(-50, 2050), 2))) for _ in range(300)]
    queries += [(s, e) for s, e in zip(starts, ends)] + [(-10, -5), (3000, 3100), (ends[-1], ends[-1] + 7)]
    for order in ("time", "reversed", "shuffled"):
        if order == "time":
            queries.sort()
        elif order == "reversed":
            queries.reverse()
        else:
            rng.shuffle(queries)
        brute = [sum(max(0, min(hi, e) - max(lo, s)) for s, e in zip(starts, ends)) for lo, hi in queries]
        got = covered_spans(pa.array(starts, pa.int64()), pa.array(ends, pa.int64()),
                            pa.array([lo for lo, _ in queries], pa.int64()),
                            pa.array([hi for _, hi in queries], pa.int64()))
        assert got.to_pylist() == brute, order


@pytest.mark.parametrize("native", [True, False])
@pytest.mark.parametrize("seed", range(5))
def test_covered_keys_keeps_the_keys_of_covered_intervals_with_their_coverage(seed, native, monkeypatch):
    # by brute force: every query's coverage, then only the ones above 0 with their keys, in the queries' order;
    # the C loop (native) and the definition (covered_spans and a filter) give the same
    from opscope.analyses import intervals
    from opscope.analyses.intervals import covered_keys

    if not native:
        monkeypatch.setattr(intervals, "native_loops", lambda: None)
    elif intervals.native_loops() is None:
        pytest.skip("the C loops are not built")
    rng = random.Random(80 + seed)
    points = sorted(rng.sample(range(3000), 2 * rng.randint(1, 150)))
    starts, ends = points[0::2], points[1::2]
    queries = [tuple(sorted(rng.sample(range(-50, 3050), 2))) for _ in range(400)] + [(7, 7), (9, 4)]
    rng.shuffle(queries)
    keys = rng.sample(range(10**9), len(queries))
    brute = [(k, sum(max(0, min(hi, e) - max(lo, s)) for s, e in zip(starts, ends))) for k, (lo, hi) in
             zip(keys, queries)]
    expected = [(k, ns) for k, ns in brute if ns > 0]
    assert expected and len(expected) < len(queries)  # some covered, some not: the filter is exercised
    got_keys, got_ns = covered_keys(pa.array(starts, pa.int64()), pa.array(ends, pa.int64()),
                                    pa.array([lo for lo, _ in queries], pa.int64()),
                                    pa.array([hi for _, hi in queries], pa.int64()), pa.array(keys, pa.int32()))
    assert got_keys.type == got_ns.type == pa.int64()
    assert list(zip(got_keys.to_pylist(), got_ns.to_pylist())) == expected


def test_covered_keys_by_hand_and_spans_out_of_order():
    from opscope.analyses.intervals import covered_keys

    # spans [0,10) and [20,30); queries [5,25) covers 5 + 5, [10,20) nothing, [28,40) 2
    args = [pa.array(v, pa.int64()) for v in ([0, 20], [10, 30], [5, 10, 28], [25, 20, 40], [100, 200, 300])]
    k, ns = covered_keys(*args)
    assert (k.to_pylist(), ns.to_pylist()) == ([100, 300], [10, 2])
    # spans that overlap (outside the contract): the C loop declines and the definition's answer is covered_spans'
    # (by hand from its prefix sums: [5,25) 20, [10,20) 10, [28,40) 2), never an error
    args[0], args[1] = pa.array([0, 5], pa.int64()), pa.array([10, 30], pa.int64())
    k, ns = covered_keys(*args)
    assert (k.to_pylist(), ns.to_pylist()) == ([100, 200, 300], [20, 10, 2])
