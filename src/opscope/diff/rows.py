"""The comparison rows: ops and kernels of two traces matched by a key, per step, sorted by absolute change."""

from __future__ import annotations

import re
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from opscope.analyses.arrays import arange, combined, name_match, scatter
from opscope.analyses.filters import EventFilter
from opscope.analyses.kernels import DEVICE_WORK, kernel_table
from opscope.analyses.names import map_distinct, python_api
from opscope.analyses.noise import shift_columns
from opscope.analyses.op_keys import family, migraphx_key, onnx_key
from opscope.analyses.ops import op_table
from opscope.diff.normalize import Span
from opscope.errors import UsageError
from opscope.model.schema import kind_mask
from opscope.model.trace import Trace

#: How ops are matched: by name, by name and input shapes, or by the Python API across frameworks.
MATCH_KEYS = ("name", "name,shapes", "api")
#: Each row's median difference per step and its 95% interval (:func:`opscope.analyses.noise.shift_columns` of the
#: row's time in each compared step): ns, and the bounds in % of the row's base median.
CI_FIELDS = ("median_delta_ns", "ci_low", "ci_high", "ci_low_pct", "ci_high_pct")
ROW_FIELDS = ("kind", "name", "base_ns", "new_ns", "delta_ns", "calls_base", "calls_new", "status", *CI_FIELDS)
#: A row's interval is computed over at most this many of a side's compared steps (evenly spaced among them): 2,500
#: pairwise differences a row.
MAX_ROW_STEPS = 50

#: What op_totals/kernel_totals give: the key columns (``name``, and ``shapes`` for --by name,shapes), then ``ns`` and
#: ``calls`` over the span, one row per key; op_step_sums/kernel_step_sums: the key columns, ``step`` and ``ns``, one
#: row per key and step.
TOTALS = ("name", "shapes", "ns", "calls")
#: The profiler's step annotations: the steps compared, never rows of their own.
_STEP_NAME = re.compile(r"^ProfilerStep#\d+$")


def check_by(by: str) -> str:
    by = by.replace(" ", "")
    if by not in MATCH_KEYS:
        raise UsageError(f"--by must be one of {', '.join(MATCH_KEYS)} (got {by!r})")
    return by


def op_totals(trace: Trace, span: Span, by: str, framework: str | None) -> pa.Table:
    """Self time and calls of the host ops (cpu_op) over the span, per match key (a :data:`TOTALS` table). Self time
    (duplicate dispatches folded, as in ``opscope ops``) so rows add up to the host's op time without counting twice.
    With ``by="api"``: see :func:`api_totals`."""
    if by == "api":
        return api_totals(trace, span, framework)
    keys = ("name", "shapes") if by == "name,shapes" else ("name",)
    table = op_table(trace, by=keys, filt=EventFilter(kinds=("cpu_op",), steps=span.steps), coverage=False)
    # a step, not an op (legacy Kineto files write ProfilerStep#N as an Operator); the regex only where it may match
    maybe_step = pc.fill_null(pc.starts_with(table["name"].cast(pa.string()), "ProfilerStep#"), False)
    if pc.any(maybe_step).as_py():
        table = table.filter(pc.invert(combined(name_match(table["name"], _STEP_NAME.pattern))))
    columns = {"name": table["name"]}
    if "shapes" in keys:
        columns["shapes"] = pc.fill_null(table["shapes"].cast(pa.string()), "")
    return _totals(columns, table["self_ns"], table["calls"])


def api_key(op: str | None, framework: str | None) -> str | None:
    """The Python function an op comes from, reduced to its last name in lower case, so that torch's
    ``aten::conv2d`` (torch.nn.functional.conv2d) and TensorFlow's ``Conv2D`` (tf.raw_ops.Conv2D) meet as
    ``conv2d``; TensorFlow's fused ops (``_FusedConv2D``: Conv2D + BiasAdd + activation) count as the op they
    start with. ONNX Runtime's op types and MIGraphX's operators get the same keys (:mod:`opscope.analyses.op_keys`),
    and matrix products of every spelling are one key, ``matmul``. None for an op with no known API."""
    if not op:
        return None
    if framework == "onnxruntime":
        return onnx_key(op)
    if framework == "migraphx":
        return migraphx_key(op)
    api = python_api(op, framework)
    if api is None and op.startswith("_Fused"):
        api = python_api(op[len("_Fused"):], framework)
    return family(api.rsplit(".", 1)[-1].lower()) if api else None


def api_totals(trace: Trace, span: Span, framework: str | None) -> pa.Table:
    """Per Python API: the inclusive time and calls of the outermost ops that have one (an op inside another
    op with an API is part of that call: ``aten::convolution`` inside ``aten::conv2d``). Framework-internal ops
    without an API are left out: across frameworks only what the user called can be matched."""
    names, dur, _ = _api_ops(trace, span, framework)
    return _totals({"name": names}, dur, pa.repeat(pa.scalar(1, pa.int64()), len(dur)))


def _api_ops(trace: Trace, span: Span, framework: str | None) -> tuple[pa.Array, Any, Any]:
    """The outermost ops with a Python API in the span: their API keys, durations and steps."""
    ev = trace.select(["kind", "name", "dur_ns", "parent", "step", "merged"])
    names = combined(ev["name"]) if ev.num_rows else pa.array([], pa.dictionary(pa.int32(), pa.string()))
    keys = map_distinct(names, lambda n: api_key(n, framework), encoded=True)  # codes: no string per row
    is_op = pc.fill_null(pc.equal(ev["kind"].cast(pa.string()), "cpu_op"), False)
    has_api = pc.and_(combined(is_op), pc.is_valid(keys))
    parent = combined(ev["parent"])
    inside_api = pa.repeat(pa.scalar(False), ev.num_rows)
    current = parent
    for _ in range(512):  # climb until no row has an ancestor left
        valid = pc.is_valid(current)
        if not pc.any(valid).as_py():
            break
        safe = pc.fill_null(current, 0)
        inside_api = pc.or_(inside_api, pc.and_(valid, pc.take(has_api, safe)))
        current = pc.if_else(valid, pc.take(parent, safe), pa.nulls(len(current), pa.int64()))
    keep = pc.and_(pc.and_(has_api, pc.invert(inside_api)), pc.invert(pc.fill_null(combined(ev["merged"]),
                                                                                    False)))
    if span.steps is not None:
        keep = pc.and_(keep, pc.fill_null(pc.is_in(ev["step"], pa.array(span.steps, pa.int64())), False))
    return pc.filter(keys, keep).cast(pa.string()), pc.filter(ev["dur_ns"], keep), pc.filter(ev["step"], keep)


def kernel_totals(trace: Trace, span: Span) -> pa.Table:
    """Duration and count of the device work (kernels, copies, memsets, collectives) over the span, per name as
    the trace writes it. Device work belongs to the step of the host call that launched it."""
    table = kernel_table(trace, filt=EventFilter(steps=span.steps), names="raw")
    # kernel_table has a row per (name, kind): a TF op's name is both a kernel's and a copy's (MatMul), so add up
    return _totals({"name": table["name"]}, table["total_ns"], table["calls"])


def op_step_sums(trace: Trace, span: Span, by: str, framework: str | None) -> pa.Table | None:
    """:func:`op_totals` step by step: per match key and compared step, the ops' time (``ns``); None for a
    whole-trace span. One group-by over the events' ``step`` column."""
    if span.steps is None:
        return None
    if by == "api":
        names, dur, step = _api_ops(trace, span, framework)
        return _step_sums({"name": names}, dur, step)
    keys = ("name", "shapes") if by == "name,shapes" else ("name",)
    ev = trace.select([*keys, "kind", "op_self_ns", "merged", "step"])
    # as op_table counts self time: cpu_op events, an op folded into its same-name parent not counted again
    keep = pc.and_(pc.and_(kind_mask(ev, ("cpu_op",)), pc.invert(ev["merged"])), _in_steps(ev["step"], span))
    ev = ev.filter(keep)
    sums = _step_sums({k: ev[k] for k in keys}, ev["op_self_ns"], ev["step"])
    if "shapes" in keys:
        sums = sums.set_column(sums.schema.get_field_index("shapes"), "shapes", pc.fill_null(sums["shapes"], ""))
    return sums


def kernel_step_sums(trace: Trace, span: Span) -> pa.Table | None:
    """:func:`kernel_totals` step by step: per name and compared step, the device work's time (``ns``); None for a
    whole-trace span."""
    if span.steps is None:
        return None
    ev = trace.select(["kind", "name", "dur_ns", "step"])
    ev = ev.filter(pc.and_(kind_mask(ev, DEVICE_WORK), _in_steps(ev["step"], span)))
    return _step_sums({"name": ev["name"]}, ev["dur_ns"], ev["step"])


def _in_steps(step: Any, span: Span) -> Any:
    return pc.fill_null(pc.is_in(step, pa.array(span.steps or (), pa.int64())), False)


def _step_sums(keys: dict[str, Any], ns: Any, step: Any) -> pa.Table:
    """``ns`` summed per distinct key and step (names grouped on their dictionary codes, made text per group)."""
    table = pa.table({**{k: combined(v) if len(v) else pa.array([], pa.string()) for k, v in keys.items()},
                      "step": combined(step).cast(pa.int64()) if len(step) else pa.array([], pa.int64()),
                      "ns": combined(ns).cast(pa.int64()) if len(ns) else pa.array([], pa.int64())})
    grouped = table.unify_dictionaries().group_by([*keys, "step"], use_threads=False).aggregate([("ns", "sum")])
    return pa.table({**{k: combined(grouped[k]).cast(pa.string()) for k in keys}, "step": grouped["step"],
                     "ns": grouped["ns_sum"]})


def _totals(keys: dict[str, Any], ns: Any, calls: Any) -> pa.Table:
    """A :data:`TOTALS` table: ``ns`` and ``calls`` summed per distinct key (a null name is a key of its own)."""
    table = pa.table({**{k: combined(v).cast(pa.string()) for k, v in keys.items()},
                      "ns": combined(ns).cast(pa.int64()), "calls": combined(calls).cast(pa.int64())})
    grouped = table.group_by(list(keys), use_threads=False).aggregate([("ns", "sum"), ("calls", "sum")])
    return grouped.select([*keys, "ns_sum", "calls_sum"]).rename_columns([*keys, "ns", "calls"])


def combine(kind: str, base: pa.Table, new: pa.Table, span_base: Span, span_new: Span,
            with_shapes: bool = False, step_sums: tuple[pa.Table | None, pa.Table | None] = (None, None)) -> pa.Table:
    """One row per key found in either trace (a hash join of the two totals): per-step times and calls, delta,
    status, and from each side's ``step_sums`` (:func:`op_step_sums`, :func:`kernel_step_sums`) the row's median
    difference per step with its interval (null without them); the columns of :func:`rows_table`, unsorted."""
    keys = [c for c in base.column_names if c not in ("ns", "calls")]

    def side(totals: pa.Table, label: str) -> pa.Table:
        # a hash join never matches null keys: join on (name or "", whether it was null) instead
        name = totals["name"]
        out = {"_name": pc.fill_null(name, ""), "_null_name": pc.is_null(name)}
        out.update({k: totals[k] for k in keys if k != "name"})
        out.update({f"ns_{label}": totals["ns"], f"calls_{label}": totals["calls"],
                    f"in_{label}": pa.repeat(pa.scalar(True), totals.num_rows)})
        return pa.table(out)

    join_keys = ["_name", "_null_name", *(k for k in keys if k != "name")]
    joined = side(base, "base").join(side(new, "new"), keys=join_keys, join_type="full outer", coalesce_keys=True,
                                     use_threads=False)
    in_base = pc.fill_null(joined["in_base"], False)
    in_new = pc.fill_null(joined["in_new"], False)
    base_ns = _per_step_ns(joined["ns_base"], span_base)
    new_ns = _per_step_ns(joined["ns_new"], span_new)
    status = pc.if_else(pc.invert(in_base), "added", pc.if_else(pc.invert(in_new), "removed", pc.if_else(
        pc.equal(new_ns, base_ns), "same", "changed")))
    n = joined.num_rows
    columns: dict[str, Any] = {
        "kind": pa.repeat(pa.scalar(kind), n),
        "name": pc.if_else(joined["_null_name"], pa.scalar(None, pa.string()), joined["_name"]),
    }
    if with_shapes:
        columns["shapes"] = joined["shapes"] if "shapes" in keys else pa.nulls(n, pa.string())
    columns.update({"base_ns": base_ns, "new_ns": new_ns, "delta_ns": pc.subtract(new_ns, base_ns),
                    "calls_base": _per_step_calls(joined["calls_base"], span_base),
                    "calls_new": _per_step_calls(joined["calls_new"], span_new), "status": status})
    columns.update(_row_intervals(joined.select(join_keys), join_keys, step_sums, span_base, span_new))
    return rows_table(pa.table(columns), with_shapes, span_base.per_step)


def row_steps(steps: tuple[int, ...] | None) -> tuple[int, ...] | None:
    """The steps a side's row intervals are computed over: all, or :data:`MAX_ROW_STEPS` evenly spaced among them."""
    if steps is None or len(steps) <= MAX_ROW_STEPS:
        return steps
    last = len(steps) - 1
    return tuple(steps[round(i * last / (MAX_ROW_STEPS - 1))] for i in range(MAX_ROW_STEPS))


def _row_intervals(keys: pa.Table, join_keys: list[str], step_sums: tuple[pa.Table | None, pa.Table | None],
                   span_base: Span, span_new: Span) -> dict[str, pa.Array]:
    """Per row (``keys``: the joined rows' key columns), the CI_FIELDS columns: each side's time of the row in each
    of its steps (0 in a step without it) gives the samples (:func:`opscope.analyses.noise.shift_columns`)."""
    steps_base, steps_new = row_steps(span_base.steps), row_steps(span_new.steps)
    n = keys.num_rows
    if step_sums[0] is None or step_sums[1] is None or not steps_base or not steps_new:
        empty = pa.nulls(n, pa.int64())
        return {"median_delta_ns": empty, "ci_low": empty, "ci_high": empty,
                "ci_low_pct": pa.nulls(n, pa.float64()), "ci_high_pct": pa.nulls(n, pa.float64())}
    keyed = keys.append_column("_row", arange(n))
    base = _samples(keyed, join_keys, step_sums[0], steps_base)
    new = _samples(keyed, join_keys, step_sums[1], steps_new)
    found = shift_columns(base, new, len(steps_base), len(steps_new))
    return {"median_delta_ns": found["delta"], "ci_low": found["low"], "ci_high": found["high"],
            "ci_low_pct": found["low_pct"], "ci_high_pct": found["high_pct"]}


def _samples(keyed: pa.Table, join_keys: list[str], sums: pa.Table, steps: tuple[int, ...]) -> pa.Array:
    """Row r's time in each of ``steps`` at ``r x len(steps) + i`` (0 where the row did not run in the step)."""
    m = len(steps)
    side = {"_name": pc.fill_null(sums["name"], ""), "_null_name": pc.is_null(sums["name"])}
    side.update({k: sums[k] for k in join_keys if k not in ("_name", "_null_name")})
    side.update({"_at": pc.index_in(sums["step"], value_set=pa.array(steps, pa.int64())), "ns": sums["ns"]})
    table = pa.table(side)
    table = table.filter(pc.is_valid(table["_at"]))
    found = table.join(keyed, keys=join_keys, join_type="inner", use_threads=False)
    positions = pc.add(pc.multiply(pc.cast(found["_row"], pa.int64()), m), pc.cast(found["_at"], pa.int64()))
    return pc.fill_null(scatter(keyed.num_rows * m, combined(positions), combined(found["ns"])), 0)


def _per_step_ns(totals: Any, span: Span) -> pa.Array:
    """:func:`per_step_ns` on a column (0 where absent): the same float division and round half to even."""
    per_step = pc.round(pc.divide(pc.cast(combined(totals), pa.float64(), safe=False), float(span.divisor)),
                        round_mode="half_to_even")
    return pc.fill_null(pc.cast(per_step, pa.int64()), 0)


def _per_step_calls(calls: Any, span: Span) -> pa.Array:
    """:func:`per_step_calls` on a column (0 where absent); Python's round to 2 decimals, exactly as the scalar."""
    if span.divisor == 1:  # c / 1 rounded to 2 decimals is c itself
        return pc.fill_null(pc.cast(combined(calls), pa.float64() if span.per_step else pa.int64()), 0)
    values = combined(calls).to_pylist()
    if not span.per_step:
        return pa.array([0 if c is None else int(c) for c in values], pa.int64())
    return pa.array([0 if c is None else per_step_calls(c, span) for c in values], pa.float64())


def sort_rows(rows: pa.Table) -> pa.Table:
    """By absolute change, largest first, then kind, name and shapes (no shapes first)."""
    keys = [("_abs", "descending"), ("kind", "ascending"), ("name", "ascending")]
    sortable = rows.append_column("_abs", pc.abs_checked(rows["delta_ns"]))
    if "shapes" in rows.column_names:
        sortable = sortable.append_column("_shapes", pc.fill_null(rows["shapes"], ""))
        keys.append(("_shapes", "ascending"))
    return rows.take(pc.sort_indices(sortable, keys))  # nulls last


def rows_table(rows: pa.Table, with_shapes: bool, per_step: bool) -> pa.Table:
    """The rows in the table's column order and types."""
    schema = row_schema(with_shapes, per_step)
    return pa.table([combined(rows[f.name]).cast(f.type) for f in schema], schema=schema)


def row_schema(with_shapes: bool, per_step: bool) -> pa.Schema:
    """The comparison rows' columns: :data:`ROW_FIELDS`, with ``shapes`` after ``name`` for --by name,shapes; calls
    per step are fractions (float), whole-trace calls counts."""
    fields = list(ROW_FIELDS)
    if with_shapes:
        fields.insert(2, "shapes")
    calls = pa.float64() if per_step else pa.int64()
    types = {"kind": pa.string(), "name": pa.string(), "shapes": pa.string(), "base_ns": pa.int64(),
             "new_ns": pa.int64(), "delta_ns": pa.int64(), "calls_base": calls, "calls_new": calls,
             "status": pa.string(), "median_delta_ns": pa.int64(), "ci_low": pa.int64(), "ci_high": pa.int64(),
             "ci_low_pct": pa.float64(), "ci_high_pct": pa.float64()}
    return pa.schema([(f, types[f]) for f in fields])


def per_step_ns(total: int, span: Span) -> int:
    """A total over the span as a figure per step (the total itself for a whole-trace span)."""
    return round(total / span.divisor)


def per_step_calls(calls: int, span: Span) -> float | int:
    """Calls per step, to 2 decimals (an integer count for a whole-trace span)."""
    return round(calls / span.divisor, 2) if span.per_step else int(calls)
