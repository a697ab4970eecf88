"""The analyses' answers as Reports: what each table command shows, with its title, legend and notes.

One function per command (the CLI, the API and the HTML report call the same one); each takes a trace and
typed options and computes nothing the chosen renderer does not show (sections are lazy).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Literal

import pyarrow as pa
import pyarrow.compute as pc

from opscope.analyses.arrays import share_pct
from opscope.analyses.filters import EventFilter
from opscope.analyses.steps import NO_STEPS, step_marker
from opscope.errors import UsageError
from opscope.model.memo import memoized
from opscope.model.trace import Trace
from opscope.report import Column, Report, Section, single

if TYPE_CHECKING:
    from opscope.analyses.peaks import Peaks
from opscope.units import format_ns, format_pct

Names = Literal["short", "full"]


def summary_report(trace: Trace, top: int = 5, run: dict | None = None) -> Report:
    """Wall time, steps, CPU/GPU busy, top ops and kernels, time by kind, what was not mapped. ``run``: the
    recording's run.json, to say when the profiler made the recorded steps slower than unrecorded ones."""
    from opscope.analyses.capture_merge import capture_note
    from opscope.analyses.recording import step_inflation
    from opscope.analyses.summary import BY_KIND_LEGEND, summarize

    s = summarize(trace, top=top)
    st = s.steps
    if st.count:
        steps = (f"{st.count} (mean {format_ns(st.mean_ns)}, median {format_ns(st.median_ns)}, "
                 f"p90 {format_ns(st.p90_ns)})")
        if st.excluded:
            steps += (f"; outliers {_step_names(trace, st.excluded)}: without them mean "
                      f"{format_ns(st.typical_mean_ns)}")
    else:
        steps = "none found " + NO_STEPS.removeprefix("no steps ")
    fields = [("events", f"{s.events:,}"), ("wall time", format_ns(s.wall_ns)), ("steps", steps),
              ("CPU busy", f"{format_ns(s.cpu_busy_ns)} ({format_pct(share_pct(s.cpu_busy_ns, s.wall_ns))} of wall; "
                           "union of ops and runtime calls)")]
    if s.gpu_busy_ns is None:
        fields.append(("GPU busy", "no device activity in this trace"))
    else:
        fields.append(("GPU busy", f"{format_ns(s.gpu_busy_ns)} ({format_pct(share_pct(s.gpu_busy_ns, s.wall_ns))} of "
                                   f"wall; {_device_ids(s.devices)})"))
    capture = capture_note(trace)
    if capture:
        fields.append(("graph capture", capture.removeprefix("graph capture: ")))
    inflation = step_inflation(run)
    notes = []
    records = s.rows()
    if inflation is not None and inflation.inflated:
        fields.insert(0, ("recording", inflation.line()))
        notes.append(inflation.line())
        records.append({"section": "overview", "metric": "recorded_vs_unrecorded_step_ratio",
                        "value": round(inflation.ratio, 3), "pct": None})
    # The terminal shows the line as a field; JSON/CSV say it with the data section's notes (on stderr).
    sections = [Section("summary", records=records, terminal=False, notes=notes),
                Section("overview", fields=fields, data=False)]
    perf = trace.metadata.get("migraphx")
    if isinstance(perf, dict):
        records.extend({"section": "migraphx", "metric": k, "value": v, "pct": None}
                       for k, v in perf.items() if k != "summary" and not isinstance(v, (dict, list)))
        records.extend({"section": "migraphx_summary_ms", "metric": r.get("group"), "value": r.get("total_ms"),
                        "pct": r.get("pct")} for r in perf.get("summary") or [] if isinstance(r, dict))
        sections.extend(_migraphx_sections(perf))
    if s.top_ops.num_rows:
        sections.append(Section("top_ops", "Top operators by self time", data=False,
                                table=s.top_ops.select(["name", "calls", "self_ns", "total_ns", "self_pct"])))
    if s.top_kernels.num_rows:
        kernels = s.top_kernels.select(["name", "kind", "calls", "total_ns", "pct"])
        sections.append(Section("top_kernels", "Top device kernels", data=False, table=kernels))
    sections.append(Section("by_kind", "Time by event kind (self time)", s.by_kind, data=False,
                            legend=BY_KIND_LEGEND))
    if s.warnings:
        sections.append(Section("not_mapped", "Not mapped / recovered", data=False,
                                table=pa.Table.from_pylist([{"count": w["count"], "problem": w["problem"]}
                                                            for w in s.warnings])))
    return Report(sections, title=s.source)


def _migraphx_sections(perf: dict) -> list[Section]:
    """The figures of a ``migraphx-driver perf`` report, as the file printed them (ms)."""
    def ms(key: str) -> str:
        v = perf.get(key)
        return "-" if v is None else f"{v:g} ms"

    fields = [("driver", " ".join(str(x) for x in (perf.get("version"), perf.get("command")) if x) or "-")]
    if "batch_size" in perf:
        fields.append(("batch size", str(perf["batch_size"])))
    if "rate_per_s" in perf:
        fields.append(("rate", f"{perf['rate_per_s']:g} inferences/s (1000 / total ms x batch = "
                               f"{perf.get('rate_computed_per_s', float('nan')):.6g})"))
    if "total_time_ms" in perf:
        spread = ""
        if "min_ms" in perf:
            spread = (f" (min {ms('min_ms')}, max {ms('max_ms')}, mean {ms('mean_ms')}, median {ms('median_ms')};"
                      " the total is the mean of the middle half of the runs)")
        fields.append(("total time", ms("total_time_ms") + spread))
    if "p90_ms" in perf:
        fields.append(("percentiles", f"p90 {ms('p90_ms')}, p95 {ms('p95_ms')}, p99 {ms('p99_ms')}"))
    fields.append(("instructions", f"{perf.get('instructions')}, total {ms('total_instructions_time_ms')} "
                                   f"(sum of the instruction lines {ms('sum_instructions_ms')})"))
    if "overhead_time_ms" in perf:
        pct = [f"{perf[k]:g}%, " if isinstance(perf.get(k), (int, float)) else ""
               for k in ("overhead_pct", "overhead_calculated_pct")]
        fields.append(("overhead", f"{ms('overhead_time_ms')} ({pct[0]}dry run), "
                                   f"{ms('overhead_calculated_ms')} ({pct[1]}total - instructions)"))
    sections = [Section("migraphx", "MIGraphX perf report", fields=fields, data=False)]
    rows = [r for r in perf.get("summary") or [] if isinstance(r, dict)]
    if rows:
        def g(v) -> str | None:  # as MIGraphX printed it (6 significant digits); the JSON records keep the floats
            return None if v is None else f"{v:g}"

        table = pa.Table.from_pylist([{"group": r.get("group"), "total_ms": g(r.get("total_ms")),
                                       "count": r.get("count"), "average_ms": g(r.get("average_ms")),
                                       "pct": r.get("pct")} for r in rows],
                                     schema=pa.schema([("group", pa.string()), ("total_ms", pa.string()),
                                                       ("count", pa.int64()), ("average_ms", pa.string()),
                                                       ("pct", pa.float64())]))
        sections.append(Section("migraphx_summary", "MIGraphX Summary (per group, as printed)", table=table,
                                data=False, limit=10,
                                legend="pct: MIGraphX's ceil(100 x total / total instructions time)"))
    return sections


def _step_names(trace: Trace, steps) -> str:
    """Step numbers as the trace names them ("ProfilerStep#4", "model_run #4"), never a bare number read as a
    count."""
    marker = step_marker(trace)
    return ", ".join(f"{marker}{n}" for n in steps)


def _device_ids(devices) -> str:
    """Device ids labelled as ids ("device id 2", "device ids 0, 1"): a bare "2" reads as a count."""
    if not devices:
        return "device id unknown"
    return f"device id{'s' if len(devices) > 1 else ''} {', '.join(map(str, devices))}"


def ops_report(trace: Trace, by: list[str], filt: EventFilter, sort: str, kinds: str, limit: int | None) -> Report:
    """Per operator: calls, total, self, avg/min/max and share of self time; the Python API behind it."""
    from opscope.analyses.ops import op_table

    table = op_table(trace, by=by, filt=filt, sort=sort, python_api=True)
    return single(table, f"Operators ({kinds}) by {sort}", limit,
                  legend="self_pct: share of the self time of all rows; total_ns includes nested ops; total_pct: "
                         "share of the time any listed op ran (their union, overlaps once) during which this "
                         "row's op ran, so nested ops never take more than 100%.")


def gpu_ops_report(trace: Trace, by: list[str], filt: EventFilter, sort: str, kinds: str, names: Names,
                   limit: int | None) -> Report:
    """Per operator: the device work it launched (itself or through the ops it called)."""
    from opscope.analyses.ops import gpu_op_table

    table = gpu_op_table(trace, by=by, filt=filt, sort=sort, names=names)
    legend = ("gpu_ns: device time of the kernels/memcpys/memsets launched inside the op (nested ops included); "
              "cpu_ns: the op's total host time; top_kernels: share of the op's gpu_ns")
    if not table.num_rows:
        legend = "no device work linked to these ops (a CPU-only profile, or no launch inside an op)"
    return single(table, f"Operators ({kinds}) by device time launched, sorted by {sort}", limit, legend=legend)


def kernels_report(trace: Trace, filt: EventFilter, by_op: bool, sort: str, names: Names,
                   limit: int | None, details: bool = False) -> Report:
    """Per device kernel (and memcpy/memset): calls, times, share of device time, streams; with ``details``, per
    kernel and launch configuration (grid, block) with the resources the profiler recorded."""
    from opscope.analyses.kernels import kernel_table

    if details:
        if by_op:
            raise UsageError("--details and --by-op: pick one (launch details are per kernel and launch "
                             "configuration, not per launching op)")
        return kernel_launch_report(trace, filt, sort, names, limit)
    table = kernel_table(trace, filt, by_op=by_op, sort=sort, names=names)
    legend = None if table.num_rows else "no device kernels in this trace (a CPU-only profile?)"
    return single(table, "Device kernels", limit, legend=legend)


#: What the launch-detail columns mean (the legend of ``kernels --details``).
LAUNCH_LEGEND = (
    "one row per kernel and launch configuration (grid, block: the three dimensions as the profiler wrote them); "
    "registers_per_thread and shared_memory_bytes (per block, static and dynamic together as Kineto writes them): "
    "the largest of the row's launches (*_varies: its launches differ); occupancy_pct: the profiler's estimate of "
    "achieved occupancy (Kineto computes it from the launch and the device's limits; it is not measured), "
    "theoretical_occupancy_pct: older Kineto's theoretical occupancy, blocks_per_sm and warps_per_sm: the grid "
    "spread over the device's SMs (means over the row's launches); tensor_cores: the trace's own Tensor Core arg, "
    "as written; a field the trace does not record is empty")


def kernel_launch_report(trace: Trace, filt: EventFilter, sort: str, names: Names, limit: int | None) -> Report:
    """``opscope kernels --details``: per (kernel, grid, block), time and the launch's recorded resources, with a
    note saying which fields the trace records."""
    from opscope.analyses.kernel_launch import kernel_launch_table, recorded

    table = kernel_launch_table(trace, filt, sort=sort, names=names)
    if not table.num_rows:
        return single(table, "Kernel launch details", limit,
                      legend="no device kernels in this trace (a CPU-only profile?)")
    have, lacks = recorded(table)
    if have:
        note = f"the trace records {', '.join(have)}"
        if lacks:
            note += f"; not {', '.join(lacks)} (those columns are empty)"
    else:
        note = "the trace records no launch details for these kernels (every launch column is empty)"
    columns = {c: Column(hide_if_zero=True) for c in ("theoretical_occupancy_pct", "tensor_cores",
                                                      "registers_varies", "shared_memory_varies")}
    columns["shared_memory_bytes"] = Column(unit="bytes")
    return single(table, "Kernel launch details", limit, legend=LAUNCH_LEGEND, notes=[note], columns=columns)


def steps_report(trace: Trace, limit: int | None, run: dict | None = None, analysis=None) -> Report:
    """Per step: duration, device busy inside the step and device time of the work it launched, outliers.
    ``run``: the recording's run.json, to say when the profiler made the recorded steps slower; ``analysis``: the
    trace's GpuAnalysis when the caller has one."""
    from opscope.analyses.gpu import step_device_table
    from opscope.analyses.recording import step_inflation
    from opscope.analyses.steps import step_stats

    table = step_device_table(trace, analysis)
    if table.num_rows == 0:
        legend = f"{NO_STEPS} (with torch.profiler, use its schedule/step())"
    else:
        st = step_stats(table)
        legend = (f"mean {format_ns(st.mean_ns)}, median {format_ns(st.median_ns)}, p90 {format_ns(st.p90_ns)} "
                  f"over the {st.count} steps")
        if st.excluded:
            legend += (f" (outliers {_step_names(trace, st.excluded)}: without them mean "
                       f"{format_ns(st.typical_mean_ns)})")
        legend += ("\ngpu_busy: device busy inside the step's interval, any device, overlaps once (as opscope gpu "
                   "counts it), % of the step less unseen_busy_ns (time a device spent on work the trace does not "
                   "show, see opscope gpu); launched_gpu_ns: device time of the work launched in the step, "
                   "wherever it ran (work launched near the end runs into the next step, so it can exceed dur_ns)")
    marker = step_marker(trace)
    notes = [f"window: each row's own step, its {marker}N's start to end"] if table.num_rows else []
    # two ProfilerStep annotations with one number (a restarted schedule, two threads) are two rows: say so
    repeated = table.num_rows - pc.count_distinct(table["step"]).as_py() if table.num_rows else 0
    if repeated:
        notes.append(f"{repeated} rows repeat a step number already listed ({marker}N marked more than "
                     "once); each is its own interval")
    inflation = step_inflation(run)
    if table.num_rows and inflation is not None and inflation.inflated:
        notes.append(inflation.line())
    columns = {"unseen_busy_ns": Column(hide_if_zero=True)}
    if limit or table.num_rows <= STEPS_TERMINAL_ROWS:
        return single(table, "Steps", limit, legend=legend, notes=notes, columns=columns)
    # tens of thousands of steps took minutes to lay out on the terminal: show the first rows there (said);
    # the data formats still write every step
    shown = [*notes, f"the terminal shows the first {STEPS_TERMINAL_ROWS} of {table.num_rows} steps "
                     "(--limit N for more, -f json/csv for all)"]
    return Report(sections=[
        Section("rows", "Steps", table, legend=legend, notes=shown, limit=STEPS_TERMINAL_ROWS, columns=columns,
                data=False),
        Section("rows", "Steps", table, notes=notes, columns=columns, terminal=False)])


#: rows ``opscope steps`` shows on the terminal when no --limit is given
STEPS_TERMINAL_ROWS = 1000


GpuPart = Literal["breakdown", "idle", "launches"]
_CONCURRENCY = ("streams", "launch_threads", "concurrent_ns", "concurrent_pct", "max_concurrent_streams")


def gpu_report(trace: Trace, short_gap_ns: int, only: GpuPart | None, limit: int | None, analysis=None) -> Report:
    """Device time per device and stream, idle time by cause, concurrency and launches (or ``only`` one).
    ``analysis``: the trace's GpuAnalysis with this ``short_gap_ns`` when the caller has one."""
    from opscope.analyses.gpu import gpu_analysis
    from opscope.analyses.idle import IDLE_NOTE

    if analysis is None or analysis.short_gap_ns != short_gap_ns:
        analysis = gpu_analysis(trace, short_gap_ns)
    breakdown = analysis.breakdown()
    if breakdown.num_rows == 0:
        return Report([Section("breakdown", table=breakdown)], empty=analysis.notes()[0])
    idle_note = IDLE_NOTE.format(short=format_ns(analysis.short_gap_ns))
    hidden = {"window_ns": Column(show="data"), "clipped": Column(hide_if_zero=True),
              "unseen_busy_ns": Column(hide_if_zero=True)}
    hidden.update({n: Column(hide_if_zero=True) for n in breakdown.column_names if n.startswith("memcpy_")})
    sections = {
        "breakdown": Section("breakdown", "GPU time per device and stream", breakdown, notes=analysis.notes,
                             limit=limit or None, columns=hidden),
        "idle": Section("idle", "Idle time by cause, per device", analysis.idle, notes=[idle_note],
                        limit=limit or None),
        "launches": Section("launches", table=analysis.launches, notes=analysis.launch_notes, limit=limit or None,
                            parts=[("Concurrency of streams, per device", ("device", *_CONCURRENCY)),
                                   ("Launches, per device", ())]),  # () = the other columns
    }
    chosen: list[GpuPart] = [only] if only else ["breakdown", "idle", "launches"]
    return Report([replace(sections[name], data=i == 0) for i, name in enumerate(chosen)])


MemoryView = Literal["peak", "holders", "allocations", "timeline", "counters"]
_MEMORY_TITLES = {"peak": "Peak memory per device (times after the trace start)",
                  "holders": "Held at each device's peak, by the op that allocated it",
                  "allocations": "Allocations by op", "counters": "Memory counters"}


@memoized(keep=True, ignore=("make",))  # each table is kept in the cache entry for the next command with these options
def _memory_view(trace: Trace, view: str, steps: list[int] | None, devices: list[str] | None, sort: str, buckets: int,
                 make: Callable[[], pa.Table]) -> pa.Table:
    """The table of memory_report's ``view``, which ``make`` makes from the records of these steps and devices."""
    return make()


def memory_report(trace: Trace, view: MemoryView | None, timeline: int, devices: list[str] | None, sort: str,
                  steps: list[int] | None, limit: int | None) -> Report:
    """Memory per device: peaks, holders at the peak, allocations by op, counters, a timeline."""
    from opscope.analyses import memory as mem

    rec = mem.memory_records(trace, steps=steps, devices=devices)
    counters = mem.counter_table(trace)
    if rec.table.num_rows == 0 and counters.num_rows == 0:
        empty = mem.NO_RECORDS if not steps else "no memory records in these steps"
        return Report([Section("peak", table=mem.peak_table(rec))], empty=empty)
    buckets = timeline or 20
    data: MemoryView = view or ("timeline" if timeline else "peak")
    shown: list[MemoryView] = [view] if view else ["peak", "holders", "allocations", "counters"]
    if timeline and not view:
        shown.append("timeline")
    if not view and counters.num_rows == 0:
        shown.remove("counters")

    def peak() -> pa.Table:
        table = mem.peak_table(rec)
        return table.append_column("over_time", _per_device(mem.timeline_table(rec, 24), table["device"]))

    def over_time() -> pa.Table:
        table = mem.timeline_table(rec, buckets)
        return table.append_column("allocated", table["allocated_bytes"])

    def kept(view: str, make: Callable[[], pa.Table]) -> Callable[[], pa.Table]:
        return lambda: _memory_view(trace, view, steps, devices, sort, buckets, make)

    tables = {"peak": kept("peak", peak), "holders": kept("holders", lambda: mem.holders_table(rec, sort)),
              "allocations": kept("allocations", lambda: mem.allocation_table(rec, sort)),
              "timeline": kept("timeline", over_time), "counters": lambda: counters}
    titles = {**_MEMORY_TITLES, "timeline": f"Memory over time ({buckets} buckets)"}
    columns = {"over_time": Column(show="terminal", sketch="sparkline", scale="peak_allocated_bytes"),
               "allocated": Column(show="terminal", sketch="bar", scale="device")}
    whole = ("peak", "timeline")  # the terminal shows these whole; the data document is cut at --limit
    sections = [Section(v, titles[v], tables[v], limit=None if v in whole else limit or None, columns=columns,
                        data=v == data and v not in whole) for v in shown]
    if data in whole or data not in shown:
        sections.append(Section(data, table=tables[data], limit=limit or None, columns=columns, terminal=False))
    return Report(sections, notes=rec.notes())


def _per_device(line: pa.Table, devices: pa.ChunkedArray) -> pa.Array:
    """Each device's allocated bytes over the timeline's buckets, as one list per device."""
    values: dict[str, list[int | None]] = {}
    for d, v in zip(line["device"].to_pylist(), line["allocated_bytes"].to_pylist()):
        values.setdefault(d, []).append(v)
    return pa.array([values.get(d, []) for d in devices.to_pylist()], pa.list_(pa.int64()))


_TREE_COLUMNS = {"path": Column(show="data"), "depth": Column(show="data")}


def scope_report(trace: Trace, filt: EventFilter, sort: str, max_depth: int | None, limit: int | None) -> Report:
    """Op time by nn.Module, as a tree of module paths."""
    from opscope.analyses.views import module_tree, tree_table

    tree = module_tree(trace, filt)
    table = tree_table(tree, sort, max_depth, "module")
    if tree.note:
        return Report([Section("tree", table=table)], empty=tree.note)
    return single(table, f"Op time by module, siblings by {sort}", limit,
                  legend="total_ns: op time in the module and below; self_ns: directly in it; wall_ns: its calls' "
                         "duration; pct: share of all selected op time",
                  columns={"module": Column(indent_by="depth"), **_TREE_COLUMNS})


def code_report(trace: Trace, filt: EventFilter, frames: str | None, flat: bool, sort: str,
                max_depth: int | None, limit: int | None) -> Report:
    """Op time by Python stack frame, as a tree of call paths or one row per frame."""
    from opscope.analyses.views import code_tree, flat_table, tree_table

    tree = code_tree(trace, filt, frames=frames)
    table = flat_table(tree, sort, "frame") if flat else tree_table(tree, sort, max_depth, "frame")
    if tree.note:
        return Report([Section("tree", table=table)], empty=tree.note)
    shape = "by frame" if flat else "by call path, siblings"
    return single(table, f"Op time {shape} by {sort}", limit,
                  legend="total_ns: op time under the frame; self_ns: in ops whose innermost frame it is; wall_ns: "
                         "the frame's own duration; pct: share of all selected op time",
                  columns={"frame": Column(indent_by=None if flat else "depth"), **_TREE_COLUMNS})


_NUMERICS_VIEW = ("index", "op", "module", "backward", "output_index", "shape", "dtype", "min", "max", "mean", "std",
                  "nan_count", "inf_count")


def numerics_report(table: pa.Table, sort: str, limit: int | None) -> Report:
    """Every recorded op output with its statistics; the first NaN/Inf output and its op's inputs."""
    from opscope.analyses.numerics import first_nonfinite, sort_rows

    columns = {name: Column(show="data") for name in table.column_names if name not in _NUMERICS_VIEW}
    columns["inputs"] = Column(show="json")  # nested: in the JSON output and the dump
    row = first_nonfinite(table)
    if row is None:
        line = "no NaN or Inf in any recorded output"
    else:
        line = (f"first non-finite output: op {row['op']} in module {row['module'] or '(none)'} (index "
                f"{row['index']}, output {row['output_index']}: {row['nan_count']} NaN, {row['inf_count']} Inf, "
                f"shape {row['shape']})")
    sections = [Section("outputs", f"Op outputs by {sort}", sort_rows(table, sort), notes=[line], limit=limit or None,
                        legend="min/max/mean/std over the finite values (std: population)", columns=columns)]
    if row is not None and row["inputs"]:
        sections.append(Section("inputs", f"Inputs of {row['op']} (before it ran)",
                                pa.Table.from_pylist(row["inputs"]), data=False))
    return Report(sections)


def critical_path_report(trace: Trace, top: int, limit: int | None, region: str | None = None) -> Report:
    """Per step (per instance of ``region``): the time each category holds on the critical path, and the names with
    the most time on it."""
    from opscope.analyses.critical_path import breakdown_table, on_path_table
    from opscope.analyses.depgraph import LATENCY_CAP_NS

    table = breakdown_table(trace, region)
    if table.num_rows == 0:
        empty = (f"no host region matches {region!r} (annotations and ops, by name): see opscope ops --kinds "
                 "user_annotation" if region is not None else
                 "nothing to follow: the trace has no host events (its steps and their work cannot be placed)")
        return Report(title=str(trace.metadata.get("source")), empty=empty, sections=[Section("path", table=table)])
    if region is not None:
        window = (f"each instance of the regions matching {region!r} (outermost where they nest), numbered from 1 in "
                  "start order in the step column, its start to its end")
    elif trace.steps.num_rows:
        window = "each step, its start to its end"
    else:
        window = f"the whole trace as one interval ({NO_STEPS}): its busiest host thread's first to last event"
    legend = ("ns: time the category holds on the step's critical path (the chain of work and waits that set the "
              "step's length, walked back from its end through whatever bound each start); share: of the step "
              "(the parts add up to 100%). A lag before a piece of work counts in the work's category (a launch's "
              f"latency, a queue's gap, a wait's wake-up) up to {format_ns(LATENCY_CAP_NS)}; beyond, as unexplained: "
              "the work waited on something the trace does not show. python / host untraced: a thread's time "
              "outside any op (in Python frames, or not traced at all)")
    on_path = on_path_table(trace, top, region)
    return Report(title=str(trace.metadata.get("source")), sections=[
        Section("path", "Critical path by category", table, legend=legend, notes=[f"window: {window}"],
                limit=limit),
        Section("on_path", f"Most time on the critical path (top {top} per step)", on_path, data=False,
                legend="path_ns: the name's time on the path (its own time and the lags charged to it: a kernel's "
                       "launch latency, a wait's wake-up); own_ns: its own time alone; pieces: the slices of it on "
                       "the path (an op is cut where its children start and end)"),
    ])


def whatif_report(trace: Trace, changes: list, limit: int | None) -> Report:
    """Per step: measured, replayed with no change and predicted with the changes."""
    from opscope.analyses.whatif import whatif_table

    table, picked = whatif_table(trace, changes)
    if table.num_rows == 0:
        return Report(title=str(trace.metadata.get("source")), empty="nothing to replay: the trace has no host "
                      "events", sections=[Section("whatif", table=table)])
    return _whatif_report(str(trace.metadata.get("source")), table, changes, picked, limit, [])


def job_whatif_report(traces: dict, changes: list, limit: int | None, spec: str) -> Report:
    """Per rank and step of a job: measured, replayed with no change and predicted with the changes, the ranks
    joined at their collectives."""
    from opscope.analyses.job.replay import job_whatif_table

    table, picked, job = job_whatif_table(traces, changes)
    if table.num_rows == 0:
        return Report(title=spec, empty="nothing to replay: the ranks' traces have no host events",
                      sections=[Section("whatif", table=table)])
    notes = [f"{len(job.ranks)} rank(s) on one clock; {job.joins:,} collective instance(s) joined across them (each "
             "ends when its last rank has arrived, plus its transfer)", *job.notes]
    return _whatif_report(spec, table, changes, picked, limit, notes)


def _whatif_report(title: str, table: pa.Table, changes: list, picked: list[int], limit: int | None,
                   notes: list[str]) -> Report:
    """The what-if report: the headline over the steps (a job's step: its slowest rank's), the table, the legend."""
    said = ", ".join(f"{change} ({count:,} pieces)" for change, count in zip(changes, picked)) or "none"
    slowest: dict = {}
    for row in table.select(["step", "measured_ns", "replayed_ns", "predicted_ns"]).to_pylist():
        values = slowest.setdefault(row["step"], [0, 0, 0])
        for k, name in enumerate(("measured_ns", "replayed_ns", "predicted_ns")):
            values[k] = max(values[k], row[name])
    measured, replayed, predicted = (sum(values[k] for values in slowest.values()) for k in range(3))
    ranks = len(set(table["rank"].to_pylist()))
    over = f"{len(slowest)} step(s)" + (f" of {ranks} ranks (each step's slowest rank)" if ranks > 1 else "")
    headline = (f"{said}: {format_ns(predicted)} predicted against {format_ns(replayed)} replayed "
                f"({format_pct(share_pct(predicted - replayed, replayed))}) over {over}; the "
                f"replay gives back {format_ns(measured)} measured within "
                f"{format_pct(share_pct(abs(replayed - measured), measured))}")
    legend = ("measured_ns: the step as recorded; replayed_ns: the trace's dependency graph replayed with no change "
              "(every start derived from what it waited for and the measured durations: how close it comes to "
              "measured_ns is the model's error); predicted_ns: replayed with the changes; change_pct: predicted "
              "against replayed; rank: the trace's distributed rank (empty where it records none). Method: "
              "simulated (opscope critical-path shows what bounds each step)")
    return Report(title=title, headline=headline, legend=legend, sections=[
        Section("whatif", "Steps replayed with the changes", table, limit=limit,
                notes=[f"changes: {said}", *notes])])


def roofline_report(trace: Trace, peaks: Peaks | None, how: str, by: str, limit: int | None) -> Report:
    """The roofline table (per op, shapes and dtype, or per kernel) with the device's roofs and the coverage."""
    from opscope.analyses.roofline import roofline_table

    table, notes = roofline_table(trace, peaks, by)
    title = str(trace.metadata.get("source"))
    if table.num_rows == 0:
        return Report(title=title, empty="no device work of an op with a work model: " + "; ".join(notes),
                      sections=[Section("roofline", table=table)], notes=[how])
    legend = ("flops, bytes: per call, from the op's shapes (a multiply-add counts 2; bytes: each input read and each "
              "output written once); device_ns: the device work the calls launched (kernels, copies, fills); "
              "achieved_tflops, achieved_gbps: the work over that time; intensity: FLOPs per byte; peak_tflops (the "
              "dtype's dense peak) and peak_gbps (memory bandwidth): the device's roofs; pct_of_roof: achieved over "
              "the roof at that intensity (the lower of the compute roof and bandwidth x intensity); bound: which "
              "roof that is; saving_at_roof_ns: the device time the row would save at its roof (sorted by it)")
    roofs = "" if peaks is None else "; roofs: " + ", ".join(
        f"{dtype} {tflops:g} TFLOP/s" for dtype, tflops in peaks.tflops.items()) + f", memory {peaks.gbps:g} GB/s"
    data_only = {name: Column(show="data") for name in ("peak_tflops", "peak_gbps", "achieved_gbps", "family")}
    return Report(title=title, headline=how + roofs, sections=[
        Section("roofline", "Roofline " + ("by kernel" if by == "kernel" else "by op, shapes and dtype"), table,
                legend=legend, limit=limit, notes=notes, columns=data_only)])
