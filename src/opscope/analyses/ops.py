"""Per-operator table: calls, total, self, avg/min/max and share of self time (key_averages-like)."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from opscope.analyses.filters import EventFilter
from opscope.errors import UsageError
from opscope.model.trace import Trace

GROUP_KEYS = ("name", "shapes", "dtypes", "kind", "pid", "tid", "step")
OP_COLUMNS = ("calls", "total_ns", "self_ns", "avg_ns", "min_ns", "max_ns", "self_pct", "total_pct")


def op_table(
    trace: Trace,
    by: Sequence[str] = ("name",),
    filt: EventFilter | None = None,
    sort: str = "self_ns",
    merge_duplicates: bool = True,
) -> pa.Table:
    """One row per group of host events (default: ``cpu_op`` events grouped by name).

    With ``merge_duplicates`` (the default, as torch's ``key_averages()`` does) an op whose only
    child is an op of the same name (``aten::div`` dispatching to ``aten::div``) counts once.

    ``self_pct`` is the group's share of the self time of all selected events (the shares add up
    to 100); ``total_pct`` is its total time over the same denominator, so it can exceed 100 when
    ops nest.
    """
    for key in by:
        if key not in GROUP_KEYS:
            raise UsageError(f"cannot group by {key!r}; choose from {', '.join(GROUP_KEYS)}")
    filt = filt or EventFilter(kinds=("cpu_op",))
    columns = list(dict.fromkeys(list(by) + ["dur_ns", "self_ns", "kind", "name", "step"]))
    if merge_duplicates:  # folded once at ingest (model.derive.fold_duplicate_ops)
        events = trace.select(columns + ["op_self_ns", "merged"])
        events = events.set_column(events.schema.get_field_index("self_ns"), "self_ns", events["op_self_ns"])
        events = events.filter(pc.invert(events["merged"]))
    else:
        events = trace.select(columns)
    events = filt.apply(events).select(list(by) + ["dur_ns", "self_ns"])
    events = _plain_keys(events, by)
    grouped = events.group_by(list(by), use_threads=False).aggregate([
        ("dur_ns", "count"), ("dur_ns", "sum"), ("self_ns", "sum"), ("dur_ns", "min"), ("dur_ns", "max"),
    ])
    calls = grouped["dur_ns_count"]
    total = grouped["dur_ns_sum"]
    self_total = grouped["self_ns_sum"]
    denominator = pc.sum(self_total).as_py() or 0
    out = pa.table({
        **{k: grouped[k] for k in by},
        "calls": calls,
        "total_ns": total,
        "self_ns": self_total,
        "avg_ns": pc.cast(pc.round(pc.divide(pc.cast(total, pa.float64()), calls)), pa.int64()),
        "min_ns": grouped["dur_ns_min"],
        "max_ns": grouped["dur_ns_max"],
        "self_pct": _pct(self_total, denominator),
        "total_pct": _pct(total, denominator),
    })
    return sort_table(out, sort)


def _plain_keys(table: pa.Table, keys: Sequence[str]) -> pa.Table:
    for k in keys:
        if pa.types.is_dictionary(table.schema.field(k).type):
            table = table.set_column(table.schema.get_field_index(k), k, table[k].cast(pa.string()))
    return table


def _pct(values, denominator: int) -> pa.Array:
    if not denominator:
        return pc.multiply(pc.cast(values, pa.float64()), 0.0)
    return pc.round(pc.multiply(pc.divide(pc.cast(values, pa.float64()), denominator), 100.0), 2)


def sort_table(table: pa.Table, sort: str, descending: bool = True) -> pa.Table:
    if sort.startswith("-"):
        sort, descending = sort[1:], False
    if sort not in table.column_names:
        raise UsageError(f"cannot sort by {sort!r}; columns are {', '.join(table.column_names)}")
    order = "descending" if descending else "ascending"
    tiebreak = [(c, "ascending") for c in ("name",) if c in table.column_names and c != sort]
    return table.take(pc.sort_indices(table, [(sort, order)] + tiebreak))
