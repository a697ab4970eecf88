"""The values a reproducer's inputs are made of, and how each is written as Python source.

A case's inputs are parsed from the trace into these types only (never kept as trace text), so that writing them
into a script is ``repr`` of ints, floats, bools and tuples: no text from the trace reaches generated code.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: torch dtype attribute names a tensor input can have (what ``torch.<name>`` is in the generated script).
DTYPES = ("float32", "float64", "float16", "bfloat16", "complex64", "complex128", "int64", "int32", "int16",
          "int8", "uint8", "uint16", "uint32", "uint64", "bool", "float8_e4m3fn", "float8_e5m2",
          "float8_e4m3fnuz", "float8_e5m2fnuz")

#: c10::ScalarType numbers (how a ``ScalarType`` argument such as ``dtype=`` is recorded) to dtype names.
SCALAR_TYPES = {0: "uint8", 1: "int8", 2: "int16", 3: "int32", 4: "int64", 5: "float16", 6: "float32",
                7: "float64", 9: "complex64", 10: "complex128", 11: "bool", 15: "bfloat16", 23: "float8_e5m2",
                24: "float8_e4m3fn", 25: "float8_e5m2fnuz", 26: "float8_e4m3fnuz", 27: "uint16", 28: "uint32",
                29: "uint64"}
#: c10::MemoryFormat and c10::Layout numbers to the torch attribute names.
MEMORY_FORMATS = {0: "contiguous_format", 1: "preserve_format", 2: "channels_last", 3: "channels_last_3d"}
LAYOUTS = {0: "strided", 1: "sparse_coo"}


def contiguous_strides(size) -> tuple[int, ...]:
    """The strides of a row-major (contiguous) tensor of ``size`` (a size-0 dimension counts as 1, as torch does)."""
    strides, step = [], 1
    for n in reversed(size):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


@dataclass(frozen=True)
class T:
    """A tensor input: its size, strides and dtype as recorded; ``high`` bounds an integer tensor's values
    (exclusive) where they index something (embedding rows, a gathered dimension); None: small values."""

    size: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: str
    high: int | None = None

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"unknown dtype {self.dtype!r}")
        if len(self.size) != len(self.stride):
            raise ValueError("size and stride differ in length")
        for n in (*self.size, *self.stride):
            if type(n) is not int or n < 0:
                raise ValueError("sizes and strides are non-negative ints")
        if self.high is not None and (type(self.high) is not int or self.high < 1):
            raise ValueError("high is a positive int")

    def storage_elements(self) -> int:
        """Elements the storage needs so that every element of the view lies in it."""
        if any(n == 0 for n in self.size):
            return 0
        return 1 + sum((n - 1) * s for n, s in zip(self.size, self.stride))

    def source(self) -> str:
        high = f", high={self.high!r}" if self.high is not None else ""
        return f"T({tuple(self.size)!r}, {tuple(self.stride)!r}, {self.dtype!r}{high})"

    def to_json(self) -> dict:
        return {"size": list(self.size), "stride": list(self.stride), "dtype": self.dtype, "high": self.high}


@dataclass(frozen=True)
class TorchAttr:
    """``torch.<name>``: a dtype, memory format or layout argument (the name is from a fixed table)."""

    name: str

    def __post_init__(self) -> None:
        allowed = set(DTYPES) | set(MEMORY_FORMATS.values()) | set(LAYOUTS.values())
        if self.name not in allowed:
            raise ValueError(f"not a torch dtype, memory format or layout: {self.name!r}")

    def source(self) -> str:
        return f"torch.{self.name}"

    def to_json(self) -> str:
        return f"torch.{self.name}"


#: What an argument can be.
Value = None | bool | int | float | str | T | TorchAttr | tuple


def source(value: Value) -> str:
    """Python source for ``value``; only the types above are accepted (anything else is a bug: ValueError)."""
    if value is None or isinstance(value, bool):
        return repr(value)
    if isinstance(value, int):
        return repr(int(value))
    if isinstance(value, float):
        if math.isnan(value):
            return 'float("nan")'
        if math.isinf(value):
            return 'float("inf")' if value > 0 else 'float("-inf")'
        return repr(float(value))
    if isinstance(value, str):
        return repr(str(value))  # repr of a str is a quoted literal whatever it holds
    if isinstance(value, T | TorchAttr):
        return value.source()
    if isinstance(value, tuple | list):
        inner = ", ".join(source(v) for v in value)
        return f"[{inner}]"
    raise ValueError(f"cannot write a {type(value).__name__} into a reproducer")


def to_json(value: Value):
    """The JSON form of a value (for cases.json)."""
    if isinstance(value, T | TorchAttr):
        return value.to_json()
    if isinstance(value, tuple | list):
        return [to_json(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    return value
