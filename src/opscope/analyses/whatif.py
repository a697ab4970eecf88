"""What if some work took another time: the dependency graph replayed with changed durations, per step.

A change is ``SELECTOR=FACTOR``: the durations of what the selector picks are multiplied by FACTOR (0 removes,
0.5 halves, 2 doubles). Selectors (:data:`SELECTORS`):

- ``op:REGEX``: host time inside ops and annotations (``record_function`` regions) whose name matches, nested events
  included (their host time only: the device work they launch is ``kernel:``'s);
- ``kernel:REGEX``: device work whose name matches; ``copy``: copies and fills; ``comm``: collectives;
- ``sync``: the host's waits for the device (0: the host no longer waits); ``sync:REGEX``: those inside host events
  (ops, ``record_function`` regions) whose name matches; ``launch``: runtime calls (launches);
- ``loader``: host time in the input pipeline (DataLoader); ``idle``: the lags the trace does not explain.
"""

from __future__ import annotations

import re
from array import array
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from opscope.analyses.arrays import name_match
from opscope.analyses.depgraph import (
    CATEGORIES,
    COMMUNICATION,
    COPIES,
    DEVICE,
    INPUT,
    LAUNCH,
    NONE,
    WAIT,
    DepGraph,
    dependency_graph,
)
from opscope.analyses.replay import replay, step_times
from opscope.errors import UsageError
from opscope.model.buffers import values_view
from opscope.model.trace import Trace

SELECTORS = ("op:REGEX", "kernel:REGEX", "copy", "comm", "sync", "sync:REGEX", "launch", "loader", "idle")
#: Selectors that take a regex (``sync`` also goes without one).
_PATTERNED = ("op", "kernel", "sync")
_MAX_CLIMB = 512


@dataclass(frozen=True)
class Change:
    """One ``SELECTOR=FACTOR`` (``pattern``: the regex of ``op:``/``kernel:``)."""

    selector: str
    pattern: str | None
    factor: float

    def __str__(self) -> str:
        what = f"{self.selector}:{self.pattern}" if self.pattern is not None else self.selector
        return f"{what}={self.factor:g}"


def parse_change(text: str) -> Change:
    """``SELECTOR=FACTOR`` as a :class:`Change`; a UsageError that says what is accepted otherwise."""
    what, sep, value = text.rpartition("=")
    if not sep or not what:
        raise UsageError(f"--change {text!r}: write SELECTOR=FACTOR, e.g. kernel:gemm=0.5 or sync=0")
    try:
        factor = float(value)
    except ValueError:
        raise UsageError(f"--change {text!r}: the factor {value!r} is not a number") from None
    if not 0 <= factor < 1e6:
        raise UsageError(f"--change {text!r}: the factor must be 0 or more (0 removes, 0.5 halves)")
    selector, colon, pattern = what.partition(":")
    if selector in _PATTERNED and (colon or selector != "sync"):
        if not colon or not pattern:
            raise UsageError(f"--change {text!r}: {selector}: takes a regex, e.g. {selector}:gemm=0.5")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise UsageError(f"--change {text!r}: invalid regular expression {pattern!r}: {exc}") from None
        return Change(selector, pattern, factor)
    if colon or selector not in SELECTORS:
        raise UsageError(f"--change {text!r}: unknown selector; the selectors are {', '.join(SELECTORS)}")
    return Change(selector, None, factor)


def factors(trace: Trace, graph: DepGraph, changes: Sequence[Change]) -> tuple[memoryview, memoryview, list[int]]:
    """Per node, its duration factor and its unexplained-lag factor after ``changes`` (a later change multiplies an
    earlier one), as float64 memoryviews, and how many nodes each change picked."""
    n = len(graph)
    duration = lag = _column(array("d", [1.0]) * n, pa.float64())
    picked: list[int] = []
    for change in changes:
        if change.selector == "idle":
            chosen = pc.not_equal(_column(graph.unexplained, pa.int64()), 0)
            lag = pc.if_else(chosen, pc.multiply(lag, change.factor), lag)
        else:
            chosen = _chosen(trace, graph, change)
            duration = pc.if_else(chosen, pc.multiply(duration, change.factor), duration)
        picked.append(pc.sum(chosen).as_py() or 0)
    return values_view(duration, "d"), values_view(lag, "d"), picked


def _column(values: Sequence[int] | Sequence[float], type_: pa.DataType) -> pa.Array:
    """A graph's column (a memoryview, an array) as an Arrow array, in place."""
    return pa.Array.from_buffers(type_, len(values), [None, pa.py_buffer(values)])


def _chosen(trace: Trace, graph: DepGraph, change: Change) -> pa.Array:
    """Which nodes the change picks (a mask over the nodes)."""
    kind = _column(graph.kind, pa.int8())
    device = pc.equal(kind, DEVICE)
    host = pc.invert(device)

    def category(name: str) -> pa.Array:
        return pc.equal(_column(graph.category.codes, pa.int8()), CATEGORIES.index(name))

    def rows_in(mask: pa.Array | pa.ChunkedArray) -> pa.Array:
        """Per node, whether its event is one the mask over the events marks (a gap: false)."""
        row = _column(graph.row, pa.int32())
        event = pc.if_else(pc.equal(row, NONE), pa.scalar(None, pa.int32()), row)
        return pc.fill_null(pc.take(mask, event), False)

    if change.selector == "kernel":
        return pc.and_(device, rows_in(name_match(trace.select(["name"])["name"], change.pattern or "")))
    if change.selector in ("copy", "comm"):
        return pc.and_(device, category(COPIES if change.selector == "copy" else COMMUNICATION))
    if change.selector == "sync" and change.pattern is None:
        return pc.equal(kind, WAIT)
    if change.selector == "launch":
        return pc.and_(host, category(LAUNCH))
    if change.selector == "loader":
        return pc.and_(host, category(INPUT))
    inside = pa.array(sorted(_inside_matching(trace, change.pattern or "")), pa.int32())
    picked = pc.is_in(_column(graph.row, pa.int32()), value_set=inside)
    return pc.and_(pc.equal(kind, WAIT) if change.selector == "sync" else host, picked)


def _inside_matching(trace: Trace, pattern: str) -> set[int]:
    """Host event rows that match ``pattern`` or lie inside one that does (by the model's nesting)."""
    from opscope.analyses.arrays import rows_where
    from opscope.analyses.depgraph import SLICE_KINDS
    from opscope.model.schema import kind_mask

    ev = trace.select(["kind", "name", "parent"])
    host = kind_mask(ev, SLICE_KINDS)
    matching = set(rows_where(pc.and_(host, name_match(ev["name"], pattern))).to_pylist())
    if not matching:
        return set()
    parents = ev["parent"].to_pylist()
    inside: dict[int, bool] = {}
    for row in rows_where(host).to_pylist():
        trail, current, found = [], row, False
        for _ in range(_MAX_CLIMB):
            if current is None:
                break
            if current in inside:
                found = inside[current]
                break
            if current in matching:
                found = True
                break
            trail.append(current)
            current = parents[current]
        for r in trail:
            inside[r] = found
        inside[row] = found or row in matching
    return {row for row, found in inside.items() if found}


WHATIF = pa.schema([("step", pa.int64()), ("measured_ns", pa.int64()), ("replayed_ns", pa.int64()),
                    ("predicted_ns", pa.int64()), ("change_pct", pa.float64())])


def whatif_table(trace: Trace, changes: Sequence[Change]) -> tuple[pa.Table, list[int]]:
    """Per step: measured, replayed with no change, predicted with ``changes``, and the predicted change against the
    replay (%); and how many nodes each change picked."""
    graph = dependency_graph(trace)
    duration, lag, picked = factors(trace, graph, changes)
    table = step_times(trace, graph, replay(graph, duration, lag))
    replayed, predicted = table["replayed_ns"].to_pylist(), table["predicted_ns"].to_pylist()
    change = [round(100.0 * (p - r) / r, 2) if r else None for r, p in zip(replayed, predicted)]
    return table.append_column("change_pct", pa.array(change, pa.float64())).cast(WHATIF), picked
