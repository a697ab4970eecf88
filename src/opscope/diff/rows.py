"""The comparison rows: ops and kernels of two traces matched by a key, per step, sorted by absolute change."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from opscope.analyses.arrays import combined
from opscope.analyses.filters import EventFilter
from opscope.analyses.kernels import kernel_table
from opscope.analyses.names import map_distinct, python_api
from opscope.analyses.ops import op_table
from opscope.diff.normalize import Span
from opscope.errors import UsageError
from opscope.model.trace import Trace

#: How ops are matched: by name, by name and input shapes, or by the Python API across frameworks.
MATCH_KEYS = ("name", "name,shapes", "api")
ROW_FIELDS = ("kind", "name", "base_ns", "new_ns", "delta_ns", "calls_base", "calls_new", "status")

Totals = dict[tuple[str, ...], tuple[int, int]]  # key -> (ns, calls) over the span
#: The profiler's step annotations: the steps compared, never rows of their own.
_STEP_NAME = re.compile(r"ProfilerStep#\d+$")


def check_by(by: str) -> str:
    by = by.replace(" ", "")
    if by not in MATCH_KEYS:
        raise UsageError(f"--by must be one of {', '.join(MATCH_KEYS)} (got {by!r})")
    return by


def op_totals(trace: Trace, span: Span, by: str, framework: str | None) -> Totals:
    """Self time and calls of the host ops (cpu_op) over the span, per match key. Self time (duplicate
    dispatches folded, as in ``opscope ops``) so rows add up to the host's op time without counting twice.
    With ``by="api"``: see :func:`api_totals`."""
    if by == "api":
        return api_totals(trace, span, framework)
    keys = ("name", "shapes") if by == "name,shapes" else ("name",)
    table = op_table(trace, by=keys, filt=EventFilter(kinds=("cpu_op",), steps=span.steps))
    names = table["name"].to_pylist()
    shapes = table["shapes"].to_pylist() if "shapes" in keys else [None] * len(names)
    out: Totals = {}
    for name, shape, ns, calls in zip(names, shapes, table["self_ns"].to_pylist(), table["calls"].to_pylist()):
        if name and _STEP_NAME.match(name):
            continue  # a step, not an op (legacy Kineto files write ProfilerStep#N as an Operator)
        key = (name, shape or "") if "shapes" in keys else (name,)
        prev = out.get(key, (0, 0))
        out[key] = (prev[0] + ns, prev[1] + calls)
    return out


def api_key(op: str | None, framework: str | None) -> str | None:
    """The Python function an op comes from, reduced to its last name in lower case, so that torch's
    ``aten::conv2d`` (torch.nn.functional.conv2d) and TensorFlow's ``Conv2D`` (tf.raw_ops.Conv2D) meet as
    ``conv2d``; TensorFlow's fused ops (``_FusedConv2D``: Conv2D + BiasAdd + activation) count as the op they
    start with. None for an op with no known API."""
    if not op:
        return None
    api = python_api(op, framework)
    if api is None and op.startswith("_Fused"):
        api = python_api(op[len("_Fused"):], framework)
    return api.rsplit(".", 1)[-1].lower() if api else None


def api_totals(trace: Trace, span: Span, framework: str | None) -> Totals:
    """Per Python API: the inclusive time and calls of the outermost ops that have one (an op inside another
    op with an API is part of that call: ``aten::convolution`` inside ``aten::conv2d``). Framework-internal ops
    without an API are left out: across frameworks only what the user called can be matched."""
    ev = trace.select(["kind", "name", "dur_ns", "parent", "step", "merged"])
    names = ev["name"].combine_chunks() if ev.num_rows else pa.array([], pa.dictionary(pa.int32(), pa.string()))
    keys = map_distinct(names, lambda n: api_key(n, framework))
    is_op = pc.fill_null(pc.equal(ev["kind"].cast(pa.string()), "cpu_op"), False)
    has_api = pc.and_(combined(is_op), pc.is_valid(keys))
    parent = ev["parent"].combine_chunks()
    inside_api = pa.array([False] * ev.num_rows)
    current = parent
    for _ in range(512):  # climb until no row has an ancestor left
        valid = pc.is_valid(current)
        if not pc.any(valid).as_py():
            break
        safe = pc.fill_null(current, 0)
        inside_api = pc.or_(inside_api, pc.and_(valid, pc.take(has_api, safe)))
        current = pc.if_else(valid, pc.take(parent, safe), pa.nulls(len(current), pa.int64()))
    keep = pc.and_(pc.and_(has_api, pc.invert(inside_api)), pc.invert(pc.fill_null(ev["merged"].combine_chunks(),
                                                                                    False)))
    if span.steps is not None:
        keep = pc.and_(keep, pc.fill_null(pc.is_in(ev["step"], pa.array(span.steps, pa.int64())), False))
    table = pa.table({"key": pc.filter(keys, keep), "dur_ns": pc.filter(ev["dur_ns"], keep)})
    grouped = table.group_by("key", use_threads=False).aggregate([("dur_ns", "sum"), ("dur_ns", "count")])
    return {(k,): (ns, c) for k, ns, c in zip(grouped["key"].to_pylist(), grouped["dur_ns_sum"].to_pylist(),
                                             grouped["dur_ns_count"].to_pylist())}


def kernel_totals(trace: Trace, span: Span) -> Totals:
    """Duration and count of the device work (kernels, copies, memsets, collectives) over the span, per name as
    the trace writes it. Device work belongs to the step of the host call that launched it."""
    table = kernel_table(trace, filt=EventFilter(steps=span.steps), names="raw")
    totals: Totals = {}
    # kernel_table has a row per (name, kind): a TF op's name is both a kernel's and a copy's (MatMul), so add up
    for n, ns, c in zip(table["name"].to_pylist(), table["total_ns"].to_pylist(), table["calls"].to_pylist()):
        ns0, c0 = totals.get((n,), (0, 0))
        totals[(n,)] = (ns0 + ns, c0 + c)
    return totals


def combine(kind: str, base: Totals, new: Totals, span_base: Span, span_new: Span,
            with_shapes: bool = False) -> list[dict]:
    """One row per key found in either trace: per-step times and calls, delta, status."""
    rows = []
    for key in sorted(set(base) | set(new)):
        b, n = base.get(key), new.get(key)
        base_ns = per_step_ns(b[0], span_base) if b else 0
        new_ns = per_step_ns(n[0], span_new) if n else 0
        row: dict[str, Any] = {"kind": kind, "name": key[0]}
        if with_shapes:
            row["shapes"] = key[1] if len(key) > 1 else None
        row.update({
            "base_ns": base_ns, "new_ns": new_ns, "delta_ns": new_ns - base_ns,
            "calls_base": per_step_calls(b[1], span_base) if b else 0,
            "calls_new": per_step_calls(n[1], span_new) if n else 0,
            "status": "added" if b is None else "removed" if n is None else
                      "same" if new_ns == base_ns else "changed",
        })
        rows.append(row)
    return rows


def sort_rows(rows: Iterable[dict]) -> list[dict]:
    return sorted(rows, key=lambda r: (-abs(r["delta_ns"]), r["kind"], r["name"], r.get("shapes") or ""))


def rows_table(rows: list[dict], with_shapes: bool, per_step: bool) -> pa.Table:
    fields = list(ROW_FIELDS)
    if with_shapes:
        fields.insert(2, "shapes")
    calls = pa.float64() if per_step else pa.int64()
    types = {"kind": pa.string(), "name": pa.string(), "shapes": pa.string(), "base_ns": pa.int64(),
             "new_ns": pa.int64(), "delta_ns": pa.int64(), "calls_base": calls, "calls_new": calls,
             "status": pa.string()}
    schema = pa.schema([(f, types[f]) for f in fields])
    return pa.Table.from_pylist([{f: r.get(f) for f in fields} for r in rows], schema=schema)


def per_step_ns(total: int, span: Span) -> int:
    """A total over the span as a figure per step (the total itself for a whole-trace span)."""
    return round(total / span.divisor)


def per_step_calls(calls: int, span: Span) -> float | int:
    """Calls per step, to 2 decimals (an integer count for a whole-trace span)."""
    return round(calls / span.divisor, 2) if span.per_step else int(calls)
