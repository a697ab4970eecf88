"""Which op calls of a trace to reproduce: cases, each a distinct (op, input shapes, strides, dtypes, scalar
arguments) with its calls, its time and what ran under it.

The op of a case is the one the user's code called: from an op (the launching op of a kernel on a GPU trace,
any op on a CPU trace), climb while the parent is a framework op too (``aten::linear`` above ``aten::addmm``,
``aten::convolution_backward`` above what it calls) and stop below anything else (a Python frame, an
nn.Module or ProfilerStep annotation, an autograd node, a ``Torch-Compiled Region``). Replaying that op runs
everything the trace ran under it, and layout or dtype changes apply to it.

Time is device time (kernels, copies, memsets, collectives launched under the op) on a GPU trace and host self
time of the op and of every op under it on a CPU-only trace. A case's recorded time per call is the median over its
calls of each call's device time on a GPU trace and of its duration (what a replay measures) on a CPU trace.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from opscope.analyses.arrays import combined, name_match, rows_where
from opscope.analyses.links import device_links
from opscope.analyses.names import framework_of
from opscope.analyses.op_cases import case_rows_of, chain_mask
from opscope.errors import UsageError
from opscope.model.schema import kind_mask
from opscope.model.trace import Trace

#: At most this many distinct child ops and kernels are kept per case (the rest are counted).
MAX_NAMES = 64


@dataclass
class Case:
    """One distinct call of an op as the trace recorded it (values are the trace's, parsed from JSON text)."""

    op: str
    input_dims: list | None
    input_strides: list | None
    input_types: list | None
    concrete_inputs: list | None
    calls: int
    total_ns: int  # over its calls: device time (GPU trace) or self time of it and the ops under it (CPU trace)
    trace_ns: int  # per call, the median over the calls: device time (GPU trace) or duration (CPU trace)
    share: float  # of the selection's total (see Selection.share_of)
    steps: list[int]
    first_ts_ns: int
    leaf_ops: list[str] = field(default_factory=list)
    recorded_ops: list[str] = field(default_factory=list)  # distinct ops under it, first seen first
    kernels: list[str] = field(default_factory=list)  # distinct device work under it, most time first
    rows: list[int] = field(default_factory=list, repr=False)  # its calls' event rows (not written out)


@dataclass
class Selection:
    """The cases chosen from a trace, and what their figures mean."""

    cases: list[Case]
    device: str  # where the trace ran: "cuda" or "cpu"
    framework: str | None
    time_is: str  # "device time" or "host self time"
    share_of: str  # the denominator of `share`, in words
    considered: int  # distinct cases before --top
    notes: list[str] = field(default_factory=list)


def select_cases(trace: Trace, top: int = 5, op: str | None = None, kernel: str | None = None,
                 steps: Sequence[int] | None = None) -> Selection:
    """The ``top`` cases (0: all) by time, optionally only ops whose name matches ``op`` or that launched a
    kernel matching ``kernel``, in ``steps``."""
    for pattern in (op, kernel):
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise UsageError(f"invalid regular expression {pattern!r}: {exc}") from None
    events = trace.select(["kind", "name", "ts_ns", "dur_ns", "step", "parent", "op_self_ns", "shapes", "dtypes",
                           "strides", "concrete_inputs"])
    framework = framework_of(trace.metadata)
    links = device_links(trace)
    gpu = len(links["device_row"]) > 0
    notes: list[str] = []
    chain = chain_mask(events)
    if gpu:
        rows, launching, case_rows, ns = _device_charges(events, links, chain, kernel, steps, notes)
        time_is = "device time"
    else:
        if kernel is not None:
            raise UsageError("--kernel needs a trace with device kernels; this one has none (use --op)")
        rows, case_rows, ns = _host_charges(events, chain, steps)
        launching = rows
        time_is = "host self time"
    where = f" in steps {_ranges(steps)}" if steps else ""
    share_of = (f"device time of all kernels, copies and memsets{' matching --kernel' if kernel else ''}{where}"
                if gpu else f"self time of all ops{where}")
    total = pc.sum(ns).as_py() or 0
    charged = pc.is_valid(case_rows)
    if gpu and not pc.all(charged).as_py():
        lost = pc.sum(pc.filter(ns, pc.invert(charged))).as_py() or 0
        notes.append(f"{_pct(lost, total)} of the device time was launched outside any op (graph replays "
                     "without their capture trace, no host events) and is in no case")
    cases = _group(events, pc.filter(case_rows, charged), pc.filter(ns, charged), gpu)
    if op is not None:
        cases = [c for c in cases if re.search(op, c.op)]
    considered = len(cases)
    cases.sort(key=lambda c: (-c.total_ns, c.first_ts_ns))
    chosen = cases[:top] if top > 0 else cases
    for case in chosen:
        case.share = case.total_ns / total if total else 0.0
    # on a CPU trace every op was climbed already (rows -> case_rows): the child ops of a case are among them
    _describe(events, chain, chosen, rows, launching, case_rows, ns, gpu, None if gpu else (rows, case_rows))
    device = "cuda" if gpu else "cpu"
    header = trace.metadata.get("header") or {}
    if gpu and isinstance(header, dict) and any(k in header for k in ("roctracer_version", "hip_runtime_version")):
        notes.append("recorded on an AMD GPU (ROCm): PyTorch calls its device cuda, so the scripts do too")
    return Selection(chosen, device, framework, time_is, share_of, considered, notes)


# --- which op a time is charged to ------------------------------------------------------------------------

def _device_charges(events: pa.Table, links: dict, chain: pa.Array, kernel: str | None,
                    steps: Sequence[int] | None, notes: list[str]
                    ) -> tuple[pa.Array, pa.Array, pa.Array, pa.Array]:
    rows, launching = links["device_row"], links["op_row"]
    keep = None
    if kernel is not None:
        keep = combined(name_match(pc.take(events["name"], rows), kernel, nulls=False))
    if steps:
        in_steps = pc.fill_null(pc.is_in(pc.take(events["step"], rows), pa.array(list(steps), pa.int64())), False)
        keep = in_steps if keep is None else pc.and_(keep, in_steps)
    if keep is not None:
        rows, launching = pc.filter(rows, keep), pc.filter(launching, keep)
    if pc.any(links["link_inferred"]).as_py():
        notes.append("some kernels were linked to their launch by order (no correlation ids): their op is inferred")
    return rows, launching, case_rows_of(events, chain, launching), combined(pc.take(events["dur_ns"], rows))


def _host_charges(events: pa.Table, chain: pa.Array, steps: Sequence[int] | None
                  ) -> tuple[pa.Array, pa.Array, pa.Array]:
    mask = combined(kind_mask(events, ("cpu_op",)))
    if steps:
        mask = pc.and_(mask, pc.fill_null(pc.is_in(combined(events["step"]), pa.array(list(steps), pa.int64())),
                                          False))
    rows = rows_where(mask)
    ns = pc.fill_null(combined(pc.take(events["op_self_ns"], rows)), 0)
    return rows, case_rows_of(events, chain, rows), ns


# --- grouping calls into cases ------------------------------------------------------------------------------

_KEY_COLUMNS = ("shapes", "strides", "dtypes", "concrete_inputs")


def _group(events: pa.Table, case_rows: pa.Array, ns: pa.Array, gpu: bool) -> list[Case]:
    """Sum time per case row, then group case rows with the same op and inputs into cases."""
    if len(case_rows) == 0:
        return []
    per_row = pa.table({"row": case_rows, "ns": ns}).group_by("row").aggregate([("ns", "sum")])
    rows = per_row["row"]
    table = pa.table({
        "row": rows,
        "ns": per_row["ns_sum"],
        "name": combined(pc.take(events["name"], rows)).cast(pa.string()),
        "dur_ns": pc.take(events["dur_ns"], rows),
        "ts_ns": pc.take(events["ts_ns"], rows),
        "step": pc.take(events["step"], rows),
        **{c: pc.fill_null(combined(pc.take(events[c], rows)), "") for c in _KEY_COLUMNS},
    })
    # per call: the device time of each call (GPU trace) or its duration (CPU trace); the case's recorded time per
    # call is their median, which one slow step (a stall, a hiccup of the profiler) does not move
    table = table.append_column("call_ns", table["ns"] if gpu else table["dur_ns"])
    grouped = table.group_by(["name", *_KEY_COLUMNS]).aggregate([
        ("ns", "sum"), ("row", "count"), ("ts_ns", "min"), ("step", "distinct"),
        ("row", "list"), ("call_ns", "list")])
    cases = []
    for r in grouped.to_pylist():
        calls = r["row_count"]
        total = int(r["ns_sum"] or 0)
        cases.append(_case(r, calls, total, _median([int(v or 0) for v in r["call_ns_list"]])))
    return cases


def _case(r: dict, calls: int, total: int, per_call: int) -> Case:
    return Case(op=r["name"], input_dims=_json_list(r["shapes"]), input_strides=_json_list(r["strides"]),
                input_types=_json_list(r["dtypes"]), concrete_inputs=_json_list(r["concrete_inputs"]),
                calls=calls, total_ns=total, trace_ns=per_call, share=0.0,
                steps=sorted(s for s in r["step_distinct"] if s is not None), first_ts_ns=r["ts_ns_min"],
                rows=r["row_list"])


def _median(values: list[int]) -> int:
    """The median (the mean of the middle two for an even count), exactly."""
    ordered = sorted(values)
    if not ordered:
        return 0
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) // 2


def _json_list(text: str) -> list | None:
    """A recorded JSON array (None when not recorded or not an array: the rebuild says why)."""
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, list) else None


# --- what ran under each case ---------------------------------------------------------------------------------

def _describe(events: pa.Table, chain: pa.Array, cases: list[Case], rows: pa.Array, leaf_rows: pa.Array,
              case_rows: pa.Array, ns: pa.Array, gpu: bool,
              climbed: tuple[pa.Array, pa.Array] | None = None) -> None:
    """Fill each chosen case's recorded child ops, leaf ops (the ops that launched its kernels on a GPU trace; the
    ops with the most self time under it on a CPU trace) and kernels (GPU), from the charged rows: ``rows`` (device
    events or ops), ``leaf_rows`` (their launching op, or the op itself), ``case_rows`` and ``ns``."""
    if not cases:
        return
    wanted = pa.array([row for c in cases for row in c.rows], pa.int64())
    inside = pc.fill_null(pc.is_in(case_rows, value_set=wanted), False)
    names = combined(events["name"])
    tops = pc.filter(case_rows, inside).to_pylist()
    times = pc.filter(ns, inside).to_pylist()
    leaf_names = pc.take(names, pc.filter(leaf_rows, inside)).cast(pa.string()).to_pylist()
    own_rows = pc.filter(rows, inside)
    kinds = pc.take(events["kind"], own_rows).cast(pa.string()).to_pylist()
    own_names = pc.take(names, own_rows).cast(pa.string()).to_pylist()
    order = pc.take(events["ts_ns"], own_rows).to_pylist()
    by_top: dict[int, list[tuple[int, str, str | None, int, str]]] = {}
    for top, t, leaf, name, kind, ts in zip(tops, times, leaf_names, own_names, kinds, order):
        by_top.setdefault(top, []).append((ts or 0, name, leaf, t or 0, kind))
    all_ops = _ops_under(events, chain, set(wanted.to_pylist()), climbed)
    for case in cases:
        ops: dict[str, None] = {}
        leaves: dict[str, int] = {}
        kernels: dict[str, int] = {}
        for top in case.rows:
            for _ts, name, leaf, t, _kind in sorted(by_top.get(top, ()), key=lambda item: item[0]):
                if gpu:
                    kernels[name] = kernels.get(name, 0) + t
                    if leaf is not None:
                        leaves[leaf] = leaves.get(leaf, 0) + t
                elif name is not None:
                    leaves[name] = leaves.get(name, 0) + t
            for name in all_ops.get(top, ()):
                ops.setdefault(name)
        case.recorded_ops = list(ops)[:MAX_NAMES]
        case.leaf_ops = [n for n, _ in sorted(leaves.items(), key=lambda kv: -kv[1])][:3] or [case.op]
        case.kernels = [n for n, _ in sorted(kernels.items(), key=lambda kv: -kv[1])][:MAX_NAMES]


def _ops_under(events: pa.Table, chain: pa.Array, tops: set[int],
               climbed: tuple[pa.Array, pa.Array] | None = None) -> dict[int, list[str]]:
    """The names of the ops under each row of ``tops`` (descendants, in time order). ``climbed``: op rows and their
    case rows (:func:`case_rows_of`) when the caller has them for every op that can be under ``tops``."""
    if climbed is None:
        op_rows = rows_where(pc.and_(chain, pc.is_valid(combined(events["parent"]))))
        climbed = (op_rows, case_rows_of(events, chain, op_rows))
    op_rows, found_tops = climbed
    under = pc.and_(pc.is_in(found_tops, value_set=pa.array(sorted(tops), pa.int64())),
                    pc.not_equal(found_tops, op_rows))
    child_rows = pc.filter(op_rows, under)
    child_tops = pc.filter(found_tops, under).to_pylist()
    child_names = pc.take(combined(events["name"]), child_rows).cast(pa.string()).to_pylist()
    child_ts = pc.take(events["ts_ns"], child_rows).to_pylist()
    result: dict[int, list[tuple[int, str]]] = {}
    for top, name, ts in zip(child_tops, child_names, child_ts):
        result.setdefault(top, []).append((ts or 0, name))
    return {top: [name for _, name in sorted(items)] for top, items in result.items()}


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "0%"


def _ranges(steps: Sequence[int]) -> str:
    return ",".join(str(s) for s in steps)
