"""``opscope export``'s plan: what the timeline holds, chosen from the model before any byte is written.

Stages: :mod:`.select` (the cuts), :mod:`.marks` (what opscope marks: steps, slow steps, idle gaps), :mod:`.tracks`
(process/thread layout). The plan (``opscope.render.export.plan.Plan``) goes to a writer of
``opscope.render.export``; only the model is read, never the source file, so any format a reader understands can be
exported.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pyarrow as pa

from opscope.analyses.memory import DEVICE_TYPES, device_label
from opscope.compose.export.marks import finding_marks, step_marks
from opscope.compose.export.select import Cut, in_span, kept_links, kept_rows, step_span
from opscope.compose.export.tracks import layout
from opscope.errors import UsageError
from opscope.model.trace import Trace
from opscope.render.export.plan import JobPlan, Layout, Plan, RankPlan

Say = Callable[[str], None]
#: torch's device type of the CPU (its memory belongs to no device's process).
CPU_DEVICE_TYPE = next(t for t, name in DEVICE_TYPES.items() if name == "cpu")


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
    tracks = layout(trace, rows, [p or "" for p in extra])
    return Plan(trace, rows, links, counters, memory, tracks, marks, device_names(memory),
                memory_processes(memory, tracks))


def job_plan(ranks: Sequence[tuple[int, Callable[[], Trace]]], clocks: pa.Table, reference: int | None, cut: Cut,
             findings: bool = True) -> JobPlan:
    """A job's export: every rank's plan (built when written, one rank at a time) with its clock offset from the
    job's clock table (``analyses.job.clocks``); a rank without one keeps its own clock."""
    offsets = {r: (o or 0, bool(a)) for r, o, a in zip(clocks["rank"].to_pylist(),
                                                    clocks["clock_offset_ns"].to_pylist(),
                                                    clocks["aligned"].to_pylist())}
    job = JobPlan([], reference if any(a for _, a in offsets.values()) else None)

    def builder(open_rank: Callable[[], Trace]) -> Callable[[], Plan]:
        def build() -> Plan:
            p = plan(open_rank(), cut, findings)
            job.kept += len(p.rows)
            job.total += p.total
            return p
        return build

    for rank, open_rank in ranks:
        offset, aligned = offsets.get(rank, (0, False))
        job.ranks.append(RankPlan(rank, offset if aligned else 0, aligned, _first_ns(open_rank()),
                                  builder(open_rank)))
    return job


def _first_ns(trace: Trace) -> int | None:
    """The trace's earliest event start (its events are in time order)."""
    if trace.num_events == 0:
        return None
    return trace.select(["ts_ns"])["ts_ns"][0].as_py()


def memory_processes(memory: pa.Table, tracks: Layout) -> dict[tuple[int | None, int | None], str]:
    """Each memory device's process in the layout: the process that holds the device's work (a GPU's memory under
    that GPU). The memory records number devices as the program saw them and the device work as the profiler did
    (CUDA_VISIBLE_DEVICES=2 makes cuda:0 GPU 2): a trace with one device's work and one device's memory has them
    on the same device; otherwise the numbers must agree. The CPU, and a device not found, have none."""
    if memory.num_rows == 0:
        return {}
    by_device: dict[int, str] = {}
    for pid, device in sorted(tracks.device_of.items(), key=lambda kv: (kv[1], _pid_order(tracks, kv[0]))):
        by_device.setdefault(device, pid)
    devices = memory.group_by(["device_type", "device_id"], use_threads=False).aggregate([])
    used = [(t, i) for t, i in zip(devices["device_type"].to_pylist(), devices["device_id"].to_pylist())
            if t is not None and t != CPU_DEVICE_TYPE and i is not None]
    if len(used) == 1 and len(by_device) == 1:
        return {used[0]: next(iter(by_device.values()))}
    return {(t, i): by_device[i] for t, i in used if i in by_device}


def _pid_order(tracks: Layout, pid: str) -> int:
    return tracks.process_sort.get(pid, 0)


def device_names(memory: pa.Table) -> dict[tuple[int | None, int | None], str]:
    """The name of each device the memory records are of (cuda:0), as the memory analysis names it."""
    if memory.num_rows == 0:
        return {}
    devices = memory.group_by(["device_type", "device_id"], use_threads=False).aggregate([])
    return {(t, i): device_label(t, i) for t, i in zip(devices["device_type"].to_pylist(),
                                                      devices["device_id"].to_pylist())}


__all__ = ["Cut", "JobPlan", "Plan", "job_plan", "plan"]
