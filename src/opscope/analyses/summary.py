"""The one-screen answer to "where does the time go?"."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from opscope.analyses.arrays import share_pct, shares_pct, thread_keys
from opscope.analyses.filters import EventFilter
from opscope.analyses.intervals import span_bounds, union_by_group, union_ns
from opscope.analyses.kernels import DEVICE_WORK, kernel_table
from opscope.analyses.ops import op_table
from opscope.analyses.steps import StepStats, step_stats, step_table
from opscope.model.buffers import true_positions
from opscope.model.memo import memoized
from opscope.model.schema import CAPTURED_KINDS, kind_mask
from opscope.model.trace import Trace, captured_copies

#: Host kinds whose union is "CPU busy": time the framework was inside some recorded call.
HOST_BUSY_KINDS = ("cpu_op", "runtime")
#: Kinds left out of "time by kind": the profiler's own span and zero-length markers.
_NOT_WORK = ("profiler", "marker", *CAPTURED_KINDS)  # copies of a graph capture's ops ran at capture, not here


@dataclass
class Summary:
    source: str
    wall_ns: int
    events: int
    steps: StepStats
    cpu_busy_ns: int
    gpu_busy_ns: int | None
    devices: list[Any]
    top_ops: pa.Table
    top_kernels: pa.Table
    by_kind: pa.Table
    warnings: list[dict[str, Any]] = field(default_factory=list)

    def rows(self) -> list[dict[str, Any]]:
        """Flat rows (``section``, ``metric``, ``value``, ``pct``) for JSON/CSV output."""
        out: list[dict[str, Any]] = []

        def add(section, metric, value, pct=None):
            out.append({"section": section, "metric": metric, "value": value, "pct": pct})

        add("overview", "source", self.source)
        add("overview", "events", self.events)
        add("overview", "wall_ns", self.wall_ns)
        add("overview", "steps", self.steps.count)
        add("overview", "step_mean_ns", self.steps.mean_ns)
        add("overview", "step_median_ns", self.steps.median_ns)
        add("overview", "step_p90_ns", self.steps.p90_ns)
        add("overview", "steps_flagged_as_outliers", ",".join(map(str, self.steps.excluded)) or None)
        add("overview", "step_mean_without_outliers_ns", self.steps.typical_mean_ns if self.steps.excluded else None)
        add("overview", "cpu_busy_ns", self.cpu_busy_ns, share_pct(self.cpu_busy_ns, self.wall_ns))
        add("overview", "gpu_busy_ns", self.gpu_busy_ns, share_pct(self.gpu_busy_ns, self.wall_ns))
        for r in self.top_ops.to_pylist():
            add("top_ops_self_ns", r["name"], r["self_ns"], r["self_pct"])
        for r in self.top_kernels.to_pylist():
            add("top_kernels_ns", r["name"], r["total_ns"], r["pct"])
        for r in self.by_kind.to_pylist():
            add("time_by_kind_ns", r["kind"], r["total_ns"], r["pct"])
        for w in self.warnings:
            add("not_mapped", w["problem"], w["count"])
        return out


@memoized(keep=True)
def _kept_totals(trace: Trace) -> dict[str, Any]:
    return _totals(trace)


@memoized(keep=True)
def _kept_by_kind(trace: Trace) -> pa.Table:
    return _by_kind(trace)


def summarize(trace: Trace, top: int = 5) -> Summary:
    # what needs every event (spans' unions, time by kind) is kept in the cache entry with the tables below: the
    # next summary of a cached trace reads it instead of the events' columns
    totals = _kept_totals(trace)
    by_kind = _kept_by_kind(trace)
    return Summary(
        source=str(trace.metadata.get("source")),
        wall_ns=totals["wall_ns"],
        events=trace.num_events - captured_copies(trace),
        steps=step_stats(step_table(trace)),
        cpu_busy_ns=totals["cpu_busy_ns"],
        gpu_busy_ns=totals["gpu_busy_ns"],
        devices=totals["devices"],
        # top=0: no lists, and none computed (the HTML report shows the whole tables elsewhere)
        top_ops=op_table(trace, filt=EventFilter(kinds=("cpu_op",))).slice(0, top) if top else pa.table({}),
        # the rows of `opscope kernels` (one per kernel, by the name every table shows it by)
        top_kernels=(kernel_table(trace, names="short").slice(0, top) if totals["device_rows"]
                     else kernel_table(trace, names="short")) if top else pa.table({}),
        by_kind=by_kind,
        warnings=list(trace.warnings),
    )


def _python_outside_ops(trace: Trace) -> int:
    """Time Python frames cover outside every op and runtime call on their thread: per thread, the union of frames
    and calls less the union of the calls (|P u O| - |O| = |P| - |P n O|)."""
    events = trace.select(["kind", "ts_ns", "dur_ns", "pid", "tid"]).unify_dictionaries()
    python, calls = kind_mask(events, ("python",)), kind_mask(events, HOST_BUSY_KINDS)
    pid, tid = events["pid"], events["tid"]
    vocab = [c.chunk(0).dictionary if c.num_chunks and pa.types.is_dictionary(c.type) else pc.unique(c)
             for c in (pid, tid)]
    thread = thread_keys(pid, tid, *vocab)
    ts, dur = events["ts_ns"], events["dur_ns"]

    def covered(mask: pa.ChunkedArray) -> dict[int, int]:
        rows = true_positions(mask)
        return union_by_group(pc.take(ts, rows), pc.take(dur, rows), pc.take(thread, rows))

    both, only_calls = covered(pc.or_(python, calls)), covered(calls)
    python_threads = set(covered(python))
    return sum(both[g] - only_calls.get(g, 0) for g in python_threads)


def _totals(trace: Trace) -> dict[str, Any]:
    """Wall time, CPU and GPU busy time (unions of spans), the devices and how many device rows there are."""
    events = trace.select(["kind", "ts_ns", "dur_ns", "device"])
    ts, dur = events["ts_ns"], events["dur_ns"]
    # The profiler's own span and markers ("Record Window End" lands where the profiler stopped, after its
    # post-processing) are not the program's time: wall time is that of the other events. (Masks, not copies of the
    # rows: the unions and bounds read the columns where the masks select.)
    bounds = span_bounds(ts, dur, pc.invert(kind_mask(events, _NOT_WORK))) or span_bounds(ts, dur)
    host, device = kind_mask(events, HOST_BUSY_KINDS), kind_mask(events, DEVICE_WORK)
    device_rows = pc.sum(pc.cast(device, pa.int64())).as_py() or 0
    return {
        "wall_ns": bounds[1] - bounds[0] if bounds else 0,
        "cpu_busy_ns": union_ns(ts, dur, host),
        "gpu_busy_ns": union_ns(ts, dur, device) if device_rows else None,
        "devices": sorted(d for d in pc.unique(pc.filter(events["device"], device)).to_pylist() if d is not None)
        if device_rows else [],
        "device_rows": device_rows,
    }


#: How "time by event kind" counts, said with the table (reports.py) and applied in :func:`_by_kind`.
BY_KIND_LEGEND = ("self time per kind: an event's time not inside a child of its own layer (ops, annotations and "
                  "runtime calls nest in one layer, Python frames in another); a Python frame's time inside the ops "
                  "and runtime calls it makes is not counted for it (it is the ops'): python is the time Python ran "
                  "outside any op. Device kinds: their durations. Shares of the sum over the kinds shown (host "
                  "threads and device streams summed alike); the profiler's span and markers left out")


def _by_kind(trace: Trace) -> pa.Table:
    """Events and self time per kind (the profiler's span and markers left out), largest first; see BY_KIND_LEGEND."""
    events = trace.select(["kind", "dur_ns", "self_ns"]).unify_dictionaries()  # Arrow groups one dictionary only
    # grouped first, the left-out kinds dropped after: the same groups in the same order, without a copy of the rows
    by_kind = events.group_by("kind", use_threads=False).aggregate([("dur_ns", "count"), ("self_ns", "sum")])
    kinds = by_kind["kind"].cast(pa.string())
    shown = pc.invert(pc.is_in(kinds, value_set=pa.array(_NOT_WORK, pa.string())))
    by_kind, kinds = by_kind.filter(shown), kinds.filter(shown)
    self_sum = by_kind["self_ns_sum"]
    is_python = pc.equal(kinds, "python")
    if pc.any(is_python).as_py():
        self_sum = pc.if_else(is_python, pa.scalar(_python_outside_ops(trace), pa.int64()), self_sum)
    total_self = pc.sum(self_sum).as_py() or 0
    return pa.table({
        "kind": kinds,
        "events": by_kind["dur_ns_count"],
        "total_ns": self_sum,
        "pct": shares_pct(self_sum, max(total_self, 1)),
    }).sort_by([("total_ns", "descending")])
