"""Row selection shared by the table commands: kinds, name regexes, steps."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from opscope.analyses.arrays import name_match
from opscope.errors import UsageError
from opscope.model.schema import kind_mask


@dataclass(frozen=True)
class EventFilter:
    """Which events a table counts. ``match``/``exclude`` are regexes searched in the name."""

    kinds: Sequence[str] | None = None
    match: str | None = None
    exclude: str | None = None
    steps: Sequence[int] | None = None

    def apply(self, events: pa.Table) -> pa.Table:
        mask = self.mask(events)
        return events if mask is None else events.filter(mask)

    def mask(self, events: pa.Table) -> pa.ChunkedArray | pa.Array | None:
        """The rows this filter keeps (None: every row), from the ``kind``, ``name`` and ``step`` columns it asks
        about: a caller can combine it with its own mask and filter once."""
        mask = None
        if self.kinds:
            mask = _and(mask, kind_mask(events, self.kinds))
        if self.match:
            mask = _and(mask, name_match(events["name"], _checked(self.match), nulls=None))
        if self.exclude:
            mask = _and(mask, pc.invert(name_match(events["name"], _checked(self.exclude), nulls=None)))
        if self.steps:
            mask = _and(mask, pc.fill_null(pc.is_in(events["step"], pa.array(list(self.steps), pa.int64())),
                                           False))
        return mask


def _and(a, b):
    return b if a is None else pc.and_(a, b)


def checked_pattern(pattern: str | None) -> str | None:
    """``pattern`` when it is a valid regular expression (None stays None); a UsageError saying why otherwise."""
    return None if pattern is None else _checked(pattern)


def _checked(pattern: str) -> str:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise UsageError(f"invalid regular expression {pattern!r}: {exc}") from None
    return pattern


def parse_steps(text: str | None) -> list[int] | None:
    """``"3"``, ``"2,5"``, ``"2-4"`` or ``"2-4,7"`` -> step numbers."""
    if not text:
        return None
    steps: list[int] = []
    usage = f"--steps takes numbers and ranges like 2,5 or 2-4, not {text!r}"
    for part in text.split(","):
        part = part.strip()
        try:
            if "-" in part[1:]:
                lo, hi = (int(n) for n in part.split("-", 1))
            else:
                lo = hi = int(part)
        except ValueError:
            raise UsageError(usage) from None
        # bounded so a typo cannot build a list of 10^14 numbers (MemoryError) or overflow int64 (OverflowError)
        if not (-MAX_STEP <= lo <= MAX_STEP and -MAX_STEP <= hi <= MAX_STEP):
            raise UsageError(f"{usage}: step numbers go up to {MAX_STEP:,}")
        if hi - lo >= MAX_STEPS:
            raise UsageError(f"{usage}: a range holds at most {MAX_STEPS:,} steps")
        steps.extend(range(lo, hi + 1))
    return steps


#: Bounds on --steps: far above any real run's step count, far below what breaks a list or int64.
MAX_STEP = 10**9
MAX_STEPS = 1_000_000
