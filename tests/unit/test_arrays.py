"""Arrow helpers of the analyses: group numbers (one int per row naming its group), int64 views, filter masks."""

from __future__ import annotations

import random

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from opscope.analyses.arrays import group_numbers, int64_values
from opscope.analyses.filters import EventFilter


def _groups_by_python(rows: list[tuple], keys: list[str]) -> dict[tuple, list[int]]:
    out: dict[tuple, list[int]] = {}
    for i, row in enumerate(rows):
        out.setdefault(tuple(row[k] for k in keys), []).append(i)
    return out


def _check(table: pa.Table, keys: list[str]) -> None:
    number, values_of = group_numbers(table, keys)
    assert len(number) == table.num_rows and number.null_count == 0
    rows = table.to_pylist()
    expected = _groups_by_python(rows, keys)
    numbers = number.to_pylist()
    # rows share a number exactly when their key values are equal (nulls equal to nulls)
    by_number: dict[int, list[int]] = {}
    for i, g in enumerate(numbers):
        by_number.setdefault(g, []).append(i)
    assert sorted(by_number.values()) == sorted(expected.values())
    # the numbers run 0..k-1 and name their groups' key values, as plain (not dictionary) values
    assert sorted(by_number) == list(range(len(expected)))
    values = values_of(pa.array(sorted(by_number), pa.int64()))
    for g in sorted(by_number):
        first = rows[by_number[g][0]]
        assert tuple(values[k][g].as_py() for k in keys) == tuple(first[k] for k in keys)
    for k in keys:
        assert not pa.types.is_dictionary(values[k].type)


@pytest.mark.parametrize("seed", range(4))
def test_group_numbers_one_dictionary_key_in_order_of_first_appearance(seed):
    rng = random.Random(seed)
    names = [rng.choice(["aten::mm", "aten::add", None, "aten::relu", "ü"]) for _ in range(400)]
    # two chunks with different dictionaries: unified before the codes are compared
    column = pa.chunked_array([pa.array(names[:150]).dictionary_encode(), pa.array(names[150:]).dictionary_encode()])
    table = pa.table({"name": column})
    _check(table, ["name"])
    _, values_of = group_numbers(table, ["name"])
    first_seen = list(dict.fromkeys(names))
    assert values_of(pa.array(range(len(first_seen)), pa.int64()))["name"].to_pylist() == first_seen
    # the order Arrow's group_by lists the groups of the names in (op tables list tied rows in that order)
    plain = pa.table({"name": table["name"].cast(pa.string())})
    listed = plain.group_by("name", use_threads=False).aggregate([])["name"].to_pylist()
    assert listed == first_seen


def test_group_numbers_dictionary_holding_a_value_twice():
    # a dictionary with a repeated value must not split its group: encoded by value instead
    column = pa.DictionaryArray.from_arrays(pa.array([0, 1, 2, 1, 0], pa.int32()), pa.array(["a", "b", "a"]))
    _check(pa.table({"name": column}), ["name"])
    number, _ = group_numbers(pa.table({"name": column}), ["name"])
    assert number.to_pylist()[0] == number.to_pylist()[2]


@pytest.mark.parametrize("seed", range(4))
def test_group_numbers_several_keys(seed):
    rng = random.Random(seed)
    n = 300
    table = pa.table({
        "name": pa.array([rng.choice(["a", "b", "c", None]) for _ in range(n)]).dictionary_encode(),
        "shapes": pa.array([rng.choice(["[[1]]", "[[2, 3]]", None]) for _ in range(n)]),
        "step": pa.array([rng.choice([1, 2, None]) for _ in range(n)], pa.int64()),
    })
    _check(table, ["name", "shapes", "step"])
    _check(table, ["shapes"])
    _check(table, ["step", "name"])
    # numbered in the order group_by lists the groups (op tables list tied rows in that order)
    _, values_of = group_numbers(table, ["name", "shapes"])
    listed = table.select(["name", "shapes"]).cast(pa.schema([("name", pa.string()), ("shapes", pa.string())])) \
        .group_by(["name", "shapes"], use_threads=False).aggregate([])
    got = values_of(pa.array(range(listed.num_rows), pa.int64()))
    assert got["name"].to_pylist() == listed["name"].to_pylist()
    assert got["shapes"].to_pylist() == listed["shapes"].to_pylist()


def test_group_numbers_empty_table():
    table = pa.table({"name": pa.array([], pa.string()).dictionary_encode()})
    number, values_of = group_numbers(table, ["name"])
    assert len(number) == 0
    assert values_of(pa.array([], pa.int64()))["name"].to_pylist() == []


def test_int64_values_reads_in_place_and_refuses_nulls():
    arr = pa.array([9, 1, 2, 3], pa.int64()).slice(1)
    view = int64_values(arr)
    assert list(view) == [1, 2, 3] and len(view) == 3
    assert list(int64_values(pa.chunked_array([[1], [2, 5]], pa.int64()))) == [1, 2, 5]
    assert len(int64_values(pa.array([], pa.int64()))) == 0
    with pytest.raises(ValueError):
        int64_values(pa.array([1, None], pa.int64()))


def test_event_filter_mask_matches_apply():
    events = pa.table({
        "kind": pa.array(["cpu_op", "kernel", "cpu_op", "runtime", "cpu_op"]).dictionary_encode(),
        "name": pa.array(["aten::mm", "gemm", "aten::add", "cudaLaunchKernel", None]).dictionary_encode(),
        "step": pa.array([1, 1, 2, None, 2], pa.int64()),
    })
    assert EventFilter().mask(events) is None
    filt = EventFilter(kinds=("cpu_op",), match="aten", steps=[2])
    mask = filt.mask(events)
    assert pc.fill_null(mask, False).to_pylist() == [False, False, True, False, False]
    assert events.filter(mask).to_pylist() == filt.apply(events).to_pylist()


def test_shares_of_times_beyond_float_precision():
    """Times past 2^53 ns (104 days: a hostile or broken trace) are shares like any other, not an Arrow error."""
    from opscope.analyses.arrays import shares_pct

    assert shares_pct(pa.array([2**60, 3 * 2**60], pa.int64()), 2**62).to_pylist() == [25.0, 75.0]
    assert shares_pct(pa.array([119_653_251_022_321_000], pa.int64()), 119_653_251_022_321_000).to_pylist() == [100.0]


def test_pylist_is_to_pylist():
    # dictionary columns (chunks with their own dictionaries, null codes, a null in a dictionary), plain ones, empty
    from opscope.analyses.arrays import pylist

    d1 = pa.DictionaryArray.from_arrays(pa.array([0, None, 1, 0], pa.int32()), pa.array(["a", None]))
    d2 = pa.array(["x", "y", None, "x"]).dictionary_encode()
    cases = [pa.chunked_array([d1, d2]), d2, pa.array([1, None, 3]), pa.chunked_array([], pa.int64()),
             pa.chunked_array([pa.array(["p", None]), pa.array(["q"])])]
    for values in cases:
        assert pylist(values) == values.to_pylist()
    assert pylist(pa.chunked_array([d1, d2])) == ["a", None, None, "a", "x", "y", None, "x"]


def test_median_is_statistics_median():
    # odd and even counts, repeats, negatives, chunks, one value; nulls and no values: statistics.median's own answer
    import random
    import statistics

    import pytest

    from opscope.analyses.arrays import median

    rng = random.Random(5)
    for n in [1, 2, 3, 4, 5, 10, 11, 100, 101]:
        for _ in range(20):
            values = [rng.randint(-50, 50) for _ in range(n)]
            cut = rng.randint(0, n)
            got = median(pa.chunked_array([pa.array(values[:cut], pa.int64()), pa.array(values[cut:], pa.int64())]))
            assert got == statistics.median(values) and type(got) is type(statistics.median(values))
    with pytest.raises(statistics.StatisticsError):
        median(pa.array([], pa.int64()))
    with pytest.raises(TypeError):
        median(pa.array([1, None, 3], pa.int64()))


@pytest.mark.parametrize("native", ["1", "0"])
@pytest.mark.parametrize("seed", range(4))
def test_distinct_positions_and_marks_by_hand(seed, native, monkeypatch):
    from opscope.analyses.arrays import distinct_positions, marks

    monkeypatch.setenv("OPSCOPE_NATIVE", native)  # the C loop and its Python definition
    rng = random.Random(seed)
    values = [rng.choice([None, rng.randrange(0, 50), rng.randrange(0, 5000)]) for _ in range(rng.randint(0, 3000))]
    cut = rng.randint(0, len(values))
    chunked = pa.chunked_array([pa.array(values[:cut], pa.int64()), pa.array(values[cut:], pa.int64())])
    found = distinct_positions(chunked, 5000)
    assert found.type == pa.int64() and found.to_pylist() == sorted({v for v in values if v is not None})
    n = 6003  # not a whole number of bytes
    at = [v for v in values if v is not None]
    flags = marks(n, pa.array(at, pa.int32()))
    assert flags.type == pa.bool_() and len(flags) == n
    assert [i for i, f in enumerate(flags.to_pylist()) if f] == sorted(set(at))
    for outside in (-1, n):
        with pytest.raises(ValueError, match="outside"):
            marks(n, pa.array([0, outside], pa.int64()))


def test_rows_equal_filters_and_keeps_the_table_itself_where_every_row_matches():
    from opscope.analyses.arrays import rows_equal

    table = pa.table({"device": pa.array([0, 1, None, 1], pa.int64()), "x": [10, 11, 12, 13]})
    assert rows_equal(table, "device", 1)["x"].to_pylist() == [11, 13]
    assert rows_equal(table, "device", 0)["x"].to_pylist() == [10]
    assert rows_equal(table, "device", None).num_rows == 0  # a null row equals nothing
    one_device = pa.table({"device": pa.array([1, 1], pa.int64()), "x": [1, 2]})
    assert rows_equal(one_device, "device", 1) is one_device
    assert rows_equal(one_device.slice(0, 0), "device", 1).num_rows == 0


@pytest.mark.parametrize("native", ["1", "0"])
@pytest.mark.parametrize("seed", range(3))
def test_pair_numbers_number_pairs_in_the_order_they_first_occur(seed, native, monkeypatch):
    from opscope.analyses.arrays import pair_numbers

    monkeypatch.setenv("OPSCOPE_NATIVE", native)  # the C table and Arrow's definition
    rng = random.Random(seed)
    n = rng.randint(1, 2000)
    pids = [rng.choice([None, 7, 8, 1234567]) for _ in range(n)]
    tids = [rng.choice([None, "a", "b", "c", "main"]) for _ in range(n)]
    numbers, pairs = pair_numbers(pa.array(pids, pa.int64()), pa.array(tids).dictionary_encode())
    expected = list(dict.fromkeys(zip(pids, tids)))
    assert pairs == expected
    assert numbers.type == pa.int32() and numbers.to_pylist() == [expected.index(p) for p in zip(pids, tids)]


def test_pair_numbers_with_too_many_pairs_for_a_table_gives_the_same():
    from opscope.analyses.arrays import pair_numbers

    a, b = list(range(3000)), [v * 7 % 2999 for v in range(3000)]  # 3000 x 2999 possible pairs: Arrow's encoding
    numbers, pairs = pair_numbers(pa.array(a + a[:5], pa.int64()), pa.array(b + b[:5], pa.int64()))
    assert pairs == list(zip(a, b)) and numbers.to_pylist() == list(range(3000)) + [0, 1, 2, 3, 4]


def test_name_flags_asks_once_per_distinct_name():
    from opscope.analyses.arrays import name_flags

    asked: list[str] = []

    def pick(name: str) -> bool:
        asked.append(name)
        return name.startswith("my")

    values = ["my.py(1): f", "torch/x.py(2): g", None, "my.py(1): f", "", "torch/x.py(2): g"] * 50
    column = pa.chunked_array([pa.array(values[:150]).dictionary_encode(), pa.array(values[150:]).dictionary_encode()])
    got = name_flags(column.unify_dictionaries(), pick)
    assert got.to_pylist() == [v is not None and v.startswith("my") for v in values]
    assert sorted(asked) == ["", "my.py(1): f", "torch/x.py(2): g"]  # once each, never a null
    assert name_flags(pa.array(values), pick, nulls=None).to_pylist()[2] is None
