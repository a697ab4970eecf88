"""The CI gate: did the per-step time regress by more than the allowed threshold?"""

from __future__ import annotations

import re
from dataclasses import dataclass

from opscope.errors import UsageError
from opscope.units import format_ns

_UNITS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
_THRESHOLD = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(%|ns|us|µs|ms|s)?\s*$")


@dataclass(frozen=True)
class Threshold:
    """Allowed slow-down: a share of the base step time (``relative``) or a time (``absolute_ns``)."""

    relative: float | None = None
    absolute_ns: int | None = None

    def allowed_ns(self, base_ns: int) -> float:
        return base_ns * self.relative if self.relative is not None else float(self.absolute_ns or 0)

    def __str__(self) -> str:
        return f"{self.relative * 100:g}%" if self.relative is not None else format_ns(self.absolute_ns)


def parse_threshold(text: str) -> Threshold:
    """``"5%"`` or ``"5"`` -> 5% of the base step time; ``"2ms"``, ``"500us"``, ``"1.5s"`` -> that much time."""
    m = _THRESHOLD.match(text or "")
    if not m:
        raise UsageError(f"--fail-if-slower takes a percentage (5%) or a time (2ms, 500us), not {text!r}")
    value, unit = float(m.group(1)), m.group(2) or "%"
    if unit == "%":
        return Threshold(relative=value / 100.0)
    return Threshold(absolute_ns=round(value * _UNITS[unit]))


def verdict(base_step_ns: int, new_step_ns: int, threshold: Threshold, unit: str = "per-step") -> tuple[bool, str]:
    """(failed, one-line reason)."""
    delta = new_step_ns - base_step_ns
    pct = 100.0 * delta / base_step_ns if base_step_ns else float("inf")
    allowed = threshold.allowed_ns(base_step_ns)
    change = (f"{unit} time {format_ns(base_step_ns)} -> {format_ns(new_step_ns)} ({'+' if delta >= 0 else ''}"
              f"{pct:.1f}%, {'+' if delta >= 0 else ''}{format_ns(delta)})")
    if delta > allowed:
        return True, f"regression: {change}, more than the {threshold} allowed"
    return False, f"ok: {change}, within the {threshold} allowed"
