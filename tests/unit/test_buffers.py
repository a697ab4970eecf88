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
