"""Per-operator table: calls, total, self, avg/min/max and share of self time (key_averages-like)."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from opscope.analyses.arrays import combined, group_numbers, shares_pct
from opscope.analyses.filters import EventFilter
from opscope.errors import UsageError
from opscope.model.lookup import index_in
from opscope.model.memo import memoized
from opscope.model.trace import Trace

GROUP_KEYS = ("name", "shapes", "dtypes", "kind", "pid", "tid", "step")


def op_table(
    trace: Trace,
    by: Sequence[str] = ("name",),
    filt: EventFilter | None = None,
    sort: str = "self_ns",
    merge_duplicates: bool = True,
    python_api: bool = False,
    coverage: bool = True,
) -> pa.Table:
    """One row per group of host events (default: ``cpu_op`` events grouped by name).

    With ``merge_duplicates`` (the default, as torch's ``key_averages()`` does) an op whose only
    child is an op of the same name (``aten::div`` dispatching to ``aten::div``) counts once.

    ``self_pct`` is the group's share of the self time of all selected events (the shares add up
    to 100); ``total_pct`` is the share of the selected events' time (their union, overlaps once) during
    which an event of the group ran (the group's union): never above 100, even for nested annotations
    (a sum of nested totals over the self time read 674%). With ``python_api`` (and ``name`` among ``by``),
    a ``python_api`` column names the Python function that records the op (``aten::conv2d`` ->
    ``torch.nn.functional.conv2d``). Without ``coverage`` the table has no ``total_pct`` (its unions are the table's
    costliest part, and a caller that only adds up times, as diff does, has no use for them).
    """
    for key in by:
        if key not in GROUP_KEYS:
            raise UsageError(f"cannot group by {key!r}; choose from {', '.join(GROUP_KEYS)}")
    return _op_table(trace, tuple(by), filt, sort, merge_duplicates, python_api, coverage)


@memoized(keep=True)  # kept in the cache entry: the next command on the same trace with the same options reads it
def _op_table(trace: Trace, by: Sequence[str], filt: EventFilter | None, sort: str, merge_duplicates: bool,
              python_api: bool, coverage: bool = True) -> pa.Table:
    filt = filt or EventFilter(kinds=("cpu_op",))
    asked = ["kind", "name", "step"]  # what a filter may look at
    if merge_duplicates:  # folded once at ingest (model.derive.fold_duplicate_ops)
        events = trace.select(list(dict.fromkeys([*by, "ts_ns", "dur_ns", "op_self_ns", "merged", *asked])))
        keep = filt.mask(events)
        not_merged = pc.invert(events["merged"])
        keep = not_merged if keep is None else pc.and_(keep, not_merged)
        self_column = "op_self_ns"
    else:
        events = trace.select(list(dict.fromkeys([*by, "ts_ns", "dur_ns", "self_ns", *asked])))
        keep = filt.mask(events)
        self_column = "self_ns"
    # only the columns the table needs are filtered (copied)
    events = pa.table({**{k: events[k] for k in by}, "ts_ns": events["ts_ns"], "dur_ns": events["dur_ns"],
                       "self_ns": events[self_column]})
    if keep is not None:
        events = events.filter(keep)
    group, keys = group_numbers(events, by)
    grouped = pa.table({"g": group, "dur_ns": events["dur_ns"], "self_ns": events["self_ns"]}).group_by(
        "g", use_threads=False).aggregate([("dur_ns", "count"), ("dur_ns", "sum"), ("self_ns", "sum"),
                                           ("dur_ns", "min"), ("dur_ns", "max")]).sort_by("g")  # groups' order
    calls = grouped["dur_ns_count"]
    total = grouped["dur_ns_sum"]
    self_total = grouped["self_ns_sum"]
    denominator = pc.sum(self_total).as_py() or 0
    key_values = keys(grouped["g"])
    out = pa.table({
        **key_values,
        **_api_column(trace, key_values, by, python_api),
        "calls": calls,
        "total_ns": total,
        "self_ns": self_total,
        "avg_ns": pc.cast(pc.round(pc.divide(pc.cast(total, pa.float64(), safe=False), calls)), pa.int64()),
        "min_ns": grouped["dur_ns_min"],
        "max_ns": grouped["dur_ns_max"],
        "self_pct": shares_pct(self_total, denominator),
        **({"total_pct": _covered_pct(events, group, grouped["g"])} if coverage else {}),
    })
    return sort_table(out, sort)


def _covered_pct(events: pa.Table, group: pa.Array, groups: pa.ChunkedArray) -> pa.Array:
    """Per group (``groups``, the numbers ``group`` gives each row): % of the union of all events' spans that the
    group's spans cover.

    Why unions: totals of nested events (ProfilerStep#N around the annotations inside it) add up to many
    times the time they cover, and a share of such a sum is not a share of anything.
    """
    from opscope.analyses.intervals import union_by_group, union_ns

    covered = union_by_group(events["ts_ns"], events["dur_ns"], group) if events.num_rows else {}
    whole = union_ns(events["ts_ns"], events["dur_ns"]) if events.num_rows else 0
    return shares_pct(pa.array([covered.get(g, 0) for g in groups.to_pylist()], pa.int64()), whole)


def _api_column(trace: Trace, grouped: dict[str, pa.Array], by: Sequence[str], wanted: bool) -> dict[str, pa.Array]:
    if not wanted or "name" not in by:
        return {}
    from opscope.analyses.names import framework_of, python_apis

    return {"python_api": python_apis(grouped["name"], framework_of(trace.metadata))}


def sort_table(table: pa.Table, sort: str, descending: bool = True) -> pa.Table:
    if sort.startswith("-"):
        sort, descending = sort[1:], False
    if sort not in table.column_names:
        raise UsageError(f"cannot sort by {sort!r}; columns are {', '.join(table.column_names)}")
    order = "descending" if descending else "ascending"
    tiebreak = [(c, "ascending") for c in ("name",) if c in table.column_names and c != sort]
    return table.take(pc.sort_indices(table, [(sort, order)] + tiebreak))


def gpu_op_table(
    trace: Trace,
    by: Sequence[str] = ("name",),
    filt: EventFilter | None = None,
    sort: str = "gpu_ns",
    names: str = "short",
    top: int = 3,
) -> pa.Table:
    """Per op group: the device work it launched, itself or through the ops it called.

    ``kernels`` counts the device events (kernels, memcpys, memsets, collectives) whose launch lies
    inside an op of the group, ``gpu_ns`` adds up their durations (an event counts once per group, even
    when ops of the group nest), ``cpu_ns`` is the ops' total (inclusive) host time as in
    :func:`op_table`, and ``gpu_cpu_ratio`` is ``gpu_ns / cpu_ns``. ``top_kernels`` names the ``top``
    kernels by device time with their share of the group's ``gpu_ns``, in ``names`` form (short or full).
    Only groups that launched device work are listed.
    """
    from opscope.analyses.links import device_links, op_ancestors
    from opscope.analyses.names import demangled, short_names

    filt = filt or EventFilter(kinds=("cpu_op",))
    kinds = tuple(filt.kinds or ("cpu_op",))
    base = op_table(trace, by=by, filt=filt, sort="total_ns", python_api=True)
    links = device_links(trace)
    events = trace.select(list(dict.fromkeys(list(by) + ["kind", "name", "step", "merged", "event_id", "parent",
                                                         "dur_ns"])))
    index, op_rows = op_ancestors(events, climb_start(trace, links), (*kinds, "captured_op"))
    # The op rows that op_table counts: selected by the filter, same-name only children folded away; and the ops a
    # graph capture recorded, by name (they have no step: their device events' steps are looked at instead)
    unfolded = events.select([c for c in events.column_names if c != "parent"]).filter(
        pc.invert(pc.fill_null(events["merged"], False)))
    counted = filt.apply(unfolded)["event_id"]
    captured = EventFilter(kinds=("captured_op",), match=filt.match, exclude=filt.exclude).apply(unfolded)["event_id"]
    keep = pc.is_in(op_rows, value_set=combined(counted))
    if len(captured):
        from_capture = pc.is_in(op_rows, value_set=combined(captured))
        if filt.steps:
            device_steps = pc.take(events["step"], pc.take(links["device_row"], index))
            from_capture = pc.and_(from_capture, pc.fill_null(pc.is_in(device_steps, value_set=pa.array(
                list(filt.steps), pa.int64())), False))
        keep = pc.or_(keep, from_capture)
    index, op_rows = pc.filter(index, keep), pc.filter(op_rows, keep)
    device_rows = pc.take(links["device_row"], index)
    pairs = pa.table({
        "device": device_rows,
        **{k: combined(pc.take(events[k], op_rows)) for k in by},  # dictionary codes where the column has them
    })
    # One event counts once per group even when ops of that group nest (aten::to inside aten::to).
    pairs = pairs.group_by(["device"] + list(by), use_threads=False).aggregate([])
    pairs = pairs.append_column("dur", pc.take(events["dur_ns"], pairs["device"]))
    pairs = pairs.append_column("kernel", combined(pc.take(events["name"], pairs["device"])))
    per_group = pairs.group_by(list(by), use_threads=False).aggregate([("dur", "count"), ("dur", "sum")])
    # Kernel names are shown (demangled, shortened) only once grouped: a few rows per op, not one per launch.
    per_kernel = pairs.group_by(list(by) + ["kernel"], use_threads=False).aggregate([("dur", "sum")])
    shown = short_names if names == "short" else demangled
    per_kernel = per_kernel.set_column(per_kernel.schema.get_field_index("kernel"), "kernel",
                                       shown(per_kernel["kernel"]))
    per_kernel = per_kernel.group_by(list(by) + ["kernel"], use_threads=False).aggregate([("dur_sum", "sum")])
    per_kernel = per_kernel.rename_columns(["dur_sum" if c == "dur_sum_sum" else c for c in per_kernel.column_names])
    tops = _top_kernels(per_kernel, by, top)

    base_key = _key(base, by)
    where = pc.index_in(base_key, value_set=_key(per_group, by))
    kernels = pc.take(per_group["dur_count"], where)
    gpu = pc.take(per_group["dur_sum"], where)
    cpu = base["total_ns"]
    ratio = pc.if_else(pc.greater(cpu, 0), pc.round(pc.divide(pc.cast(gpu, pa.float64(), safe=False),
                                                              pc.cast(cpu, pa.float64(), safe=False)), 3), None)
    top_text = pc.take(pa.array([tops.get(k) for k in _key(per_group, by).to_pylist()], pa.string()), where)
    out = pa.table({
        **{k: base[k] for k in by},
        "python_api": base["python_api"] if "python_api" in base.column_names else pa.nulls(base.num_rows,
                                                                                              pa.string()),
        "calls": base["calls"],
        "cpu_ns": cpu,
        "kernels": kernels,
        "gpu_ns": gpu,
        "gpu_cpu_ratio": ratio,
        "top_kernels": top_text,
    })
    out = out.filter(pc.is_valid(out["gpu_ns"]))
    captured_only = pc.invert(pc.is_in(_key(per_group, by), value_set=base_key))
    if pc.any(captured_only).as_py():
        out = pa.concat_tables([out, _captured_groups(trace, per_group.filter(captured_only), by, tops, out.schema)])
    return sort_table(out, sort)


def _captured_groups(trace: Trace, groups: pa.Table, by: Sequence[str], tops: dict[str, str],
                     schema: pa.Schema) -> pa.Table:
    """Rows of :func:`gpu_op_table` for groups only ops a graph capture recorded have: no host calls in this trace
    (the ops ran at capture), the device time of the replayed kernels they launched."""
    n = groups.num_rows
    zeros = pa.repeat(pa.scalar(0, pa.int64()), n)
    rows = {
        **{k: groups[k] for k in by},
        "python_api": _api_column(trace, {"name": groups["name"]}, by, True).get("python_api", pa.nulls(n)),
        "calls": zeros,
        "cpu_ns": zeros,
        "kernels": groups["dur_count"],
        "gpu_ns": groups["dur_sum"],
        "gpu_cpu_ratio": pa.nulls(n, pa.float64()),
        "top_kernels": pa.array([tops.get(k) for k in _key(groups, by).to_pylist()], pa.string()),
    }
    return pa.table({f.name: pc.cast(combined(rows[f.name]), f.type) for f in schema}, schema=schema)


def climb_start(trace: Trace, links: dict[str, pa.Array]) -> pa.Array:
    """Where each device event's ops are looked for: its launch, or for a graph replay merged with its capture
    (:mod:`opscope.analyses.capture_merge`) the op (else annotation) the capture recorded around its launch."""
    replayed = trace.replayed
    if replayed is None or not replayed.num_rows:
        return links["launch_row"]
    where = index_in(links["device_row"], replayed["device_row"])
    captured = pc.take(pc.coalesce(replayed["op_row"], replayed["annotation_row"]), where)
    return combined(pc.coalesce(captured, links["launch_row"]))


def _top_kernels(per_kernel: pa.Table, by: Sequence[str], top: int) -> dict[str, str]:
    """``{group key: "kernel (45%), kernel (30%), ..."}`` from (group, kernel, dur_sum) rows."""
    keys = _key(per_kernel, by).to_pylist()
    rows: dict[str, list[tuple[int, str]]] = {}
    for key, name, total in zip(keys, per_kernel["kernel"].to_pylist(), per_kernel["dur_sum"].to_pylist()):
        rows.setdefault(key, []).append((total, name or "?"))
    out = {}
    for key, items in rows.items():
        items.sort(key=lambda item: (-item[0], item[1]))
        whole = sum(t for t, _ in items) or 1
        text = ", ".join(f"{name} ({100 * t / whole:.0f}%)" for t, name in items[:top])
        if len(items) > top:
            text += f", +{len(items) - top} more"
        out[key] = text
    return out


def _key(table: pa.Table, by: Sequence[str]) -> pa.Array:
    """One string per row that identifies its group (the group columns joined; nulls kept apart)."""
    parts = [pc.fill_null(pc.cast(combined(table[k]), pa.string()), "\x00") for k in by]
    if len(parts) == 1:
        return parts[0]
    return pc.binary_join_element_wise(*parts, "\x1f")

