"""Human units for nanosecond integers, byte counts and shares: usable by every layer, chosen only when shown."""

from __future__ import annotations

import math


def format_ns(ns: int | float | None) -> str:
    if ns is None:
        return "-"
    a = abs(ns)
    if a >= 60e9:
        return f"{ns / 60e9:.2f} min"
    if a >= 1e9:
        return f"{ns / 1e9:.3f} s"
    if a >= 1e6:
        return f"{ns / 1e6:.3f} ms"
    if a >= 1e3:
        return f"{ns / 1e3:.3f} us"
    return f"{int(ns)} ns"


def format_pct(p: float | None) -> str:
    return "-" if p is None else f"{p:.2f}%"


def format_cell(column: str, value) -> str:
    if value is None:
        return "-"
    if column.endswith("_ns"):
        return format_ns(value)
    if column.endswith("pct"):
        return format_pct(value)
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def format_plain(value) -> str:
    """A number as it is, digits grouped: ``78429360000000`` -> ``78,429,360,000,000``, ``21000.5`` ->
    ``21,000.5`` (never ``2.1e+04``: an exponent hides digits and reads as a unit to some)."""
    if value is None:
        return "-"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if value != value or value in (float("inf"), float("-inf")):
        return str(value)
    if value == int(value) and abs(value) < 1e18:
        return f"{int(value):,}"
    # enough decimals for 4 significant digits of small values, at most 3 for large ones
    digits = 3 if abs(value) >= 1 else min(15, 3 - math.floor(math.log10(abs(value))))
    return f"{value:,.{digits}f}".rstrip("0").rstrip(".")


def format_bytes(value: int | float | None) -> str:
    """A byte count in B, KiB, MiB, GiB or TiB (powers of 1024)."""
    if value is None:
        return "-"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.2f} {unit}"
        size /= 1024
    return str(value)
