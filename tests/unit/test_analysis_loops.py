"""The analyses' C loops (``analyses/_loops.c``) against their Arrow definitions: the innermost enclosing span and
the scatter give the same arrays on random spans and queries (threads, equal starts, parents, accept flags)."""

from __future__ import annotations

import random
from array import array

import pyarrow as pa
import pytest

from opscope.analyses import arrays, intervals
from opscope.analyses.intervals import innermost_enclosing, merged_intervals, span_bounds, union_ns

pytestmark = pytest.mark.skipif(arrays.native_loops() is None, reason="opscope.analyses._loops is not built here")


def buf(values: list[int]) -> memoryview:
    """int64 values as the buffer a C loop takes."""
    return memoryview(array("q", values))


def _nested_spans(rng: random.Random, threads: int, per_thread: int) -> list[dict]:
    """Properly nested spans per thread (a tree: children inside their parent, siblings apart or one inside the
    other when they start together), in time order (start, longest first), with each span's parent position."""
    rows: list[dict] = []

    def children(thread: int, start: int, end: int, depth: int) -> None:
        t = start
        while depth < 4 and t < end and rng.random() < 0.7:
            child_end = rng.randrange(t + 1, end + 1)
            rows.append({"thread": thread, "ts": t, "end": child_end})
            children(thread, t, child_end, depth + 1)
            t = child_end + rng.choice([0, 0, 1, 3])

    for thread in range(threads):
        t = rng.randrange(0, 50)
        for _ in range(per_thread):
            end = t + rng.randrange(1, 100)
            rows.append({"thread": thread * 7 - 3, "ts": t, "end": end})
            children(thread * 7 - 3, t, end, 1)
            t = end + rng.randrange(0, 20)
    rows.sort(key=lambda r: (r["ts"], -(r["end"] - r["ts"])))
    # the parent: the latest earlier span of the same thread that holds it (the model's nesting)
    for i, r in enumerate(rows):
        r["parent"] = next((j for j in range(i - 1, -1, -1) if rows[j]["thread"] == r["thread"]
                            and rows[j]["ts"] <= r["ts"] and r["end"] <= rows[j]["end"]), None)
        r["accept"] = rng.random() < 0.7
    return rows


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("with_accept", [False, True])
def test_innermost_enclosing_c_matches_arrow(seed, with_accept, monkeypatch):
    rng = random.Random(seed)
    rows = _nested_spans(rng, rng.randint(1, 4), rng.randint(1, 30))
    spans = pa.table({k: pa.array([r[k] for r in rows], pa.bool_() if k == "accept" else pa.int64())
                      for k in ("thread", "ts", "end", "parent", "accept")})
    if not with_accept:
        spans = spans.drop_columns(["accept"])
    threads = sorted({r["thread"] for r in rows}) + [999]  # a thread without spans
    inside = [rng.choice(rows) for _ in range(150)]  # half the queries inside some span, half anywhere
    queries = pa.table({"thread": [r["thread"] for r in inside] + [rng.choice(threads) for _ in range(150)],
                        "ts": [rng.randrange(r["ts"], r["end"]) for r in inside] +
                              [rng.randrange(-5, 3000) for _ in range(150)]})
    got = innermost_enclosing(spans, queries)
    monkeypatch.setenv("OPSCOPE_NATIVE", "0")
    expected = innermost_enclosing(spans, queries)
    assert got.to_pylist() == expected.to_pylist()
    assert got.null_count < len(got)  # some queries are inside spans: the comparison is not of nulls only
    # and by hand: the innermost accepted span of the query's thread holding it
    for q, g in zip(queries.to_pylist(), got.to_pylist()):
        holding = [i for i, r in enumerate(rows) if r["thread"] == q["thread"] and r["ts"] <= q["ts"] < r["end"]
                   and (r["accept"] or not with_accept)]
        assert g == (max(holding, key=lambda i: (rows[i]["ts"], i)) if holding else None)


@pytest.mark.parametrize("seed", range(8))
def test_innermost_enclosing_members_among_other_rows(seed, monkeypatch):
    """Spans marked by ``member`` among rows that are no spans (out of time order, some without times), as the
    memory attribution passes every event with the op layer's mask: the answer is the same row as from the
    members alone, given as a row of the whole table."""
    rng = random.Random(seed)
    rows = _nested_spans(rng, rng.randint(1, 3), rng.randint(1, 20))
    whole: list[dict] = []
    row_of: dict[int, int] = {}
    for i, r in enumerate(rows):  # other rows slipped in between, on the same threads, out of order
        while rng.random() < 0.5:
            whole.append({"thread": r["thread"], "ts": rng.choice([None, rng.randrange(0, 5000)]), "end": None,
                          "parent": None, "accept": True, "member": False})
        row_of[i] = len(whole)
        whole.append({**r, "member": True})
    for w in whole:  # parents as rows of the whole table
        if w["member"] and w["parent"] is not None:
            w["parent"] = row_of[w["parent"]]
    spans = pa.table({k: pa.array([w[k] for w in whole], pa.bool_() if k in ("accept", "member") else pa.int64())
                      for k in ("thread", "ts", "end", "parent", "accept", "member")})
    members = pa.table({k: pa.array([r[k] for r in rows], pa.bool_() if k == "accept" else pa.int64())
                        for k in ("thread", "ts", "end", "parent", "accept")})
    inside = [rng.choice(rows) for _ in range(100)]
    queries = pa.table({"thread": [r["thread"] for r in inside],
                        "ts": [rng.randrange(r["ts"], r["end"]) for r in inside]})
    got = innermost_enclosing(spans, queries).to_pylist()
    expected = [None if i is None else row_of[i] for i in innermost_enclosing(members, queries).to_pylist()]
    assert got == expected and any(g is not None for g in got)
    monkeypatch.setenv("OPSCOPE_NATIVE", "0")
    assert innermost_enclosing(spans, queries).to_pylist() == expected


def test_innermost_enclosing_out_of_order_spans_take_the_arrow_walk(monkeypatch):
    spans = pa.table({"thread": [0, 0], "ts": [10, 0], "end": [20, 30], "parent": [None, None]})
    queries = pa.table({"thread": [0, 0], "ts": [15, 25]})
    got = innermost_enclosing(spans, queries).to_pylist()
    monkeypatch.setenv("OPSCOPE_NATIVE", "0")
    assert got == innermost_enclosing(spans, queries).to_pylist()


@pytest.mark.parametrize("seed", range(6))
def test_scatter_c_matches_arrow(seed, monkeypatch):
    rng = random.Random(seed)
    n = rng.randint(1, 200)
    positions = rng.sample(range(n), rng.randint(1, n))
    values = pa.array([rng.random() if rng.random() < 0.9 else None for _ in positions])
    got = arrays.scatter(n, pa.array(positions, pa.int64()), values)
    by_hand = [None] * n
    for p, v in zip(positions, values.to_pylist()):
        by_hand[p] = v
    assert got.to_pylist() == by_hand
    # repeated and out-of-range positions: the Arrow definition (first occurrence; ignored) in both
    odd = pa.array(positions + [positions[0], n + 5], pa.int64())
    odd_values = pa.array(values.to_pylist() + [1.5, 2.5])
    got_odd = arrays.scatter(n, odd, odd_values).to_pylist()
    monkeypatch.setenv("OPSCOPE_NATIVE", "0")
    assert got_odd == arrays.scatter(n, odd, odd_values).to_pylist() == by_hand


def _idle_covers(rng: random.Random, spacing: int, short_share: float) -> dict[int, tuple[pa.Array, pa.Array]]:
    """Random covers of idle.py's causes: disjoint gaps (``spacing``: the most between two), each short class a random
    part of them (``short_share`` of the gaps each), overlapping host spans for sync, input and outstanding work."""
    from opscope.analyses import idle

    def spans(k: int, disjoint: bool) -> tuple[pa.Array, pa.Array]:
        out, t = [], rng.randrange(0, 20)
        for _ in range(k):
            s = t if disjoint else rng.randrange(0, 300)
            e = s + rng.randrange(0, 40)
            out.append((s, e))
            t = e + rng.randrange(0, spacing)
        out.sort()
        return pa.array([s for s, _ in out], pa.int64()), pa.array([e for _, e in out], pa.int64())

    gaps = spans(rng.randint(1, 12), True)
    covers = {idle._GAP: gaps}
    for code in (idle._SHORT_LATE, idle._SHORT_QUEUED):
        pick = pa.array([rng.random() < short_share for _ in range(len(gaps[0]))])
        covers[code] = (gaps[0].filter(pick), gaps[1].filter(pick))
    for code in (idle._SYNC, idle._INPUT, idle._OUTSTANDING):
        covers[code] = spans(rng.randint(0, 10), False)
    return covers


def _causes_by_hand(covers: dict[int, tuple[pa.Array, pa.Array]], launches_known: bool) -> list[tuple[int, int]]:
    """Nanosecond by nanosecond over 0-400: (instant, the index in IDLE_CAUSES of the first cause that holds) for
    every instant inside a gap."""
    from opscope.analyses import idle

    order = [(idle._SYNC, 0), (idle._INPUT, 1), (idle._SHORT_LATE, 2), (idle._SHORT_QUEUED, 3)]
    plain = {code: list(zip(s.to_pylist(), e.to_pylist())) for code, (s, e) in covers.items()}

    def inside(code: int, t: int) -> bool:
        return any(a <= t < b for a, b in plain[code])

    out = []
    for t in range(400):
        if not inside(idle._GAP, t):
            continue
        cause = next((i for code, i in order if inside(code, t)), None)
        if cause is None:
            cause = 4 if launches_known and not inside(idle._OUTSTANDING, t) else 5
        out.append((t, cause))
    return out


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("launches_known", [True, False])
def test_idle_attribution_c_matches_arrow_and_brute_force(seed, launches_known, monkeypatch):
    from opscope.analyses import idle

    covers = _idle_covers(random.Random(seed), 30, 0.3)  # the short classes apart or not, as _gaps makes them or not
    got = idle._attribute(covers, launches_known)
    # the C overlap path answers where the short classes are apart, as _gaps makes them; else the sweep does
    late, queued = ({(s, e) for s, e in zip(*(a.to_pylist() for a in covers[code])) if e > s}
                    for code in (idle._SHORT_LATE, idle._SHORT_QUEUED))
    measured = idle._attribute_by_measure(covers, launches_known)
    assert (measured is not None) == (arrays.native_loops() is not None and not late & queued)
    monkeypatch.setenv("OPSCOPE_NATIVE", "0")
    assert idle._attribute_by_measure(covers, launches_known) is None
    swept = idle._attribute(covers, launches_known)  # the sweep (the definition): causes with no time too
    assert got == {k: v for k, v in swept.items() if v}
    # by hand, nanosecond by nanosecond: the first cause that holds inside each gap
    expected: dict[int, int] = {}
    for _, cause in _causes_by_hand(covers, launches_known):
        expected[cause] = expected.get(cause, 0) + 1
    assert {k: v for k, v in got.items() if v} == expected


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("launches_known", [True, False])
def test_idle_stretches_c_match_the_sweep_and_brute_force(seed, launches_known, monkeypatch):
    from opscope.analyses import idle

    covers = _idle_covers(random.Random(seed), 3, 0.4)  # gaps that touch, or nearly; short classes that overlap
    got = idle._stretches_in_c(covers, launches_known)
    assert (got is None) == (arrays.native_loops() is None)
    swept = idle._stretches(covers, launches_known)  # the definition
    if got is not None:
        assert list(got) == list(swept)  # the causes in the order each first holds
        for cause in swept:
            assert [a.to_pylist() for a in got[cause]] == [a.to_pylist() for a in swept[cause]], cause
    # by hand, nanosecond by nanosecond: each cause's instants inside the gaps, as maximal runs
    expected: dict[str, list[list[int]]] = {}
    for t, cause in _causes_by_hand(covers, launches_known):
        runs = expected.setdefault(idle.IDLE_CAUSES[cause], [])
        if runs and runs[-1][1] == t:
            runs[-1][1] = t + 1
        else:
            runs.append([t, t + 1])
    assert {c: [list(p) for p in zip(*(a.to_pylist() for a in se))] for c, se in swept.items()} == expected


def test_idle_stretches_by_hand():
    loops = arrays.native_loops()
    if loops is None:
        pytest.skip("the C loops are not built")
    none = (buf([]), buf([]))
    # gaps [0,10) [10,20) [30,40); sync [5,12); nothing outstanding over [35,40)
    args = (buf([0, 10, 30]), buf([10, 20, 40]), buf([5]), buf([12]), *none, *none, *none, buf([0, 30]), buf([20, 35]))
    assert loops.idle_stretches(*args, True, None, None, None) == 5
    cause, start, end = bytearray(5), array("q", [0] * 5), array("q", [0] * 5)
    assert loops.idle_stretches(*args, True, cause, start, end) == 5
    # [0,5) other (outstanding), [5,12) sync (across the gaps that touch), [12,20) other, [30,35) other, [35,40) host
    assert list(cause) == [5, 0, 5, 5, 4]
    assert list(start) == [0, 5, 12, 30, 35] and list(end) == [5, 12, 20, 35, 40]
    assert loops.idle_stretches(buf([0, 5]), buf([10, 20]), *[b for _ in range(5) for b in none], False, None, None,
                                None) is None  # overlapping gaps: not a list the merge reads
    with pytest.raises(ValueError):
        loops.idle_stretches(*args, True, bytearray(2), array("q", [0] * 2), array("q", [0] * 2))


def test_overlap_ns_by_hand_and_declines():
    loops = arrays.native_loops()
    if loops is None:
        pytest.skip("the C loops are not built")

    # [0,10) [20,30) against [5,25) [28,40): 5 + 5 + 2
    assert loops.overlap_ns(buf([0, 20]), buf([10, 30]), buf([5, 28]), buf([25, 40])) == 12
    assert loops.overlap_ns(buf([0, 10]), buf([10, 20]), buf([10]), buf([10])) == 0  # touching, empty
    assert loops.overlap_ns(buf([]), buf([]), buf([1]), buf([5])) == 0
    assert loops.overlap_ns(buf([0, 5]), buf([10, 20]), buf([0]), buf([30])) is None  # overlapping list
    assert loops.overlap_ns(buf([5]), buf([1]), buf([0]), buf([30])) is None  # ends before it starts
    with pytest.raises(ValueError):
        loops.overlap_ns(buf([0, 1]), buf([5]), buf([0]), buf([30]))


@pytest.mark.parametrize("seed", range(12))
def test_stream_levels_c_matches_sweep_and_brute_force(seed, monkeypatch):
    from opscope.analyses.gpu import _stream_levels_in_c, stream_levels

    rng = random.Random(seed)
    rows = []  # (device, stream, start, end): each stream's intervals disjoint and in time order
    stream = 0
    for device in sorted(rng.sample(range(-1, 6), rng.randint(1, 4))):
        for _ in range(rng.randint(1, 5)):
            t = rng.randrange(0, 30)
            for _ in range(rng.randint(0, 8)):
                end = t + rng.randrange(0, 25)
                rows.append((device, stream, t, end))
                t = end + rng.randrange(0, 20)  # 0: the next one touches
            stream += 1
    sb = pa.table({name: pa.array([r[i] for r in rows], pa.int64())
                   for i, name in enumerate(("device", "group", "start", "end"))})
    got = stream_levels(sb)
    if arrays.native_loops() is not None and sb.num_rows:
        assert _stream_levels_in_c(sb.filter(pa.compute.greater(sb["end"], sb["start"]))) == got
    monkeypatch.setenv("OPSCOPE_NATIVE", "0")
    assert stream_levels(sb) == got
    expected = {}  # nanosecond by nanosecond
    for device in {r[0] for r in rows if r[3] > r[2]}:
        levels = [sum(1 for r in rows if r[0] == device and r[2] <= t < r[3]) for t in range(400)]
        expected[device] = (sum(1 for v in levels if v >= 2), max(levels))
    assert got == expected


def test_stream_levels_declines_rows_out_of_order():
    loops = arrays.native_loops()
    if loops is None:
        pytest.skip("the C loops are not built")

    assert loops.stream_levels(buf([0, 0]), buf([0, 0]), buf([0, 5]), buf([10, 20])) is None  # overlap in a stream
    assert loops.stream_levels(buf([1, 0]), buf([0, 1]), buf([0, 0]), buf([5, 5])) is None  # devices out of order
    assert loops.stream_levels(buf([0, 0]), buf([1, 0]), buf([0, 0]), buf([5, 5])) is None  # streams out of order
    assert loops.stream_levels(buf([0, 0]), buf([0, 1]), buf([0, 2]), buf([5, 4])) == [(0, 2, 2)]


@pytest.mark.parametrize("seed", range(10))
def test_allocation_lifetimes_c_matches_arrow_and_by_hand(seed, monkeypatch):
    from opscope.analyses.memory import _lifetimes

    rng = random.Random(seed)
    n = rng.randint(1, 300)
    devices = [rng.choice(["GPU 0", "GPU 1", "CPU"]) for _ in range(n)]
    addrs = [rng.randrange(0, 12) * 256 for _ in range(n)]  # few addresses: reuse, reallocations, orphan frees
    nbytes = [rng.choice([512, 1024, -512, -1024, 0]) for _ in range(n)]
    args = (pa.array(devices, pa.string()), pa.array(addrs, pa.int64()), pa.array(nbytes, pa.int64()))
    got_problems: dict[str, int] = {}
    got = _lifetimes(*args, got_problems).to_pylist()
    monkeypatch.setenv("OPSCOPE_NATIVE", "0")
    arrow_problems: dict[str, int] = {}
    assert _lifetimes(*args, arrow_problems).to_pylist() == got
    assert arrow_problems == got_problems
    # by hand: the next record of the same device and address ends an allocation unless it is an empty one
    expected: list = [None] * n
    reallocated = orphans = 0
    last: dict = {}
    for i in range(n):
        key = (devices[i], addrs[i])
        prev = last.get(key)
        if prev is not None and nbytes[prev] > 0 and nbytes[i] != 0:
            expected[prev] = i
            reallocated += nbytes[i] > 0
        if nbytes[i] < 0 and (prev is None or nbytes[prev] <= 0):
            orphans += 1
        last[key] = i
    assert got == expected
    assert sorted(got_problems.values()) == sorted([reallocated, orphans])


def _merged_both(monkeypatch, group, start, end, presorted):
    """merged_intervals with the C pass and with the Arrow definition (``OPSCOPE_NATIVE=0``)."""
    args = [pa.array(v, pa.int64()) for v in (group, start, end)]
    taken = arrays.native_loops().merge_intervals(*(array("q", v) for v in (group, start, end)), presorted)
    in_c = merged_intervals(*args, presorted=presorted)
    monkeypatch.setenv("OPSCOPE_NATIVE", "0")
    in_arrow = merged_intervals(*args, presorted=presorted)
    monkeypatch.delenv("OPSCOPE_NATIVE")
    return in_c, in_arrow, taken is not None


def test_merge_intervals_by_hand():
    loops = arrays.native_loops()
    # group 5: [0, 4) and [4, 6) touch (one interval), [7, 9) apart; group 2: [1, 3) holds [2, 3)
    found = loops.merge_intervals(*(array("q", v) for v in ([5, 2, 2, 5, 5], [0, 1, 2, 4, 7], [4, 3, 3, 6, 9])),
                                  False)
    assert [list(array("q", b)) for b in found] == [[2, 5, 5], [1, 0, 7], [3, 6, 9], [1, 0, 4]]
    # runs (presorted): group 5 again after group 2 is a run of its own
    found = loops.merge_intervals(*(array("q", v) for v in ([5, 2, 5], [0, 1, 2], [4, 3, 5])), True)
    assert [list(array("q", b)) for b in found] == [[5, 2, 5], [0, 1, 2], [4, 3, 5], [0, 1, 2]]
    # a group's start going back, or an end before its start: declined (the Arrow definition runs)
    assert loops.merge_intervals(array("q", [1, 1]), array("q", [5, 4]), array("q", [6, 6]), False) is None
    assert loops.merge_intervals(array("q", [1]), array("q", [5]), array("q", [4]), False) is None


@pytest.mark.parametrize("seed", range(16))
def test_merged_intervals_c_matches_arrow(seed, monkeypatch):
    rng = random.Random(seed)
    n = rng.randint(1, 400)
    groups = [rng.choice([-7, 0, 3, 1 << 40, 12]) for _ in range(rng.randint(1, 5))]
    rows = []
    t = rng.randrange(-100, 100)
    for _ in range(n):
        t += rng.choice([0, 0, 1, 2, 5, 30])
        rows.append((rng.choice(groups), t, t + rng.choice([0, 1, 3, 10, 60])))
    if seed % 4 == 1:  # each group in time order, the groups interleaved out of time order
        rows.sort(key=lambda r: (hash((r[0], seed)) % 7, r[1]))
    group, start, end = (list(c) for c in zip(*rows))
    in_c, in_arrow, taken = _merged_both(monkeypatch, group, start, end, presorted=False)
    assert taken
    assert in_c.schema == in_arrow.schema
    assert in_c.to_pydict() == in_arrow.to_pydict()
    # grouped rows (presorted): runs of groups, a group may come back in a later run
    runs = sorted(rows, key=lambda r: (r[0], r[1]))
    first_group = [r for r in runs if r[0] == runs[0][0]]
    others = runs[len(first_group):]
    if seed % 2 and others:  # the first group's rows in two runs, in time order each, the others between them
        cut = rng.randrange(len(first_group) + 1)
        runs = first_group[cut:] + others + first_group[:cut]
    group, start, end = (list(c) for c in zip(*runs)) if runs else ([], [], [])
    in_c, in_arrow, taken = _merged_both(monkeypatch, group, start, end, presorted=True)
    assert taken
    assert in_c.schema == in_arrow.schema
    assert in_c.to_pydict() == in_arrow.to_pydict()


def test_merged_intervals_declined_rows_still_right(monkeypatch):
    """Where the C pass declines (a group not in time order), the Arrow definition answers: the sorted union."""
    got, _, taken = _merged_both(monkeypatch, [1, 1, 1], [10, 0, 3], [12, 5, 4], presorted=False)
    assert not taken
    assert got.to_pydict() == {"group": [1, 1], "start": [0, 10], "end": [5, 12], "first": [1, 0]}


@pytest.mark.parametrize("seed", range(12))
def test_union_and_bounds_over_a_mask_match_arrow(seed, monkeypatch):
    rng = random.Random(seed)
    n = rng.randint(0, 300)
    t, starts = rng.randrange(-50, 50), []
    for _ in range(n):
        t += rng.choice([0, 0, 1, 4, 20])
        starts.append(t)
    durs = [rng.choice([0, 1, 5, 30, 200, -3 if seed % 3 == 0 else 2]) for _ in range(n)]
    where = [rng.random() < 0.6 for _ in range(n)] if seed % 2 else None
    if seed % 4 == 3:  # not in time order: the C pass declines, the Arrow definition sorts
        rng.shuffle(starts)
    s, d = pa.array(starts, pa.int64()), pa.array(durs, pa.int64())
    w = None if where is None else pa.array(where)
    got = union_ns(s, d, w), span_bounds(s, d, w)
    assert (intervals._span_union_in_c(s, d, w) is None) == (seed % 4 == 3 and n > 1 and starts != sorted(starts))
    monkeypatch.setenv("OPSCOPE_NATIVE", "0")
    assert got == (union_ns(s, d, w), span_bounds(s, d, w))
    # by hand: the covered time is the count of whole nanoseconds inside some selected span
    chosen = [(a, a + b) for a, b, k in zip(starts, durs, where or [True] * n) if k]
    assert got[0] == len({x for a, e in chosen for x in range(a, e)})
    assert got[1] == ((min(a for a, _ in chosen), max(e for _, e in chosen)) if chosen else None)


@pytest.mark.parametrize("seed", range(8))
def test_climb_c_matches_arrow(seed, monkeypatch):
    """The innermost op, the outermost op and the innermost annotation above each launch: the C walk against the
    Arrow walk (one column per step) on random forests, with launches that are ops, annotations or nothing; the
    parents' nulls read from their validity bitmap, also where the column is a slice of a longer one."""
    from opscope.analyses import links

    rng = random.Random(seed)
    n = rng.randint(1, 400)
    parent = [None if i == 0 or rng.random() < 0.2 else rng.randrange(0, i) for i in range(n)]
    kind = [rng.choice(["cpu_op", "user_annotation", "runtime", "python"]) for _ in range(n)]
    name = [rng.choice(["aten::mm", "ProfilerStep#3", "block", "cudaLaunchKernel"]) for _ in range(n)]
    skip = seed % 3 * 5  # the parents a slice from bit 5 or 10 of a longer column's bitmap
    parents = pa.array([0] * skip + parent, pa.int64()).slice(skip)
    events = pa.table({"kind": pa.array(kind).dictionary_encode(), "name": pa.array(name).dictionary_encode(),
                       "parent": parents})
    launch = pa.array([rng.choice([None, rng.randrange(0, n)]) for _ in range(200)], pa.int64())
    got = [a.to_pylist() for a in links.climb(events, launch)]
    monkeypatch.setenv("OPSCOPE_NATIVE", "0")
    assert got == [a.to_pylist() for a in links.climb(events, launch)]
    # by hand for the first launches
    for q, start in enumerate(launch.to_pylist()[:50]):
        chain, c = [], start
        while c is not None:
            chain.append(c)
            c = parent[c]
        ops = [r for r in chain if kind[r] == "cpu_op"]
        notes = [r for r in chain if kind[r] == "user_annotation" and not name[r].startswith("ProfilerStep#")]
        assert (got[0][q], got[1][q], got[2][q]) == (ops[0] if ops else None, ops[-1] if ops else None,
                                                     notes[0] if notes else None)


@pytest.mark.parametrize("seed", range(6))
def test_thread_keys_c_matches_arrow(seed, monkeypatch):
    """Thread keys from dictionary columns of several chunks with nulls, and values missing from the vocabulary:
    the one-pass C keys against Arrow's."""
    rng = random.Random(seed)
    names = ["1", "2", "3", "", "x/y"]

    def column(chunks: int) -> pa.ChunkedArray:
        return pa.chunked_array([pa.array([rng.choice(names + [None]) for _ in range(rng.randint(0, 60))],
                                          pa.string()).dictionary_encode() for _ in range(chunks)])

    chunks = rng.randint(1, 3)
    pid, tid = column(chunks), column(chunks)
    tid = pa.chunked_array([pa.array([rng.choice(names + [None]) for _ in range(len(c))], pa.string())
                            .dictionary_encode() for c in pid.chunks])  # chunked as pid
    pid_vocab = pa.array(["2", "1", "x/y"])  # "3" and "" are not in it
    tid_vocab = pa.array(["", "3", "1", "2"])
    got = arrays.thread_keys(pid, tid, pid_vocab, tid_vocab)
    assert arrays._thread_keys_in_c(pid, tid, pid_vocab, tid_vocab) is not None
    monkeypatch.setenv("OPSCOPE_NATIVE", "0")
    expected = arrays.thread_keys(pid, tid, pid_vocab, tid_vocab)
    assert pa.chunked_array([got]).to_pylist() == pa.chunked_array([expected]).to_pylist()
    # by hand
    p_codes = {v: i for i, v in enumerate(pid_vocab.to_pylist())}
    t_codes = {v: i for i, v in enumerate(tid_vocab.to_pylist())}
    assert pa.chunked_array([got]).to_pylist() == [
        p_codes.get(p, -1) * (1 << 32) + t_codes.get(t, -1) for p, t in zip(pid.to_pylist(), tid.to_pylist())]


@pytest.mark.parametrize("seed", range(6))
def test_innermost_enclosing_with_durations_instead_of_ends(seed, monkeypatch):
    """Spans given by ``dur`` (the end is ts + dur, no column of ends): the same rows as with ``end``."""
    rng = random.Random(seed)
    rows = _nested_spans(rng, rng.randint(1, 3), rng.randint(1, 25))
    with_end = pa.table({k: pa.array([r[k] for r in rows], pa.bool_() if k == "accept" else pa.int64())
                         for k in ("thread", "ts", "end", "parent", "accept")})
    with_dur = with_end.set_column(2, "dur", pa.array([r["end"] - r["ts"] for r in rows], pa.int64()))
    inside = [rng.choice(rows) for _ in range(120)]
    queries = pa.table({"thread": [r["thread"] for r in inside],
                        "ts": [rng.randrange(r["ts"], r["end"]) for r in inside]})
    expected = innermost_enclosing(with_end, queries).to_pylist()
    assert innermost_enclosing(with_dur, queries).to_pylist() == expected
    assert any(e is not None for e in expected)
    monkeypatch.setenv("OPSCOPE_NATIVE", "0")
    assert innermost_enclosing(with_dur, queries).to_pylist() == expected
