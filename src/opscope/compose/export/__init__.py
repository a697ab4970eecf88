"""``opscope export``'s plan: what the timeline holds, chosen from the model before any byte is written.

Stages: :mod:`.select` (the cuts), :mod:`.marks` (what opscope marks: steps, slow steps, idle gaps), :mod:`.tracks`
(process/thread layout). The plan (``opscope.render.export.plan.Plan``) goes to a writer of
``opscope.render.export``; only the model is read, never the source file, so any format a reader understands can be
exported.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa

from opscope.analyses.memory import device_label
from opscope.compose.export.marks import finding_marks, step_marks
from opscope.compose.export.select import Cut, in_span, kept_links, kept_rows, step_span
from opscope.compose.export.tracks import layout
from opscope.errors import UsageError
from opscope.model.trace import Trace
from opscope.render.export.plan import Plan

Say = Callable[[str], None]


def plan(trace: Trace, cut: Cut, findings: bool = True, phase: Say | None = None) -> Plan:
    """What to write: the kept events, the launch links among them, counters, memory records, tracks, marks."""
    phase = phase or (lambda _: None)
    span = step_span(trace, cut.steps)
    phase("selecting events")
    rows = kept_rows(trace, cut)
    if len(rows) == 0:
        raise UsageError(f"{trace.metadata.get('source')}: the cuts (--steps/--min-dur-us/--kinds) keep no event")
    phase("linking launches to device work")
    links = kept_links(trace, rows)
    counters = in_span(trace.counters, span)
    memory = in_span(trace.memory, span)
    extra = sorted(set(counters["pid"].cast(pa.string()).to_pylist()) |
                   set(memory["pid"].cast(pa.string()).to_pylist()))
    marks = step_marks(trace, span)
    if findings:
        phase("finding slow steps and idle gaps")
        marks += finding_marks(trace, span)
    return Plan(trace, rows, links, counters, memory, layout(trace, rows, [p or "" for p in extra]), marks,
                device_names(memory))


def device_names(memory: pa.Table) -> dict[tuple[int | None, int | None], str]:
    """The name of each device the memory records are of (cuda:0), as the memory analysis names it."""
    if memory.num_rows == 0:
        return {}
    devices = memory.group_by(["device_type", "device_id"], use_threads=False).aggregate([])
    return {(t, i): device_label(t, i) for t, i in zip(devices["device_type"].to_pylist(),
                                                      devices["device_id"].to_pylist())}


__all__ = ["Cut", "Plan", "plan"]
