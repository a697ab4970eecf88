"""opscope's critical path against HolisticTraceAnalysis (HTA) 0.5.0's, on HTA's own critical-path test traces.

Shared by ``bench/critical_path_vs_hta.py`` (the figures) and ``tests/integration/test_critical_path_hta.py``.

HTA runs in its own interpreter (:data:`support.hta_live.HTA_PYTHON`): :data:`HTA_CODE` prints, as JSON, its
window, its path (edges in order, each with its weight, type and the event HTA attributes it to), and its
breakdown by ``bound_by``; every time in ns (HTA keeps the trace's us). opscope's side is
:func:`opscope_interval_path`: the dependency graph replayed, and :func:`opscope.analyses.critical_path.step_path`
over the host thread's slices inside the same window (the one HTA's annotation and instance pick), so that a window
that is not a step (a ``record_function`` region, the whole trace) is compared too.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

from support.hta_live import HTA_PYTHON

ROOT = "hta/critical_path"


@dataclass(frozen=True)
class Case:
    """One of HTA's critical-path test traces and the window its tests analyse."""

    key: str
    trace: str  #: under ../shared/traces
    annotation: str  #: HTA's annotation ("" is the whole trace)
    instance: int | None  #: HTA's instance_id
    #: HTA's tests set CRITICAL_PATH_ADD_ZERO_WEIGHT_LAUNCH_EDGE=1 (zero-weight launch edges: same length)
    zero_weight_launch_edges: bool = True
    #: HTA's stored overlaid output for this input (its end-to-end test), under ../shared/traces
    overlay: str | None = None


FORWARD = "[param|pytorch.model.alex_net|0|0|0|measure|forward]"
CASES = (
    Case("simple_add", f"{ROOT}/simple_add/benchmark_result_493459_1694039959_trace.json.gz", FORWARD, 1),
    Case("alexnet", f"{ROOT}/alexnet/benchmark_result_2869224_1695835535_trace.json.gz", FORWARD, 1),
    Case("cuda_event_sync", f"{ROOT}/cuda_event_sync/event_sync_trace.json.gz", "ProfilerStep", 0),
    Case("cuda_event_sync_multi_stream", f"{ROOT}/cuda_event_sync_multi_stream/event_sync_trace.json.gz", "", None),
    Case("end_to_end/simple_add", f"{ROOT}/end_to_end/simple_add/input/trace.json.gz", "", 0,
         zero_weight_launch_edges=False,
         overlay=f"{ROOT}/end_to_end/simple_add/output/overlaid_critical_path_trace.json.gz"),
)

HTA_CODE = r"""
import json, logging, os, sys, tempfile, warnings
args = json.loads(sys.argv[1])
os.environ["CRITICAL_PATH_ADD_ZERO_WEIGHT_LAUNCH_EDGE"] = "1" if args["zero_weight"] else "0"
warnings.filterwarnings("ignore")
logging.disable(logging.CRITICAL)
from hta.analyzers.critical_path_analysis import bound_by
from hta.trace_analysis import TraceAnalysis

US = 1000  # HTA keeps the trace's microseconds, less the trace's first instant (min_ts)
ta = TraceAnalysis(trace_dir=args["dir"])
df = ta.t.get_trace(0)
base = int(ta.t.min_ts)
sym = ta.t.symbol_table.get_sym_table()
index = ta.t.symbol_table.get_sym_id_map()
ann, inst = args["annotation"], args["instance"]
graph, ok = ta.critical_path_analysis(rank=0, annotation=ann, instance_id=inst)
# the window, as critical_path_analysis picks it
if ann == "":  # HTA takes (ts.min, end.max) where its "end" is still in trace time: all of it
    lo, hi = int(df.ts.min()), int((df.ts + df.dur).max())
else:
    ids = [v for k, v in index.items() if ann in k]
    a = df[df.name.isin(ids)]
    first = 0 if inst is None else inst
    lo = int(a.ts[first:first + 1].min())
    hi = int((a.ts + a.dur)[first:first + 1].max())

def event(ev):
    if ev is None or ev < 0:
        return None
    r = df.loc[ev]
    return {"index": int(ev), "name": sym[int(r["name"])], "cat": sym[int(r["cat"])], "stream": int(r["stream"]),
            "ts": (int(r["ts"]) + base) * US, "dur": int(r["dur"]) * US, "correlation": int(r["correlation"]),
            "tid": int(r["tid"])}

nodes = graph.critical_path_nodes
edges = []
for u, v in zip(nodes, nodes[1:]):
    e = graph.edges[u, v]["object"]
    ev = graph.get_event_attribution_for_edge(e)
    info = event(ev)
    row = {"s_name": info["name"] if info else None, "stream": info["stream"] if info else -1,
           "type": e.type.value}
    edges.append({"type": e.type.value, "weight": int(graph.edges[u, v]["weight"]) * US,
                  "raw_weight": int(e.weight) * US, "bound_by": bound_by(row), "event": info,
                  "src": event(graph.node_list[u].ev_idx), "dst": event(graph.node_list[v].ev_idx)})
by_bound = {}
for e in edges:
    by_bound[e["bound_by"]] = by_bound.get(e["bound_by"], 0) + e["raw_weight"]
breakdown = graph.get_critical_path_breakdown()
official = {str(k): int(v) * US for k, v in breakdown.groupby("bound_by").duration.sum().items()}
node = lambda n: {"ts": (int(graph.node_list[n].ts) + base) * US, "is_start": bool(graph.node_list[n].is_start),
                  "event": event(graph.node_list[n].ev_idx)}
out = {"ok": bool(ok), "window": [(lo + base) * US, (hi + base) * US], "first": node(nodes[0]), "last": node(nodes[-1]),
       "length": sum(e["weight"] for e in edges), "by_bound": by_bound, "breakdown": official,
       "edges": edges, "critical_events": sorted(int(x) for x in graph.critical_path_events_set if x >= 0)}
if args.get("overlay"):
    with tempfile.TemporaryDirectory() as tmp:
        written = ta.overlay_critical_path_analysis(0, graph, output_dir=tmp, only_show_critical_events=False)
        import gzip
        with gzip.open(written) as fh:
            evs = json.load(fh)["traceEvents"]
    out["overlay_critical"] = sorted([e["name"], e["ts"] * US if isinstance(e["ts"], int) else round(e["ts"] * US)]
                                     for e in evs if e.get("ph") == "X" and (e.get("args") or {}).get("critical"))
print(json.dumps(out))
"""


def run_hta(case: Case, shared: Path, timeout: float = 300) -> dict:
    """HTA's critical path of ``case`` (its JSON, see the module), run in HTA's interpreter."""
    args = {"dir": str((shared / case.trace).parent), "annotation": case.annotation, "instance": case.instance,
            "zero_weight": case.zero_weight_launch_edges, "overlay": case.overlay is not None}
    done = subprocess.run([str(HTA_PYTHON), "-c", HTA_CODE, json.dumps(args)], capture_output=True, text=True,
                          timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"HTA failed on {case.trace}: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def overlay_critical(path: Path) -> list[list]:
    """The events HTA's overlaid trace marks critical ([name, ts ns], sorted): HTA's stored end-to-end output."""
    import gzip

    with gzip.open(path) as fh:
        evs = json.load(fh)["traceEvents"]
    return sorted([e["name"], _ns(e["ts"])] for e in evs
                  if e.get("ph") == "X" and (e.get("args") or {}).get("critical"))


def _ns(us) -> int:
    """A trace's us as ns, exactly (an epoch in us times 1000 is past a double's 53 bits)."""
    return us * 1000 if isinstance(us, int) else round(Decimal(str(us)) * 1000)


#: Both tools' time on the path, regrouped into parts both can name: ``host`` (HTA's cpu_bound: ops and runtime
#: calls), ``device`` (HTA's gpu_compute_bound and gpu_communication_bound), ``launch/queue lag`` (HTA's
#: gpu_kernel_launch_overhead and gpu_kernel_kernel_overhead; HTA's launch edge starts at the launch call's start,
#: opscope's lag at its end: the call's own time is ``host`` in opscope), ``sync wait`` (a blocking call's time:
#: zero weight in HTA), ``host gap`` (a thread's time outside any op: zero weight in HTA), ``unexplained``
#: (opscope only).
REGROUPED = ("host", "device", "launch/queue lag", "sync wait", "host gap", "unexplained")
HTA_PARTS = {"cpu_bound": "host", "gpu_compute_bound": "device", "gpu_communication_bound": "device",
             "gpu_kernel_launch_overhead": "launch/queue lag", "gpu_kernel_kernel_overhead": "launch/queue lag"}


def hta_parts(hta: dict) -> dict[str, int]:
    """HTA's path weight in :data:`REGROUPED`'s parts (its zero-weight edges hold nothing)."""
    parts = dict.fromkeys(REGROUPED, 0)
    for bound, ns in hta["by_bound"].items():
        if bound:
            parts[HTA_PARTS[bound]] += ns
    return parts


def hta_sync_edges(hta: dict) -> set[tuple]:
    """HTA's sync edges on its path: (from correlation, to correlation, "gpu"|"cpu")."""
    return {(e["src"]["correlation"], e["dst"]["correlation"], "gpu" if e["dst"]["stream"] >= 0 else "cpu")
            for e in hta["edges"] if e["type"] == "critical_path_sync_dependency"}


# --- opscope's side -----------------------------------------------------------------------------------------


@dataclass
class OpscopePath:
    """opscope's critical path over a window: its length, categories and what is on it."""

    window: tuple[int, int]  #: the window asked for (absolute ns)
    start: int  #: the path's first instant (absolute ns, as replayed: the first slice's start)
    end: int
    length: int
    categories: dict[str, int]
    #: device work on the path: (name, kind, ts ns, dur ns, correlation, own ns on the path)
    device: list[tuple] = field(default_factory=list)
    #: host events on the path: name -> ns (their slices and the lags charged to them)
    host: dict[str, int] = field(default_factory=dict)
    #: edges the path took from device work: (from correlation, to correlation, "gpu"|"cpu"): an inferred
    #: cross-stream wait (to device work), a waiting call that returned when the work ended (to a host call)
    sync_edges: set[tuple] = field(default_factory=set)
    #: the trace's events on the path: (kind, name, ts ns)
    events: set[tuple] = field(default_factory=set)
    #: per regrouped part (:data:`REGROUPED`), ns
    parts: dict[str, int] = field(default_factory=dict)


def _window_nodes(graph, lane: str, lo: int, hi: int) -> tuple[int, int]:
    """The first slice of ``lane`` starting at or after ``lo`` and the last ending at or before ``hi`` (as
    :func:`opscope.analyses.replay.step_nodes` picks a step's)."""
    import bisect

    nodes = graph.threads[lane]
    starts = [graph.start[i] for i in nodes]
    ends = [graph.end[i] for i in nodes]
    a, b = bisect.bisect_left(starts, lo), bisect.bisect_right(ends, hi) - 1
    if not a <= b < len(nodes):
        raise ValueError(f"no slice of {lane} inside [{lo}, {hi}]")
    return nodes[a], nodes[b]


def opscope_interval_path(trace_path: Path, annotation: str = "", instance: int | None = None) -> OpscopePath:
    """opscope's critical path over the window of the ``instance``-th (0 when None; in start order) user annotation
    whose name contains ``annotation``, on that annotation's host thread:
    :func:`opscope.analyses.critical_path.step_path` from the thread's first slice inside the window to its last.
    ``annotation`` "": the whole trace as ``step_paths`` takes it (the busiest thread's first slice to its
    last). The window is opscope's own reading of the trace, not HTA's."""
    from opscope.analyses.critical_path import step_path
    from opscope.analyses.depgraph import (
        COMMUNICATION,
        COPIES,
        DEVICE,
        DEVICE_COMPUTE,
        PYTHON,
        UNEXPLAINED,
        UNTRACED,
        WAIT,
        dependency_graph,
    )
    from opscope.analyses.replay import AFTER, EXTRA, replay
    from opscope.ingest import open_trace

    trace = open_trace(trace_path)
    graph = dependency_graph(trace)
    run = replay(graph)
    ev = trace.select(["kind", "name", "ts_ns", "dur_ns", "pid", "tid", "correlation"])
    if not annotation:
        busiest = max(graph.threads.values(), key=len)  # as step_nodes takes a trace without steps
        first, last = busiest[0], busiest[-1]
        lo, hi = graph.start[first], graph.end[last]
    else:
        found = sorted((ts, dur, pid, tid) for name, kind, ts, dur, pid, tid in zip(
            *(ev[c].to_pylist() for c in ("name", "kind", "ts_ns", "dur_ns", "pid", "tid")))
            if kind == "user_annotation" and annotation in (name or ""))
        ts, dur, pid, tid = found[instance or 0]
        lo, hi = ts, ts + dur
        first, last = _window_nodes(graph, f"{pid}/{tid}", lo, hi)
    path = step_path(graph, run, None, first, last)
    out = OpscopePath(window=(lo, hi), start=graph.origin + run.start[first], end=graph.origin + run.end[last],
                      length=path.length, categories=dict(path.categories))
    rows = sorted({graph.row[n] for n in path.nodes if graph.row[n] >= 0}
                  | {graph.row[graph.extra[n]] for n in path.nodes if graph.kind[n] == WAIT and graph.extra[n] >= 0}
                  | {graph.row[graph.after[n]] for n in path.nodes if graph.after[n] >= 0})
    table = ev.take(rows) if rows else None
    info = {}
    if table is not None:
        for r, name, kind, ts, dur, corr in zip(rows, *(table[c].to_pylist() for c in
                                                       ("name", "kind", "ts_ns", "dur_ns", "correlation"))):
            info[r] = (name, kind, ts, dur, corr)
    parts = dict.fromkeys(REGROUPED, 0)
    parts["unexplained"] = path.categories.get(UNEXPLAINED, 0)
    for node, ns in path.nodes.items():
        row = graph.row[node]
        if row >= 0:
            out.events.add((info[row][1], info[row][0], info[row][2]))
        if graph.kind[node] == DEVICE and graph.category[node] in (DEVICE_COMPUTE, COPIES, COMMUNICATION):
            name, kind, ts, dur, corr = info[row]
            # the node's own time on the path: its time there less the launch/queue lag charged to it (the part
            # of a device node on the path is its whole run unless the path enters it part-way)
            own = min(graph.dur[node], ns)
            out.device.append((name, kind, ts, dur, corr, own))
            parts["device"] += own
            parts["launch/queue lag"] += ns - own
            if run.bound_by[node] == AFTER:
                out.sync_edges.add((info[graph.row[graph.after[node]]][4], corr, "gpu"))
        else:
            name = info[row][0] if row >= 0 else f"({graph.category[node]})"
            out.host[name] = out.host.get(name, 0) + ns
            if graph.kind[node] == WAIT:
                parts["sync wait"] += ns
                if run.bound_by[node] == EXTRA and graph.row[graph.extra[node]] >= 0:
                    out.sync_edges.add((info[graph.row[graph.extra[node]]][4], info[row][4], "cpu"))
            elif graph.category[node] in (PYTHON, UNTRACED):
                parts["host gap"] += ns
            else:
                parts["host"] += ns
    out.parts = parts
    out.device.sort(key=lambda d: d[2])
    return out


# --- HTA's path, read ---------------------------------------------------------------------------------------

DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}


def hta_device_on_path(hta: dict) -> list[tuple]:
    """Device work HTA put on its path (an operator/kernel edge attributed to a GPU event): (name, cat, ts ns, dur
    ns, correlation, weight ns), by start."""
    out = []
    for e in hta["edges"]:
        ev = e["event"]
        if e["type"] == "critical_path_operator" and ev and ev["stream"] >= 0 and ev["cat"] in DEVICE_CATS:
            out.append((ev["name"], ev["cat"], ev["ts"], ev["dur"], ev["correlation"], e["weight"]))
    return sorted(out, key=lambda d: d[2])


def hta_host_on_path(hta: dict) -> dict[str, int]:
    """HTA's path weight per host event name (cpu_op / runtime edges)."""
    out: dict[str, int] = {}
    for e in hta["edges"]:
        ev = e["event"]
        if e["type"] == "critical_path_operator" and ev and ev["stream"] < 0:
            out[ev["name"]] = out.get(ev["name"], 0) + e["weight"]
    return out


def short(name: str, width: int = 48) -> str:
    name = re.sub(r"\(.*", "", name)
    return name if len(name) <= width else name[: width - 1] + "~"
