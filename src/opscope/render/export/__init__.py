"""``opscope export``: the model written back as a trace that chrome://tracing and the Perfetto UI open.

Stages: :mod:`.select` (the cuts), :mod:`.findings` (what opscope marks), :mod:`.tracks` (process/thread layout),
then one writer per format: :mod:`.chrome` (trace-event JSON that opscope reads back into the same model) and
:mod:`.perfetto` (native protobuf, needs the ``view`` extra). Only the model is read, never the source file, so any
format a reader understands can be exported.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from opscope.errors import UsageError
from opscope.model.trace import Trace
from opscope.render.export.findings import Mark, finding_marks, step_marks
from opscope.render.export.select import Cut, in_span, kept_links, kept_rows, step_span
from opscope.render.export.tracks import Layout, layout

FORMATS = ("chrome", "perfetto")
Say = Callable[[str], None]


@dataclass
class Plan:
    """Everything one export writes, chosen before any byte is written."""

    trace: Trace
    rows: pa.Array
    links: pa.Table
    counters: pa.Table
    memory: pa.Table
    layout: Layout
    marks: list[Mark] = field(default_factory=list)

    @property
    def total(self) -> int:
        return self.trace.events.num_rows if self.trace.events is not None else 0


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
    return Plan(trace, rows, links, counters, memory, layout(trace, rows, [p or "" for p in extra]), marks)


def export(trace: Trace, fmt: str, path: Path, *, force: bool = False, cut: Cut | None = None,
           findings: bool = True, phase: Say | None = None) -> tuple[Plan, int]:
    """Write the export of ``trace`` to ``path`` (gzip when it ends in .gz; Chrome only); return the plan and the
    file's size. Never overwrites without ``force``; the file appears complete or not at all."""
    from opscope.outfile import check_target, write_file

    if fmt not in FORMATS:
        raise UsageError(f"--to takes {' or '.join(FORMATS)}, not {fmt!r}")
    writer = _writer(fmt)
    check_target(path, force)  # before the analyses run: a taken name fails at once
    p = plan(trace, cut or Cut(), findings, phase)
    if phase:
        phase(f"writing {path.name}")
    gz = path.name.endswith(".gz")
    size = write_file(path, lambda stream: writer(p, stream, gz), force)
    return p, size


def _writer(fmt: str) -> Callable:
    if fmt == "chrome":
        from opscope.render.export.chrome import write

        return write
    from opscope.render.export.perfetto import writer

    return writer()


__all__ = ["FORMATS", "Cut", "Plan", "export", "plan"]
