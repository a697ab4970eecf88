"""Per-kernel table: device work grouped by name (and by launching op with ``by_op``)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from opscope.analyses.arrays import combined, shares_pct
from opscope.analyses.filters import EventFilter
from opscope.analyses.links import launching_op
from opscope.analyses.names import demangled, distinct_forms, map_distinct, short_name
from opscope.analyses.ops import sort_table
from opscope.errors import UsageError
from opscope.model.memo import memoized
from opscope.model.schema import kind_mask
from opscope.model.trace import Trace

DEVICE_WORK = ("kernel", "comm", "memcpy", "memset")
#: How kernel names are shown: as the trace has them, demangled, or short (no templates/parameters).
NAME_FORMS = ("raw", "full", "short")


#: The ``op`` of ``kernels --by-op`` rows whose device work no op launched.
NO_LAUNCHING_OP = "(no launching op)"


@memoized(keep=True)  # kept in the cache entry: the next command on the same trace with the same options reads it
def kernel_table(trace: Trace, filt: EventFilter | None = None, by_op: bool = False,
                 sort: str = "total_ns", names: str = "raw") -> pa.Table:
    """One row per kernel name: calls, total/avg/min/max, share of all device time, streams.

    ``names="full"`` demangles C++ names; ``names="short"`` shows each kernel by its short form
    (``at::native::vectorized_elementwise_kernel``) unless that would read the same as another kernel's
    (:func:`shown_names`): different kernels never share a row. ``variants`` counts the names as the trace writes
    them in a row (a kernel written both mangled and demangled is one kernel, two variants).
    """
    if names not in NAME_FORMS:
        raise UsageError(f"names must be one of {', '.join(NAME_FORMS)}, not {names!r}")
    return _kernel_table(trace, filt, by_op, sort, names)


@memoized(keep=True)
def kernel_forms(trace: Trace) -> dict[str, str]:
    """Every device-work name of the trace -> the name tables show it by: its short form, longer where another kernel
    of the trace has the same (:func:`~opscope.analyses.names.distinct_forms`). Taken over the whole trace, so one
    kernel reads the same in every table and command, whatever rows a table lists."""
    events = trace.select(["kind", "name"])
    names = pc.unique(combined(pc.filter(events["name"], kind_mask(events, DEVICE_WORK))))
    if pa.types.is_dictionary(names.type):
        names = names.dictionary_decode()
    return distinct_forms([n for n in names.to_pylist() if n is not None])


def shown_names(trace: Trace, column: pa.Array | pa.ChunkedArray, *, encoded: bool = False) -> pa.Array:
    """Kernel names (a column of the trace's device-work names) as tables show them: :func:`kernel_forms`."""
    forms = kernel_forms(trace)
    return map_distinct(column, lambda v: forms.get(v) or short_name(v), encoded=encoded)


def names_shown(trace: Trace, column: pa.ChunkedArray, names: str) -> pa.Array | pa.ChunkedArray:
    """The names in the form asked for, as a dictionary array (see NAME_FORMS)."""
    if names == "raw":
        return column
    return demangled(column, encoded=True) if names == "full" else shown_names(trace, column, encoded=True)


def _as_text(column: pa.ChunkedArray) -> pa.ChunkedArray:
    return column.cast(pa.string()) if pa.types.is_dictionary(column.type) else column


def _kernel_table(trace: Trace, filt: EventFilter | None, by_op: bool, sort: str, names: str) -> pa.Table:
    filt = filt or EventFilter()
    kinds = filt.kinds or DEVICE_WORK
    filt = EventFilter(kinds=kinds, match=filt.match, exclude=filt.exclude, steps=filt.steps)
    columns = ["kind", "name", "dur_ns", "stream", "step", "correlation"] + (["event_id"] if by_op else [])
    rows = filt.apply(trace.select(columns))
    # names and kinds grouped on dictionary codes (one code per distinct string), made text once per group: a
    # kernel name runs to hundreds of characters, and a copy of each row's would cost more than the grouping
    table = pa.table({
        "name": names_shown(trace, rows["name"], names),
        "kind": rows["kind"],
        "dur_ns": rows["dur_ns"],
        "stream": rows["stream"],  # ints: their distinct values per group are formatted after grouping
    }).unify_dictionaries()
    aggregates = [("dur_ns", "count"), ("dur_ns", "sum"), ("dur_ns", "min"), ("dur_ns", "max"),
                  ("stream", "distinct")]
    if names == "short":
        # distinct as the trace writes them; one dictionary (chunks read from the cache may differ in theirs)
        table = table.append_column("full", combined(rows["name"]) if rows.num_rows else rows["name"])
        aggregates.append(("full", "count_distinct"))
    keys = ["name", "kind"]
    if by_op:
        table = table.append_column("op", launching_op(trace, rows))
        table = table.set_column(table.schema.get_field_index("op"), "op",
                                 pc.fill_null(table["op"], NO_LAUNCHING_OP))
        keys = ["op"] + keys
    grouped = table.group_by(keys, use_threads=False).aggregate(aggregates)
    total = grouped["dur_ns_sum"]
    calls = grouped["dur_ns_count"]
    streams = [",".join(str(s) for s in sorted(s for s in v if s is not None)) for v in
               grouped["stream_distinct"].to_pylist()]
    out = {
        **{k: _as_text(grouped[k]) for k in keys},
        "calls": calls,
        "total_ns": total,
        "avg_ns": pc.cast(pc.round(pc.divide(pc.cast(total, pa.float64(), safe=False), calls)), pa.int64()),
        "min_ns": grouped["dur_ns_min"],
        "max_ns": grouped["dur_ns_max"],
        "pct": shares_pct(total, pc.sum(total).as_py() or 0),
        "streams": pa.array(streams, pa.string()),
    }
    if names == "short":
        out["variants"] = grouped["full_count_distinct"]
    return sort_table(pa.table(out), sort)

