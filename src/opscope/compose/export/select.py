"""The cuts of ``opscope export``: which events, flows, counters and memory records go out. Pure functions on the
model's Arrow tables; nothing here writes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from opscope.errors import UsageError
from opscope.model.buffers import true_positions
from opscope.model.schema import CAPTURED_KINDS, EVENT_KINDS, kind_mask
from opscope.model.trace import Trace


@dataclass(frozen=True)
class Cut:
    """What to keep: steps (numbers), slices at least ``min_dur_ns`` long (instants always stay), kinds."""

    steps: Sequence[int] | None = None
    min_dur_ns: int = 0
    kinds: Sequence[str] | None = None


def check_kinds(kinds: Sequence[str]) -> list[str]:
    """The kinds, each a kind of the model; a UsageError names the valid ones otherwise."""
    known = [k for k in EVENT_KINDS if k not in CAPTURED_KINDS]
    bad = [k for k in kinds if k not in known]
    if bad:
        raise UsageError(f"--kinds: unknown kind {bad[0]!r}; the kinds are: {', '.join(known)}")
    return list(kinds)


def kept_rows(trace: Trace, cut: Cut) -> pa.Array:
    """Row numbers (== event_id) of the events the cut keeps, in the table's (time) order; never the copies of a
    graph capture's ops (they ran at capture, not in this trace)."""
    events = trace.select(["kind", "dur_ns", "step"])
    mask = pc.invert(kind_mask(events, CAPTURED_KINDS))
    if cut.kinds is not None:
        mask = pc.and_(mask, kind_mask(events, tuple(cut.kinds)))
    if cut.min_dur_ns > 0:
        instant = kind_mask(events, ("marker",))
        mask = pc.and_(mask, pc.or_(instant, pc.greater_equal(events["dur_ns"], cut.min_dur_ns)))
    if cut.steps is not None:
        wanted = pa.array(sorted(set(cut.steps)), pa.int64())
        mask = pc.and_(mask, pc.fill_null(pc.is_in(events["step"], wanted), False))
    rows = true_positions(mask)
    return pc.cast(rows, pa.int64())


def step_span(trace: Trace, steps: Sequence[int] | None) -> tuple[int, int] | None:
    """The time span of the chosen steps (first start to last end); None for no step cut. A UsageError when the
    trace has none of them."""
    if steps is None:
        return None
    table = trace.steps
    chosen = table.filter(pc.is_in(table["step"], pa.array(sorted(set(steps)), pa.int64())))
    if chosen.num_rows == 0:
        have = table["step"].to_pylist()
        what = f"its steps are {min(have)} to {max(have)}" if have else "it has no ProfilerStep#N steps"
        raise UsageError(f"{trace.metadata.get('source')}: --steps selects no step ({what})")
    return (pc.min(chosen["ts_ns"]).as_py(), pc.max(pc.add(chosen["ts_ns"], chosen["dur_ns"])).as_py())


def in_span(table: pa.Table, span: tuple[int, int] | None) -> pa.Table:
    """Rows of a table with ``ts_ns`` (counters, memory records) inside the span; all of them without one."""
    if span is None or table.num_rows == 0:
        return table
    ts = table["ts_ns"]
    return table.filter(pc.and_(pc.greater_equal(ts, span[0]), pc.less(ts, span[1])))


def kept_links(trace: Trace, rows: pa.Array) -> pa.Table:
    """Launch -> device work links (``launch_row``, ``device_row``) whose both ends are kept, in device order.

    The links are the links analysis' (correlation ids, else launch order): an arrow is drawn wherever opscope
    links a kernel, memcpy or memset to the runtime call (or TensorFlow op) that launched it."""
    from opscope.analyses.links import device_links

    links = device_links(trace)
    table = pa.table({"launch_row": links["launch_row"], "device_row": links["device_row"]})
    table = table.filter(pc.is_valid(table["launch_row"]))
    if table.num_rows == 0:
        return table
    both = pc.and_(pc.is_in(table["launch_row"], rows), pc.is_in(table["device_row"], rows))
    return table.filter(both)
