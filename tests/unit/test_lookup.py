"""``model.lookup.index_in`` is Arrow's ``index_in`` for int64 columns: the same positions from the C table (nulls,
repeated values, slices, chunks), and Arrow's own answer for other types."""

from __future__ import annotations

import random

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from opscope.model import lookup


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("native", ["1", "0"])
def test_index_in_matches_arrow(seed, native, monkeypatch):
    monkeypatch.setenv("OPSCOPE_NATIVE", native)
    rng = random.Random(seed)
    for _ in range(40):
        values = [rng.choice([None, *range(-4, 12)]) for _ in range(rng.randint(0, 30))]
        keys = [rng.choice([None, *range(-6, 15)]) for _ in range(rng.randint(0, 50))]
        key_array = pa.array([0] + keys, pa.int64()).slice(1)  # an offset into its buffers
        value_array = pa.chunked_array([pa.array(values[:5], pa.int64()), pa.array(values[5:], pa.int64())])
        got = lookup.index_in(key_array, value_array)
        assert got.type == pa.int32()
        assert got.to_pylist() == pc.index_in(key_array, value_set=value_array.combine_chunks()).to_pylist()
        # and by hand: the first position of the key (a null key: of the first null)
        assert got.to_pylist() == [values.index(k) if k in values else None for k in keys]


@pytest.mark.parametrize("native", ["1", "0"])
def test_index_in_of_other_integer_types_matches_arrow(native, monkeypatch):
    # row positions as true_positions gives them (uint64) against int64 rows, int32 against uint32; a uint64 beyond
    # int64 (no int64 of it) is Arrow's to look up
    monkeypatch.setenv("OPSCOPE_NATIVE", native)
    cases = [(pa.array([3, 0, 9, None], pa.uint64()), pa.array([9, 3, 3], pa.int64())),
             (pa.array([1, -2, 7], pa.int32()), pa.array([7, 1], pa.uint32())),
             (pa.array([1 << 63, 5], pa.uint64()), pa.array([5, 1 << 63], pa.uint64()))]
    for keys, values in cases:
        assert lookup.index_in(keys, values).to_pylist() == pc.index_in(keys, value_set=values).to_pylist()
    assert lookup.index_in(*cases[0]).to_pylist() == [1, None, 0, None]  # by hand
    assert lookup.index_in(*cases[2]).to_pylist() == [1, 0]


def test_index_in_of_other_types_is_arrows():
    keys, values = pa.array(["a", "b", None]), pa.array(["b", None, "b"])
    assert lookup.index_in(keys, values).to_pylist() == [None, 0, 1]
    assert lookup.index_in(pa.array([], pa.int64()), pa.array([], pa.int64())).to_pylist() == []


@pytest.mark.parametrize("seed", range(4))
def test_index_in_of_sparse_ids_matches_arrow(seed):
    # ids spread far wider than their count (no direct table: the hash), with nulls and repeats
    rng = random.Random(seed)
    pool = [rng.randrange(-(1 << 62), 1 << 62) for _ in range(20)]
    for _ in range(40):
        values = [rng.choice([None, *pool]) for _ in range(rng.randint(0, 30))]
        keys = [rng.choice([None, 7, *pool]) for _ in range(rng.randint(0, 50))]
        got = lookup.index_in(pa.array(keys, pa.int64()), pa.array(values, pa.int64()))
        assert got.to_pylist() == [values.index(k) if k in values else None for k in keys]


@pytest.mark.parametrize("seed", range(6))
def test_positions_by_inverse_permutation_are_index_in(seed):
    # derive._positions (the args rows' new numbers after the sort): the first position of each key, by inverting the
    # values where they are distinct, small and non-negative, else by index_in -- the same answer either way
    from opscope.model.derive import _positions

    rng = random.Random(seed)
    for _ in range(60):
        n = rng.randint(0, 40)
        values = rng.sample(range(rng.choice([n, 2 * n + 3, 5000])), n)  # distinct, some ids dropped, some far apart
        if n and rng.random() < 0.2:
            values[rng.randrange(n)] = values[0]  # a repeat: index_in's first position
        if n and rng.random() < 0.1:
            values[rng.randrange(n)] = -1
        top = max(values, default=0)
        keys = sorted(rng.sample(range(top + 2), rng.randint(0, top + 2)))  # absent ids and one past the end
        if rng.random() < 0.3:
            keys = list(range(top + 1))  # every id: the inverse itself
        got = _positions(pa.array(keys, pa.int64()), pa.array(values, pa.int64()))
        assert got.to_pylist() == [values.index(k) if k in values else None for k in keys]
