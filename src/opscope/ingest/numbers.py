"""Untrusted numbers to the model's int64: one conversion that every reader uses.

A trace's numbers are whatever its writer (or a hostile file) put there: JSON numbers up to 1e308, NaN and Infinity
tokens, text where a number goes, protobuf int64 fields at 2^63-1 that overflow once two are added. Every reader
turns them into int64 through here, so that one rule holds for every format:

- a value that is not a number (text that does not parse, a list, a bool) or is not finite gives ``None``;
- a value beyond int64 gives ``None`` (refused: a time at the end of the int64 range places nothing), or with
  ``saturate=True`` the nearest int64 (a count or a size that is only "very large");
- a fraction is rounded half to even, as Python's ``round`` and Decimal's default do.

What was refused or saturated is counted in the :class:`Tally` of the read in progress (:func:`counting`, which
``ingest.open_trace`` holds around every reader) and said as one warning line. The Chrome JSON reader (and the
readers built on it: ONNX Runtime, rocprof v1) converts through here on its Python path, but its C scanner applies
the same rule without it, so it reads :func:`uncounted`: its own per-field warnings (times dropped, ids not
integers, NaN/Infinity) say the same on both paths.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

import pyarrow as pa

INT64_MAX = (1 << 63) - 1
INT64_MIN = -(1 << 63)
_INF = float("inf")
#: Floats below this in magnitude round to an int64 (the largest double below 2^63 is 2^63 - 1024).
_FLOAT_LIMIT = 9.223372036854775e18


@dataclass
class Tally:
    """What one read changed: values refused (beyond int64, not finite, not a number) and values saturated."""

    beyond: int = 0
    not_finite: int = 0
    not_number: int = 0
    saturated: int = 0

    def total(self) -> int:
        return self.beyond + self.not_finite + self.not_number + self.saturated

    def warning(self) -> str | None:
        """One line for ``metadata.warnings``, or None when nothing was changed."""
        parts = [f"{n:,} {what}" for n, what in (
            (self.beyond, "beyond the int64 range (left out)"), (self.not_finite, "NaN or infinite (left out)"),
            (self.not_number, "text or other values where a number goes (left out)"),
            (self.saturated, "saturated to the int64 range")) if n]
        return "numbers the model cannot hold: " + "; ".join(parts) if parts else None


_TALLY: contextvars.ContextVar[Tally | None] = contextvars.ContextVar("opscope_numbers_tally", default=None)


@contextlib.contextmanager
def counting() -> Iterator[Tally]:
    """Count the conversions of the read inside the block (in this thread) in the tally it yields."""
    tally = Tally()
    token = _TALLY.set(tally)
    try:
        yield tally
    finally:
        _TALLY.reset(token)


@contextlib.contextmanager
def uncounted() -> Iterator[None]:
    """Convert without counting inside the block: for a reader whose C path converts the same values without this
    module (the Chrome scanner), so that both paths give one set of warnings (its own, per field)."""
    token = _TALLY.set(None)
    try:
        yield
    finally:
        _TALLY.reset(token)


def _count(what: str) -> None:
    tally = _TALLY.get()
    if tally is not None:
        setattr(tally, what, getattr(tally, what) + 1)


def _fit(value: int, saturate: bool) -> int | None:
    if INT64_MIN <= value <= INT64_MAX:
        return value
    if saturate:
        _count("saturated")
        return INT64_MAX if value > 0 else INT64_MIN
    _count("beyond")
    return None


def int64(v: Any, scale: int = 1, *, saturate: bool = False, whole: bool = False) -> int | None:
    """``v`` (an int, a float, numeric text or bytes, a Decimal) times ``scale`` as an int64, or None; ``None`` in
    gives None without counting (an absent value is not a changed one). With ``whole`` a value with a fraction is
    not a number (an id, a count), rather than rounded."""
    c = v.__class__
    if c is int:
        return _fit(v * scale, saturate)
    if c is float:
        if v != v or v == _INF or v == -_INF:
            _count("not_finite")
            return None
        f = v * scale
        if -_FLOAT_LIMIT < f < _FLOAT_LIMIT:
            if whole and f != int(f):
                _count("not_number")
                return None
            return round(f)
        return _fit(INT64_MAX + 1 if f > 0 else INT64_MIN - 1, saturate)
    if v is None:
        return None
    if c is str or c is bytes or c is Decimal:
        return text_int64(v, scale, saturate=saturate, whole=whole)
    _count("not_number")
    return None


def text_int64(text: str | bytes | Decimal, scale: int = 1, *, saturate: bool = False,
               whole: bool = False) -> int | None:
    """Numeric text (``"1712195495519689.047"``, ``" 1e-06 "``, quoted or not, ``0x1f``) times ``scale``, exactly
    (no float in between), as an int64, or None."""
    if isinstance(text, Decimal):
        value = text
    else:
        if isinstance(text, bytes):
            text = text.decode("ascii", "replace")
        t = text.strip().strip('"').strip()
        if not t:
            return None
        if len(t) > 2 and t[:2].lower() == "0x":
            try:
                return _fit(int(t, 16) * scale, saturate)
            except ValueError:
                _count("not_number")
                return None
        if len(t) > 4_000:  # Decimal reads any length; a number is never this long
            _count("not_number")
            return None
        try:
            value = Decimal(t)
        except (InvalidOperation, ValueError):
            _count("not_number")
            return None
    if not value.is_finite():
        _count("not_finite")
        return None
    if value.adjusted() > 30:  # far beyond int64 whatever the scale: no huge integral value is made
        return _fit(INT64_MAX + 1 if value > 0 else INT64_MIN - 1, saturate)
    value *= scale
    integral = value.to_integral_value()
    if whole and value != integral:
        _count("not_number")
        return None
    return _fit(int(integral), saturate)


def add(a: int | None, b: int | None) -> int | None:
    """``a + b`` as an int64, or None (refused and counted) when the sum leaves the range."""
    if a is None or b is None:
        return None
    return _fit(a + b, False)


def int64_array(values: list) -> pa.Array:
    """Python ints (or None) as an int64 array; any beyond int64 is null (refused and counted). Fast when all fit."""
    try:
        return pa.array(values, pa.int64())
    except (OverflowError, pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
        return pa.array([int64(v) for v in values], pa.int64())
