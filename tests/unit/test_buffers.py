"""Arrow arrays as one buffer: one_array and true_positions (a crash of older pyarrow kept out of the process)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from opscope.model.buffers import one_array, true_positions

MASKS = {
    "no chunks": pa.chunked_array([], pa.bool_()),  # pyarrow < 26.0.1: indices_nonzero of this is a SIGSEGV
    "one empty chunk": pa.chunked_array([pa.array([], pa.bool_())]),
    "two chunks": pa.chunked_array([pa.array([True, False, None]), pa.array([False, True])]),
    "an array": pa.array([False, True, True, None]),
}
#: the true values' positions, counted by hand (a null is not true)
EXPECTED = {"no chunks": [], "one empty chunk": [], "two chunks": [0, 4], "an array": [1, 2]}


@pytest.mark.parametrize("name", MASKS)
def test_true_positions_of_every_shape_of_mask(name):
    got = true_positions(MASKS[name])
    assert isinstance(got, pa.Array) and got.type == pa.uint64()
    assert got.to_pylist() == EXPECTED[name]


def test_one_array_keeps_one_chunk_and_makes_an_empty_array_of_none():
    chunk = pa.array([1, 2], pa.int32())
    assert one_array(pa.chunked_array([chunk])).to_pylist() == [1, 2]
    empty = one_array(pa.chunked_array([], pa.int32()))
    assert isinstance(empty, pa.Array) and empty.type == pa.int32() and len(empty) == 0


def test_true_positions_in_c_is_arrows_indices_nonzero(monkeypatch):
    """The C loop (where built) against Arrow's kernel, on masks with nulls, offsets inside a byte and whole bytes of
    false; and the Arrow path itself with the C parts off."""
    import random

    import pyarrow.compute as pc

    rng = random.Random(7)
    for n in (1, 7, 8, 9, 64, 65, 1000, 20_003):
        for offset in (0, 1, 3, 8, 13):
            values = [rng.choice([True, False, False, False, None]) for _ in range(n + offset)]
            for mask in (pa.array(values, pa.bool_()).slice(offset),
                         pa.array([bool(v) for v in values], pa.bool_()).slice(offset)):
                expected = pc.indices_nonzero(mask)  # noqa: TID251  the reference
                assert true_positions(mask).equals(expected)
                monkeypatch.setenv("OPSCOPE_NATIVE", "0")
                assert true_positions(mask).equals(expected)
                monkeypatch.delenv("OPSCOPE_NATIVE")
