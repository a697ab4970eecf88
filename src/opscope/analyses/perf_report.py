"""What ``opscope perf MODEL.onnx`` reports: ``migraphx-driver perf``'s report, computed from an ONNX Runtime profile.

A pure function of the profile as opscope reads it (the ONNX Runtime reader's contract): each ``model_run`` is a
step (``trace.steps``, one per measured run) and each node run a ``cpu_op`` event named by its op type, in
category ``Node``, whose args hold ``node`` (the node's name), ``provider`` and ORT's input/output types and shapes.

The figures follow MIGraphX 2.x's ``program::perf_report`` (src/program.cpp):
- a node's time is the **common average** of its per-run times: the runs sorted, a quarter cut from each end,
  the mean of the middle half; the total time is the common average of the ``model_run`` durations;
- a node's share is ``ceil(100 * time / total node time)`` (shares can add up to more than 100, as MIGraphX's do);
- the Summary groups nodes by op type: total / count = average, share as above, largest first;
- Rate = 1000 / total ms x batch; Min/Max/Mean/Median of the run times; percentile p = the sorted run times at
  index floor(p * (n - 1));
- total node time = the sum of the per-node times, exactly; overhead 2 = total time - total node time.
- Overhead 1: MIGraphX times a ``dry_run`` (the program walked without running the instructions). ONNX Runtime has
  none; its analogue here is the time a run spends outside its executor: ``model_run`` minus
  ``SequentialExecutor::Execute`` (input/output checks, fetch allocation), common average over the runs.
Overhead percentages are ``round(100 * overhead / total)``.

Beside MIGraphX's figures, each node's per-run times and the runs' totals have their spread from
:mod:`opscope.analyses.noise`: median, 10th and 90th percentiles (interpolated between order statistics, unlike
MIGraphX's ``percentile``) and the number of runs.

All times come from ONNX Runtime's profiler, so they include the profiler's own cost per node.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from opscope.analyses import noise
from opscope.analyses.event_args import args_by_id
from opscope.model.schema import kind_mask
from opscope.model.trace import Trace
from opscope.report import Column, Report, Section

NODE_CATEGORY = "Node"
EXECUTOR_SUFFIX = "Executor::Execute"  # SequentialExecutor::Execute (ParallelExecutor::Execute in parallel mode)
PROFILER_NOTE = ("times are ONNX Runtime's profiler's (SessionOptions.enable_profiling): they include the "
                 "profiler's own cost per node")
AVERAGE_NOTE = ("per-node and total times are MIGraphX's common average over the runs: the mean of the middle "
                "half of the sorted per-run times")
OVERHEAD_NOTE = ("overhead 1 = time a run spends outside ONNX Runtime's executor (model_run minus "
                 "SequentialExecutor::Execute; MIGraphX's is a dry run); overhead 2 = total time - total node time")


def common_average(values: Sequence[float]) -> float:
    """MIGraphX's ``common_average``: the mean of ``values`` (sorted) without a quarter at each end."""
    v = sorted(values)
    n = len(v) // 4
    middle = v[n:len(v) - n]
    return sum(middle) / len(middle)


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """MIGraphX's ``percentile``: the value at index floor(p * (n - 1)) of the sorted values."""
    return sorted_values[int(p * (len(sorted_values) - 1))]


@dataclass
class PerfNumbers:
    """Everything the report shows. Times in milliseconds, per run."""

    #: index (execution order), node, op, provider, runs, time_ms, pct, inputs, output
    nodes: list[dict[str, Any]]
    #: op, total_ms, count, average_ms, pct (largest first)
    op_types: list[dict[str, Any]]
    batch: int
    runs: int
    total_ms: float
    min_ms: float
    max_ms: float
    mean_ms: float
    median_ms: float
    percentiles_ms: tuple[float, float, float]  # 90, 95, 99
    node_total_ms: float
    overhead_ms: float | None  # outside the executor (MIGraphX: dry run)
    overhead_calc_ms: float  # total - Σ nodes
    notes: list[str] = field(default_factory=list)
    #: the runs' totals: median, p10, p90 (ms) and runs (:func:`opscope.analyses.noise.spread`)
    spread: noise.Spread | None = None

    @property
    def rate(self) -> float:
        """Inferences per second: 1000 / total ms x batch."""
        return 1000.0 / self.total_ms * self.batch if self.total_ms > 0 else math.inf

    def overhead_pct(self, value: float | None) -> int | None:
        return None if value is None or self.total_ms <= 0 else round(100.0 * value / self.total_ms)

    @property
    def spread_note(self) -> str | None:
        """A warning when the runs' times spread so widely that the rate (from the middle half of the runs) does not
        describe them: their mean or their 90th percentile far above the middle-half average. None when steady."""
        p90 = self.percentiles_ms[0]
        if self.total_ms <= 0 or (self.mean_ms <= WIDE_MEAN * self.total_ms and p90 <= WIDE_P90 * self.total_ms):
            return None
        mean_rate = 1000.0 / self.mean_ms * self.batch if self.mean_ms > 0 else math.inf
        return (f"the runs' times spread widely: middle-half average {_ms(self.total_ms)}, median "
                f"{_ms(self.median_ms)}, mean {_ms(self.mean_ms)}, p90 {_ms(p90)}, max {_ms(self.max_ms)} over "
                f"{self.runs} runs. The rate ({self.rate:.6g}/s) describes the middle half only; from the mean it "
                f"is {mean_rate:.6g}/s. A busy host or runs that are not steady: rerun on an idle machine, or with "
                f"more runs (-n)")


#: The runs spread too widely for the middle-half average to describe them when their mean is above WIDE_MEAN x it, or
#: their 90th percentile above WIDE_P90 x it (steady runs on an idle host stay within a few percent of both).
WIDE_MEAN = 1.25
WIDE_P90 = 1.5


def perf_numbers(trace: Trace, batch: int = 1) -> PerfNumbers:
    """The report's figures from an ONNX Runtime profile read by opscope; ValueError when it holds no runs."""
    steps = trace.steps.sort_by("step")
    if steps.num_rows == 0:
        raise ValueError("holds no model_run events (no ONNX Runtime runs to report)")
    run_ids = steps["step"].to_pylist()
    run_ms = {s: d / 1e6 for s, d in zip(run_ids, steps["dur_ns"].to_pylist())}
    events = trace.select(["kind", "name", "cat", "ts_ns", "dur_ns", "step", "event_id"])
    nodes_mask = pc.and_(kind_mask(events, ["cpu_op"]),
                         pc.fill_null(pc.equal(pc.cast(events["cat"], pa.string()), NODE_CATEGORY), False))
    node_events = events.filter(nodes_mask).sort_by([("ts_ns", "ascending")])
    args = args_by_id(trace, node_events["event_id"].to_pylist())
    notes: list[str] = []

    per_run: dict[str, dict[int, float]] = {}  # node -> step -> ms in that run
    info: dict[str, dict[str, Any]] = {}
    first_seen: dict[str, tuple[int, int]] = {}
    outside = 0
    for op, ts, dur, step, eid in zip(pc.cast(node_events["name"], pa.string()).to_pylist(),
                                      node_events["ts_ns"].to_pylist(), node_events["dur_ns"].to_pylist(),
                                      node_events["step"].to_pylist(), node_events["event_id"].to_pylist()):
        if step is None or step not in run_ms:
            outside += 1
            continue
        a = args.get(eid, {})
        node = str(a.get("node") or op)
        runs = per_run.setdefault(node, {})
        runs[step] = runs.get(step, 0.0) + dur / 1e6
        first_seen.setdefault(node, (step, ts))
        info.setdefault(node, {"op": op, "provider": a.get("provider"), "node_index": a.get("node_index"),
                               "inputs": _types_text(a.get("input_type_shape")),
                               "output": _types_text(a.get("output_type_shape"))})
    if outside:
        notes.append(f"{outside} node events lie outside every model_run and are left out")

    order = sorted(per_run, key=lambda n: first_seen[n])
    times = {n: common_average([per_run[n].get(s, 0.0) for s in run_ids]) for n in order}
    node_total = sum(times[n] for n in order)
    nodes = [{"index": i, "node": n, **info[n], "runs": len(per_run[n]), "time_ms": times[n],
              "pct": _share(times[n], node_total), "spread": noise.spread([per_run[n].get(s, 0.0) for s in run_ids])}
             for i, n in enumerate(order)]

    groups: dict[str, list[float]] = {}
    for n in order:
        groups.setdefault(info[n]["op"], []).append(times[n])
    op_types = [{"op": op, "total_ms": sum(ts_), "count": len(ts_), "average_ms": sum(ts_) / len(ts_),
                 "pct": _share(sum(ts_), node_total)} for op, ts_ in groups.items()]
    op_types.sort(key=lambda r: (r["total_ms"], r["count"], r["op"]), reverse=True)

    totals = sorted(run_ms.values())
    total = common_average(totals)
    spread = noise.spread(totals)
    return PerfNumbers(
        nodes=nodes, op_types=op_types, batch=batch, runs=len(totals), total_ms=total, min_ms=totals[0],
        max_ms=totals[-1], mean_ms=sum(totals) / len(totals),
        median_ms=spread.median if spread else totals[0],
        percentiles_ms=(percentile(totals, 0.90), percentile(totals, 0.95), percentile(totals, 0.99)),
        node_total_ms=node_total, overhead_ms=_outside_executor(events, run_ms), overhead_calc_ms=total - node_total,
        notes=notes, spread=spread)


def _share(value: float, whole: float) -> int:
    return math.ceil(100.0 * value / whole) if whole > 0 else 0


def _outside_executor(events: pa.Table, run_ms: dict[int, float]) -> float | None:
    """Common average over the runs of model_run minus its executor's span(s); None without executor events."""
    names = pc.cast(events["name"], pa.string())
    mask = pc.fill_null(pc.ends_with(names, EXECUTOR_SUFFIX), False)
    execs = events.filter(mask)
    if execs.num_rows == 0:
        return None
    inside: dict[int, float] = {}
    for step, dur in zip(execs["step"].to_pylist(), execs["dur_ns"].to_pylist()):
        if step is not None and step in run_ms:
            inside[step] = inside.get(step, 0.0) + dur / 1e6
    if len(inside) != len(run_ms):
        return None
    return common_average([run_ms[s] - inside[s] for s in run_ms])


def _types_text(value: Any) -> str:
    """ORT's ``[{"float":[8,3,112,112]}, ...]`` as ``float[8,3,112,112], ...``."""
    if not isinstance(value, list):
        return ""
    parts = []
    for item in value:
        if isinstance(item, dict):
            for dtype, dims in item.items():
                parts.append(f"{dtype}[{','.join(map(str, dims)) if isinstance(dims, list) else dims}]")
    return ", ".join(parts)


# --- the report -----------------------------------------------------------------------------------

def _ms(value: float) -> str:
    """A time as MIGraphX prints one (C++ ostream's default: 6 significant digits)."""
    return f"{value:.6g}ms"


def migraphx_text(p: PerfNumbers) -> str:
    """The report in ``migraphx-driver perf``'s words and layout."""
    lines = [f"{n['node']} = {n['op']}({n['inputs']}) -> {n['output']}: {_ms(n['time_ms'])}, {n['pct']}%"
             for n in p.nodes]
    lines += ["", "Summary:"]
    lines += [f"{o['op']}: {_ms(o['total_ms'])} / {o['count']} = {_ms(o['average_ms'])}, {o['pct']}%"
              for o in p.op_types]
    p90, p95, p99 = p.percentiles_ms
    o1 = _ms(p.overhead_ms) if p.overhead_ms is not None else "n/a"
    pct1 = f"{p.overhead_pct(p.overhead_ms)}%" if p.overhead_ms is not None else "n/a"
    lines += ["", f"Batch size: {p.batch}", f"Rate: {p.rate:.6g} inferences/sec",
              f"Total time: {_ms(p.total_ms)} (Min: {_ms(p.min_ms)}, Max: {_ms(p.max_ms)}, Mean: {_ms(p.mean_ms)}, "
              f"Median: {_ms(p.median_ms)})",
              f"Percentiles (90%, 95%, 99%): ({_ms(p90)}, {_ms(p95)}, {_ms(p99)})",
              *([f"Spread: median {_ms(p.spread.median)}, p10-p90 {_ms(p.spread.p10)}-{_ms(p.spread.p90)} over "
                 f"{p.spread.n} runs"] if p.spread else []),
              f"Total node time: {_ms(p.node_total_ms)}",
              f"Overhead time: {o1}, {_ms(p.overhead_calc_ms)}",
              f"Overhead: {pct1}, {p.overhead_pct(p.overhead_calc_ms)}%"]
    return "\n".join(lines)


PERF_COLUMNS = pa.schema([
    ("section", pa.string()), ("index", pa.int64()), ("name", pa.string()), ("op", pa.string()),
    ("provider", pa.string()), ("count", pa.int64()), ("value", pa.float64()), ("unit", pa.string()),
    ("pct", pa.int64()), ("median", pa.float64()), ("p10", pa.float64()), ("p90", pa.float64()),
])
PERF_LEGEND = ("one row per node (section node: its time per run in ms, runs, share of total node time, "
               "ceil'd), per op type (section op_type: total ms over count nodes, share) and per figure "
               "(section total: batch, rate, total time and its min/max/mean/median/p90/p95/p99, total node time, "
               "overhead_executor and overhead_calc with their share of the total time, rounded); median, p10, "
               "p90: the spread over the runs of a node's time per run and (row total_time) of the runs' totals, in "
               "ms, with count runs (p10 and p90 interpolated; the p90 row is MIGraphX's, the sorted time at "
               "floor(0.9 x (runs - 1)))")


def perf_table(p: PerfNumbers) -> pa.Table:
    """The report as one table (the JSON/CSV document)."""
    rows: list[dict[str, Any]] = [
        {"section": "node", "index": n["index"], "name": n["node"], "op": n["op"], "provider": n["provider"],
         "count": n["runs"], "value": n["time_ms"], "unit": "ms", "pct": n["pct"], **_spread(n.get("spread"))}
        for n in p.nodes]
    rows += [{"section": "op_type", "name": o["op"], "op": o["op"], "count": o["count"], "value": o["total_ms"],
              "unit": "ms", "pct": o["pct"]} for o in p.op_types]
    p90, p95, p99 = p.percentiles_ms
    figures: list[tuple[str, float | None, str, int | None]] = [
        ("batch", float(p.batch), "", None), ("rate", p.rate, "inferences/s", None),
        ("total_time", p.total_ms, "ms", None), ("min", p.min_ms, "ms", None), ("max", p.max_ms, "ms", None),
        ("mean", p.mean_ms, "ms", None), ("median", p.median_ms, "ms", None), ("p90", p90, "ms", None),
        ("p95", p95, "ms", None), ("p99", p99, "ms", None), ("total_node_time", p.node_total_ms, "ms", None),
        ("overhead_executor", p.overhead_ms, "ms", p.overhead_pct(p.overhead_ms)),
        ("overhead_calc", p.overhead_calc_ms, "ms", p.overhead_pct(p.overhead_calc_ms)),
    ]
    for name, value, unit, pct in figures:
        rows.append({"section": "total", "name": name, "count": p.runs if name == "total_time" else None,
                     "value": value, "unit": unit, "pct": pct, **(_spread(p.spread) if name == "total_time" else {})})
    return pa.Table.from_pylist(rows, schema=PERF_COLUMNS)


def _spread(s: noise.Spread | None) -> dict[str, float]:
    return {"median": s.median, "p10": s.p10, "p90": s.p90} if s is not None else {}


def perf_report(trace: Trace, batch: int = 1, title: str | None = None, extra_notes: Sequence[str] = ()) -> Report:
    """``migraphx-driver perf``'s report of an ONNX Runtime profile (see the module docstring)."""
    p = perf_numbers(trace, batch)
    spread = p.spread_note
    notes = [*([spread] if spread else []), *extra_notes, *p.notes, PROFILER_NOTE, AVERAGE_NOTE, OVERHEAD_NOTE]
    runs = (f"median {_ms(p.spread.median)}, p10-p90 {_ms(p.spread.p10)}-{_ms(p.spread.p90)}" if p.spread
            else f"median {_ms(p.median_ms)}")
    headline = (f"{p.rate:.6g} inferences/sec at batch {p.batch}; {_ms(p.total_ms)} per run ({p.runs} runs: {runs}; "
                f"mean {_ms(p.mean_ms)}), "
                f"{_ms(p.node_total_ms)} of it in nodes" + ("; WIDE SPREAD, see the note" if spread else ""))
    return Report(
        sections=[
            Section("perf", "Per node, by op type, totals", perf_table(p), legend=PERF_LEGEND, terminal=False,
                    columns={"value": Column(unit="plain")}),
            Section("text", text=migraphx_text(p), data=False),
        ],
        title=title, headline=headline, notes=notes)


# --- trace-eval -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class EvalOutput:
    """One node output as ``MIGRAPHX_TRACE_EVAL=2`` shows it. Stats over the finite values (opscope's numerics
    convention; MIGraphX's take NaN in)."""

    index: int
    node: str
    op: str
    output_index: int
    output: str
    inputs: list[tuple[str, str]]  # (tensor name, "dtype[shape]")
    dtype: str
    shape: list[int]
    numel: int
    classes: list[str]  # of normal, zero, nan, inf, subnormal
    values: list[Any]  # all values when numel <= 10, else first 5 then last 5
    elided: bool
    nan_count: int
    inf_count: int
    first_nonfinite: int | None
    first_nonfinite_kind: str | None
    min: float | None = None
    max: float | None = None
    mean: float | None = None
    std: float | None = None


def _num(value: Any) -> str:
    if isinstance(value, float):
        return "nan" if math.isnan(value) else ("inf" if value == math.inf else
                                                "-inf" if value == -math.inf else f"{value:.6g}")
    return str(value)


def trace_eval_text(outputs: Sequence[EvalOutput]) -> str:
    """Per node output, in graph order, what ``MIGRAPHX_TRACE_EVAL=2`` prints (and where the first NaN/Inf is)."""
    blocks = []
    for o in outputs:
        ins = ", ".join(f"{name}: {t}" for name, t in o.inputs)
        shape = "{" + ", ".join(map(str, o.shape)) + "}"
        lines = [f"Run node: {o.node} = {o.op}({ins}) -> {o.dtype}, {shape}"
                 + (f" [output {o.output_index}: {o.output}]" if o.output_index else "")]
        lines.append(f"Output has {', '.join(o.classes) if o.classes else 'no values'}")
        shown = [_num(v) for v in o.values]
        if o.elided:
            shown = [*shown[:5], "...", *shown[5:]]
        lines.append(f"Output: {', '.join(shown)}")
        if o.min is not None:
            lines.append(f"Min value: {_num(o.min)}, Max value: {_num(o.max)}, Mean: {_num(o.mean)}, "
                         f"StdDev: {_num(o.std)}")
        if o.first_nonfinite is not None:
            lines.append(f"First {'NaN' if o.first_nonfinite_kind == 'nan' else 'Inf'} at index {o.first_nonfinite} "
                         f"(flat; {o.nan_count} NaN, {o.inf_count} Inf)")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def trace_eval_report(outputs: Sequence[EvalOutput], dump: pa.Table, title: str | None = None) -> Report:
    """The trace-eval listing on the terminal; the rows of the numerics dump as the data document."""
    bad = next((o for o in outputs if o.first_nonfinite is not None), None)
    headline = (f"first NaN/Inf: {bad.node} ({bad.op}) output {bad.output_index}, flat index {bad.first_nonfinite}"
                if bad else f"{len(outputs)} node outputs, all finite")
    data = dump.drop_columns(["sample", "inputs"])
    lists = {"first5": Column(show="json"), "last5": Column(show="json")}
    return Report(sections=[Section("outputs", "Node outputs", data, terminal=False, columns=lists),
                            Section("text", text=trace_eval_text(outputs), data=False)],
                  title=title, headline=headline,
                  notes=["Min/Max/Mean/StdDev are over the finite values (population StdDev)"])
