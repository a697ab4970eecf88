"""Device event -> runtime launch -> CPU operator links (kernel -> launch -> op).

A kernel (memcpy, memset, collective) is linked to the runtime call that launched it through its
correlation id; a CUDA/HIP graph launch has one correlation id for all the kernels it runs, so they all
link to it. Traces without correlation ids (older tools, other writers) are linked by order instead:
the launches (``cudaLaunchKernel``, ``hipExtModuleLaunchKernel``, ``cudaMemcpyAsync``...) of each kind of
work are paired first-in first-out with the device events of that kind, per stream when the launches
say which stream, else per device, else over the trace, never with a device event that starts before
its launch. Those links are marked ``link_inferred``. TensorFlow timelines record no launch calls: their reader
gives a device row and its host op (the same graph node) one correlation id, and the op is then the launch.

From the launch, the host nesting (``parent``) gives the innermost ``cpu_op`` (the op that launched
the work), the outermost one (the top-level op the user called) and the innermost user annotation
(``record_function``), leaving out ``ProfilerStep#N`` (that is the ``step`` column).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from opscope.analyses.arrays import arange, combined, distinct_positions, name_match, native_loops, rows_where, scatter
from opscope.model.buffers import minus_one_as_null, values_view
from opscope.model.lookup import index_in
from opscope.model.memo import memoized
from opscope.model.schema import ANNOTATION_KINDS, LAUNCHING_OP_KINDS, kind_mask
from opscope.model.trace import Trace

#: Device work that a launch creates.
LINKED_KINDS = ("kernel", "comm", "memcpy", "memset")
#: Runtime calls that put work on a device, by the kind of work (used when there are no correlation ids).
LAUNCH_NAMES = {
    "kernel": r"^(cuda|cu|hip)\w*Launch\w*Kernel|^cudaLaunch$",
    "memcpy": r"^(cuda|cu|hip)Memcpy",
    "memset": r"^(cuda|cu|hip)Memset",
}
_WORK_CLASS = {"kernel": "kernel", "comm": "kernel", "memcpy": "memcpy", "memset": "memset"}
_STEP_ANNOTATION = r"^ProfilerStep#"
_MAX_CLIMB = 512
_COLUMNS = ["kind", "name", "ts_ns", "device", "stream", "correlation", "parent"]

LINK_SCHEMA = pa.schema([
    ("device_row", pa.int64()),
    ("launch_row", pa.int64()),
    ("op_row", pa.int64()),
    ("op_name", pa.string()),
    ("top_op_name", pa.string()),
    ("annotation", pa.string()),
    ("link_inferred", pa.bool_()),
])


@memoized()
def link_table(trace: Trace) -> pa.Table:
    """One row per device event (kernel, comm, memcpy, memset), in time order.

    ``device_row``/``launch_row``/``op_row`` are event rows (== ``event_id``); ``op_name`` is the innermost
    ``cpu_op`` around the launch, ``top_op_name`` the outermost, ``annotation`` the innermost user
    annotation other than ``ProfilerStep#N``. Nulls where there is no such event or no link.
    ``link_inferred`` is true where the launch was paired by order, not by correlation id.
    """
    return _link_table(trace)


def _link_table(trace: Trace) -> pa.Table:
    links = device_links(trace)
    names = trace.select(["name"])["name"]
    return pa.table({
        "device_row": links["device_row"],
        "launch_row": links["launch_row"],
        "op_row": links["op_row"],
        "op_name": _names_at(names, links["op_row"]),
        "top_op_name": _names_at(names, links["top_row"]),
        "annotation": _names_at(names, links["annotation_row"]),
        "link_inferred": links["link_inferred"],
    }, schema=LINK_SCHEMA)


@memoized()
def device_links(trace: Trace) -> dict[str, pa.Array]:
    """The link rows as arrays: device_row, launch_row, op_row, top_row, annotation_row, link_inferred (computed
    once per trace: do not change the dict)."""
    return _device_links(trace)


def _device_links(trace: Trace) -> dict[str, pa.Array]:
    events = trace.select(_COLUMNS)
    correlated = correlated_launches(trace)
    device_rows = correlated.device_rows
    launch, inferred = _launch_rows(events, correlated)
    op_row, top_row, annotation_row = climb(events, launch)
    if trace.replayed is not None and trace.replayed.num_rows:
        op_row, top_row, annotation_row = _captured_first(trace.replayed, device_rows, op_row, top_row,
                                                          annotation_row)
    return {"device_row": device_rows, "launch_row": launch, "op_row": op_row, "top_row": top_row,
            "annotation_row": annotation_row, "link_inferred": inferred}


def _captured_first(replayed: pa.Table, device_rows: pa.Array, *found: pa.Array) -> tuple[pa.Array, ...]:
    """The rows a graph capture gives the replayed device events (:attr:`Trace.replayed`), else those found here."""
    where = index_in(device_rows, replayed["device_row"])
    return tuple(combined(pc.coalesce(pc.take(replayed[column], where), rows))
                 for column, rows in zip(("op_row", "top_row", "annotation_row"), found))


@dataclass(frozen=True)
class CorrelatedLaunches:
    """The device events (kernel, comm, memcpy, memset) and the runtime calls that share their correlation id."""

    device_rows: pa.Array  #: the device events' rows, in row order
    device_corr: pa.Array  #: their correlation ids
    unkeyed_runtime: pa.Array  #: the rows of the runtime calls without a correlation id
    keyed_runtime: pa.Array  #: the rows of the runtime calls with one
    where: pa.Array  #: per device event, the position in ``keyed_runtime`` of the first call with its id (null: none)


@memoized(serves=("opscope.analyses.links.device_links", "opscope.analyses.gpu.shared_work"))
def correlated_launches(trace: Trace) -> CorrelatedLaunches:
    """:class:`CorrelatedLaunches` of the trace, once per trace: the device links and the GPU analysis's launch times
    both look the device events' correlation ids up among the runtime calls. (Held until both are made: 14 MiB on
    a 1 GB trace, the runtime calls without an id kept rather than every call and a mask.)"""
    return _correlated_launches(trace.select(["kind", "correlation"]))


def _correlated_launches(events: pa.Table, device_rows: pa.Array | None = None) -> CorrelatedLaunches:
    if device_rows is None:
        device_rows = rows_where(kind_mask(events, LINKED_KINDS))
    runtime = rows_where(kind_mask(events, ("runtime",)))
    correlation = events["correlation"]
    runtime_corr = combined(pc.take(correlation, runtime))
    has_corr = pc.is_valid(runtime_corr)
    device_corr = combined(pc.take(correlation, device_rows))
    where = index_in(device_corr, pc.filter(runtime_corr, has_corr))
    return CorrelatedLaunches(device_rows, device_corr, pc.filter(runtime, pc.invert(has_corr)),
                              pc.filter(runtime, has_corr), where)


def launch_rows(events: pa.Table, device_rows: pa.Array) -> tuple[pa.Array, pa.Array]:
    """The launch row of each device row (null where none) and whether it was inferred by order."""
    return _launch_rows(events, _correlated_launches(events, device_rows))


def _launch_rows(events: pa.Table, correlated: CorrelatedLaunches) -> tuple[pa.Array, pa.Array]:
    device_rows, device_corr = correlated.device_rows, correlated.device_corr
    launch = pc.take(correlated.keyed_runtime, correlated.where)
    launch = _op_launches(events, device_corr, launch)
    inferred = pa.nulls(len(device_rows), pa.bool_()).fill_null(False)
    # Without correlation ids on either side: pair by order.
    orphan_devices = pc.filter(device_rows, pc.is_null(device_corr))
    orphan_launches = correlated.unkeyed_runtime
    if len(orphan_devices) and len(orphan_launches):
        paired_devices, paired_launches = _pair_by_order(events, orphan_devices, orphan_launches)
        if len(paired_devices):
            position = pc.index_in(paired_devices, value_set=device_rows)
            by_order = scatter(len(device_rows), position, paired_launches)
            inferred = pc.and_(pc.is_null(launch), pc.is_valid(by_order))
            launch = pc.coalesce(launch, by_order)
    return combined(launch), combined(inferred)


def _op_launches(events: pa.Table, device_corr: pa.Array, launch: pa.Array) -> pa.Array:
    """Where no runtime call has a device row's correlation id, the ``cpu_op`` that has it: TensorFlow timelines
    record no launch calls, and their reader links each device row to its op (same graph node) this way."""
    missing = pc.and_(pc.is_null(launch), pc.is_valid(device_corr))
    if not pc.any(missing).as_py():
        return launch
    ops = rows_where(pc.and_(kind_mask(events, ("cpu_op",)), pc.is_valid(events["correlation"])))
    if not len(ops):
        return launch
    where = index_in(device_corr, pc.take(events["correlation"], ops))
    return pc.coalesce(launch, pc.take(ops, where))


def _pair_by_order(events: pa.Table, devices: pa.Array, launches: pa.Array) -> tuple[pa.Array, pa.Array]:
    """First-in first-out pairs (device row, launch row) of each kind of work and each queue."""
    kinds = pc.take(events["kind"], devices).cast(pa.string())
    device_class = pc.fill_null(combined(pc.replace_substring_regex(
        combined(kinds), r"^comm$", "kernel")), "")
    launch_names = pc.take(events["name"], launches)
    out_devices, out_launches = [], []
    for work, pattern in LAUNCH_NAMES.items():
        these_launches = pc.filter(launches, combined(name_match(launch_names, pattern)))
        these_devices = pc.filter(devices, pc.equal(device_class, work))
        if not len(these_launches) or not len(these_devices):
            continue
        for dev_group, launch_group in _queues(events, these_devices, these_launches):
            d, la = _fifo(events, dev_group, launch_group)
            out_devices.append(d)
            out_launches.append(la)
    if not out_devices:
        empty = pa.array([], pa.int64())
        return empty, empty
    return pa.concat_arrays(out_devices), pa.concat_arrays(out_launches)


def _queues(events: pa.Table, devices: pa.Array, launches: pa.Array):
    """Split into the queues that keep launch order: per (device, stream) when every launch names its
    stream, per device when every launch names its device, else one queue."""
    for columns in (("device", "stream"), ("device",)):
        launch_keys = [combined(pc.take(events[c], launches)) for c in columns]
        if all(k.null_count == 0 for k in launch_keys):
            device_keys = [combined(pc.take(events[c], devices)) for c in columns]
            launch_key, device_key = _combine(launch_keys), _combine(device_keys)
            for key in pc.unique(launch_key).to_pylist():
                yield (pc.filter(devices, pc.fill_null(pc.equal(device_key, key), False)),
                       pc.filter(launches, pc.equal(launch_key, key)))
            return
    yield devices, launches


def _combine(keys: list[pa.Array]) -> pa.Array:
    if len(keys) == 1:
        return pc.cast(keys[0], pa.string())
    return pc.binary_join_element_wise(*[pc.cast(k, pa.string()) for k in keys], "/")


def _fifo(events: pa.Table, devices: pa.Array, launches: pa.Array) -> tuple[pa.Array, pa.Array]:
    """Pair the i-th launch with the i-th device event, skipping device events that start before any
    launch left unpaired (they were launched before the trace began).

    Merged in time order (a launch before a device event at the same instant), launches count +1 and
    device events -1; the running sum's running minimum below zero counts the device events that found
    no launch. The m-th device event that did find one is paired with the m-th launch.
    """
    if not len(devices) or not len(launches):
        empty = pa.array([], pa.int64())
        return empty, empty
    ts = events["ts_ns"]
    merged = pa.table({
        "ts": pa.concat_arrays([combined(pc.take(ts, launches)), combined(pc.take(ts, devices))]),
        "order": pa.concat_arrays([pa.repeat(pa.scalar(0, pa.int8()), len(launches)),
                                   pa.repeat(pa.scalar(1, pa.int8()), len(devices))]),
        "row": pa.concat_arrays([launches, devices]),
    })
    merged = merged.take(pc.sort_indices(merged, [("ts", "ascending"), ("order", "ascending"), ("row", "ascending")]))
    is_device = pc.equal(merged["order"], 1)
    step = pc.if_else(is_device, -1, 1)
    running = pc.cumulative_sum(pc.cast(step, pa.int64()))
    unmatched = pc.negate(pc.min_element_wise(pc.cumulative_min(running), 0))  # device events without a launch
    previous = pa.concat_arrays([pa.array([0], pa.int64()), combined(unmatched).slice(0, len(unmatched) - 1)])
    found = pc.and_(is_device, pc.equal(unmatched, previous))
    device_rows = combined(pc.filter(merged["row"], found))
    n = min(len(device_rows), len(launches))
    return device_rows.slice(0, n), launches.slice(0, n)


def climb(events: pa.Table, launch: pa.Array) -> tuple[pa.Array, pa.Array, pa.Array]:
    """Innermost ``cpu_op``, outermost ``cpu_op`` and innermost annotation (not ``ProfilerStep#``) at or above
    each launch row (rows; null where none); ops and annotations a graph capture recorded count as such."""
    is_annotation = pc.and_(combined(kind_mask(events, ANNOTATION_KINDS)),
                            pc.invert(combined(name_match(events["name"], _STEP_ANNOTATION))))
    return climb_marks(events["parent"], combined(kind_mask(events, LAUNCHING_OP_KINDS)), is_annotation, launch)


def climb_marks(parents: pa.Array | pa.ChunkedArray, first: pa.Array, second: pa.Array,
                launch: pa.Array) -> tuple[pa.Array, pa.Array, pa.Array]:
    """Walking up the parents from each launch row (itself first): the innermost and the outermost row marked in
    ``first`` (bool per event), and the innermost marked in ``second`` (rows; null where none)."""
    parents = combined(parents)
    found = _climb_in_c(parents, first, second, launch)
    if found is not None:
        return found
    null = pa.nulls(len(launch), pa.int64())
    inner, outer, inner_second = null, null, null
    current = launch
    for _ in range(_MAX_CLIMB):
        if current.null_count == len(current):
            break
        here = pc.fill_null(pc.take(first, current), False)
        inner = pc.if_else(pc.and_(here, pc.is_null(inner)), current, inner)
        outer = pc.if_else(here, current, outer)
        here_second = pc.fill_null(pc.take(second, current), False)
        inner_second = pc.if_else(pc.and_(here_second, pc.is_null(inner_second)), current, inner_second)
        current = pc.take(parents, current)
    return inner, outer, inner_second


def _climb_in_c(parents: pa.Array, first: pa.Array, second: pa.Array,
                launch: pa.Array) -> tuple[pa.Array, pa.Array, pa.Array] | None:
    """:func:`climb_marks` by ``_loops.climb`` (one walk per launch, no column per step), or None where the C loops
    are not built (the definition above then runs)."""
    loops = native_loops()
    if loops is None or len(launch) == 0:
        return None
    # the parents as they are, their nulls read from the validity bitmap (not a copy of the column with -1 for null)
    up = pc.cast(combined(parents), pa.int64())
    valid = up.buffers()[0] if up.null_count else None
    start = pc.fill_null(pc.cast(combined(launch), pa.int64()), -1)
    marks = [pc.cast(pc.fill_null(combined(a), False), pa.uint8()) for a in (first, second)]
    m = len(launch)
    out = [bytearray(8 * m) for _ in range(3)]
    loops.climb(values_view(up, "q"), values_view(marks[0], "B"), values_view(marks[1], "B"),
                values_view(start, "q"), *out, _MAX_CLIMB, valid, up.offset)
    return tuple(minus_one_as_null(b, m) for b in out)


def ops_above(parents: pa.Array | pa.ChunkedArray, is_op: pa.Array, launch: pa.Array) -> pa.Array:
    """Every distinct row marked in ``is_op`` at or above some launch row (what :func:`op_ancestors` pairs with
    them), ascending: walked up level by level, each level holding only its distinct rows."""
    parents = combined(parents)
    n = len(parents)
    current = distinct_positions(launch, n)
    found = []
    for _ in range(_MAX_CLIMB):
        if not len(current):
            break
        found.append(pc.filter(current, pc.fill_null(pc.take(is_op, current), False)))
        current = distinct_positions(pc.take(parents, current), n)
    return distinct_positions(pa.chunked_array(found, pa.int64()), n) if found else pa.array([], pa.int64())


def op_ancestors(events: pa.Table, launch: pa.Array, kinds=("cpu_op",)) -> tuple[pa.Array, pa.Array]:
    """Every event of these kinds around each launch (the launch itself for ``runtime``): pairs
    (index into ``launch``, event row), innermost first."""
    parents = combined(events["parent"])
    is_op = combined(kind_mask(events, tuple(kinds)))
    index = arange(len(launch))
    current = launch
    keep = pc.is_valid(current)
    index, current = pc.filter(index, keep), pc.filter(current, keep)
    out_index, out_op = [], []
    for _ in range(_MAX_CLIMB):
        if not len(current):
            break
        here = pc.take(is_op, current)
        out_index.append(pc.filter(index, here))
        out_op.append(pc.filter(current, here))
        current = pc.take(parents, current)
        keep = pc.is_valid(current)
        index, current = pc.filter(index, keep), pc.filter(current, keep)
    if not out_index:
        empty = pa.array([], pa.int64())
        return empty, empty
    return pa.concat_arrays(out_index), pa.concat_arrays(out_op)


def launching_op(trace: Trace, device_rows: pa.Table) -> pa.Array:
    """For each row of ``device_rows`` (a selection of device events with their ``event_id``), the name
    of the innermost ``cpu_op`` that launched it; null where the trace has no such link."""
    links = device_links(trace)
    where = index_in(device_rows["event_id"], links["device_row"])
    return _names_at(trace.select(["name"])["name"], pc.take(links["op_row"], where))


# --- helpers -----------------------------------------------------------------------------------------

def _names_at(names: pa.ChunkedArray, rows: pa.Array) -> pa.Array:
    """The names at these rows as plain strings (null rows stay null)."""
    if not len(rows):
        return pa.array([], pa.string())
    return combined(pc.take(names, rows)).cast(pa.string())
