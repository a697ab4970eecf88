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
        return events if mask is None else events.filter(mask)


def _and(a, b):
    return b if a is None else pc.and_(a, b)


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
    for part in text.split(","):
        part = part.strip()
        try:
            if "-" in part[1:]:
                lo, hi = part.split("-", 1)
                steps.extend(range(int(lo), int(hi) + 1))
            else:
                steps.append(int(part))
        except ValueError:
            raise UsageError(f"--steps takes numbers and ranges like 2,5 or 2-4, not {text!r}") from None
    return steps
