"""The CI gate: did the per-step time regress by more than the allowed threshold, beyond the run-to-run noise?

The gate judges the 95% interval of the step time's median difference (:mod:`opscope.analyses.noise`), not one
mean against another: a run fails only when the whole interval lies beyond the limit, passes when all of it lies
within, and otherwise says that its steps cannot tell (too few for an interval, or an interval across the limit).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from opscope.analyses.noise import MIN_SAMPLES, Shift, shift
from opscope.diff.samples import StepSample, samples_text
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


@dataclass(frozen=True)
class Verdict:
    """What the gate decided: ``ok`` (the whole interval within the limit), ``slower`` (the whole interval beyond
    it), ``unsure`` (too few steps for an interval, or an interval across the limit), and the line that says it with
    the interval judged."""

    outcome: str
    line: str

    @property
    def failed(self) -> bool:
        return self.outcome == "slower"

    @property
    def unsure(self) -> bool:
        return self.outcome == "unsure"


def verdict(base: StepSample, new: StepSample, threshold: Threshold, unit: str = "per-step") -> Verdict:
    """Judge the step time's median difference by its 95% interval (:func:`opscope.analyses.noise.shift` of the two
    sides' samples): slower only when all of it lies beyond ``threshold`` (relative: in % of the base median; a
    time: in ns), ok when all of it lies within, else unsure."""
    samples = samples_text(base, new)
    found = shift(base.values, new.values)
    if found is None:
        fewest = min(len(base.values), len(new.values))
        why = ("a whole-trace comparison has no per-step samples" if fewest == 0 and unit != "per-step" else
               f"{samples}: the 95% interval needs at least {MIN_SAMPLES} steps a side (with fewer it is the whole "
               "range of the pairwise differences, or none)")
        return Verdict("unsure", f"not enough steps to tell: {unit} time, {why}; no interval to judge against the "
                                 f"{threshold} allowed; record more steps (opscope record --active N)")
    if threshold.relative is not None:
        low, high, limit = found.low_pct, found.high_pct, threshold.relative * 100.0
    else:
        low, high, limit = found.low, found.high, float(threshold.absolute_ns or 0)
    change = f"{unit} time, {samples}: {interval_text(found)}"
    if low is None or high is None:  # a base median of 0: no relative figure
        return Verdict("unsure", f"not enough steps to tell: {change}; the base median is 0, so no share of it "
                                 f"can be judged against the {threshold} allowed")
    if low > limit:
        return Verdict("slower", f"regression: {change}, all of it above the {threshold} allowed")
    if high <= limit:
        return Verdict("ok", f"ok: {change}, all of it within the {threshold} allowed")
    return Verdict("unsure", f"not enough steps to tell: {change}, which straddles the {threshold} allowed; record "
                             "more steps (opscope record --active N) to tell")


def interval_text(found: Shift) -> str:
    """``medians 20.000 ms -> 25.000 ms; median difference +25.00% (+5.000 ms), 95% CI +23.10% to +26.90%
    (+4.620 ms to +5.380 ms)``."""
    text = (f"medians {format_ns(round(found.base_median))} -> {format_ns(round(found.new_median))}; median "
            "difference ")
    if found.delta_pct is not None and found.low_pct is not None and found.high_pct is not None:
        # to 2 decimals, as the ci_low_pct/ci_high_pct columns and the table hold them: every output says the same
        pct = [round(v, 2) for v in (found.delta_pct, found.low_pct, found.high_pct)]
        return text + (f"{pct[0]:+.2f}% ({_signed(found.delta)}), 95% CI {pct[1]:+.2f}% to {pct[2]:+.2f}% "
                       f"({_signed(found.low)} to {_signed(found.high)})")
    return text + f"{_signed(found.delta)}, 95% CI {_signed(found.low)} to {_signed(found.high)}"


def _signed(ns: int) -> str:
    return ("+" if ns >= 0 else "-") + format_ns(abs(ns))
