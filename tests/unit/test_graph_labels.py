"""A graph's per-node labels (its lanes, its categories): kept as int8 codes where the names are few enough, the same
names read either way."""

from __future__ import annotations

from array import array

import pyarrow as pa
import pytest

from opscope.analyses.depgraph import Labels, frozen_view


def _codes(values: list[int]) -> memoryview:
    return frozen_view(array("i", values), "i")


def test_few_names_are_kept_as_int8_codes_with_the_same_labels():
    names = ["1/1", "1/2", "dev 0 stream 7"]
    codes = [2, 0, 1, 1, 0, 2, 2]
    labels = Labels.compact(names, _codes(codes))
    assert labels.codes.format == "b"
    assert list(labels) == [names[c] for c in codes]
    assert labels[5] == "dev 0 stream 7" and labels[1:3] == ["1/1", "1/2"]
    assert labels.arrow().type == pa.int8() and labels.arrow().to_pylist() == codes


@pytest.mark.parametrize("count", [127, 128, 300])
def test_codes_stay_int32_only_where_int8_cannot_hold_them(count):
    names = [f"lane {i}" for i in range(count)]
    codes = [count - 1, 0, count // 2]
    labels = Labels.compact(names, _codes(codes))
    assert labels.codes.format == ("b" if count <= 127 else "i")
    assert list(labels) == [f"lane {c}" for c in codes]
    assert labels.arrow().to_pylist() == codes
