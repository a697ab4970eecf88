"""Columns computed from the events once a reader is done: nesting, self time, steps.

Pure functions on Arrow tables; :func:`complete` is what every reader's output goes through.
Invariants after it: rows are in time order, ``event_id`` is the row index, ``parent`` holds a row index (or null).
"""

from __future__ import annotations

import re
from array import array
from collections.abc import Callable
from itertools import pairwise
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from opscope.model.buffers import c_enabled, minus_one_as_null, one_array, true_positions, values_view
from opscope.model.lookup import index_in
from opscope.model.ranges import arange
from opscope.model.schema import EVENTS, STEPS, buffers_key, kind_mask
from opscope.model.trace import Loader, Table, Trace, copy_rows
from opscope.runtime import stage_done
from opscope.threads import side_by_side

try:  # the loops over every event in C (_derive.c), where it was built; the Python ones below are the definition
    from opscope.model import _derive  # type: ignore[attr-defined]
except ImportError:
    _derive = None

#: Host kinds nest in two layers: Python frames among themselves, and everything the framework
#: records (ops, annotations, runtime calls) among themselves. Self time of an op is its duration
#: minus its direct children in its own layer, as torch's ``key_averages()`` computes it.
OP_LAYER = ("cpu_op", "user_annotation", "runtime", "overhead", "other")
PYTHON_LAYER = ("python",)
_STEP_NAME = re.compile(r"^ProfilerStep#(\d{1,18})$")  # more digits would not fit int64
#: Kernels whose kind their name decides, whatever the reader called them (the one place this is decided):
#: collectives of NCCL/RCCL are communication; copies and fills that run as kernels are copies and fills --
#: ROCm's blit kernels (``__amd_rocclr_copyBuffer``, ``__amd_rocclr_fillBuffer``: they run on the compute units, not a
#: copy engine, and move memory all the same) and XLA's copy ops on its memcpy streams (``CopyDeviceToDevice``).
#: Kernels that merely copy inside a computation (``CatArrayBatchedCopy``, ``direct_copy_kernel_cuda``) stay kernels.
KIND_BY_NAME: tuple[tuple[str, str], ...] = (
    ("comm", r"(?i)nccl|rccl"),
    ("memcpy", r"^(?:__amd_rocclr_copy(?:Buffer|BufferRect|Image|ImageToBuffer|BufferToImage)\w*"
               r"|Copy(?:Device|Host)To(?:Device|Host)|Memcpy[DH]2[DH])(?:\.kd)?$"),
    ("memset", r"^__amd_rocclr_fill(?:Buffer|Image)\w*(?:\.kd)?$"),
)
_MASK_STEP_LIMIT = 512
#: Traces of this tool (``metadata["tool"]``) get XProf's self time: TensorFlow's runtime events inside an op
#: (its thread-pool regions, ``ThreadpoolListener::Region``) are the op's own work, not a child's; XProf's framework
#: op stats subtract only nested framework ops.
XPROF_SELF_TIME_TOOL = "tensorflow"
#: Names longer than this are not demangled (the analyses' short names show their start) and are counted in a
#: warning. The longest kernel name in the real traces we test on has 5,123 characters; a 400,000-character one made
#: of ``<`` is an attack on the demangler, not a kernel.
LONG_NAME_CHARS = 1 << 14


def complete(trace: Trace, args_ready: Callable[[pa.Table], Loader | None] | None = None) -> Trace:
    """The completed trace of a reader's: rows without times dropped, comm kernels marked, nested, steps assigned.
    ``trace`` hands its tables over (:meth:`Trace.hand_over`): it is not used after.

    ``args_ready``: called with the final ``args`` table (its ``event_id`` the rows' new positions) as soon as the
    events are in time order, when nothing later changes the rows or their order (``copy_args`` is taken out of it
    first): the cache compresses and writes that table, the biggest, while the nesting runs, and returns what the
    completed trace holds instead (a loader that gives the same table again), or None to keep the table."""
    held = trace.hand_over()  # no other reference: each column below is freed as soon as it is replaced
    metadata = trace.metadata
    events = _distinct_dictionaries(held.pop("events").unify_dictionaries())
    bad = pc.or_(pc.is_null(events["ts_ns"]), pc.is_null(events["dur_ns"]))
    n_bad = pc.sum(pc.cast(bad, pa.int64())).as_py() or 0
    if n_bad:
        events = events.filter(pc.invert(bad))
        _warn(metadata, "events whose ts/dur do not fit 64-bit nanoseconds (dropped)", n_bad)
    n_long = _count_long_names(events["name"])
    if n_long:
        _warn(metadata, f"events named with more than {LONG_NAME_CHARS:,} characters (not demangled; short names "
              "show their start)", n_long)
    # Time order (longest first on ties) is part of the model: interval analyses then need no sort.
    order = pc.sort_indices(events, [("ts_ns", "ascending"), ("dur_ns", "descending")])
    names, columns = events.column_names, events.columns
    del events
    _take_in_place(columns, order)
    events = pa.table(columns, names=names)
    del columns
    stage_done()  # the unsorted columns are gone: their memory back before nesting allocates its own (tuned)
    given_args = held.pop("args")
    if callable(given_args):
        given_args = given_args()
    args = _args_at_rows(given_args, events["event_id"])
    copy_args = held.pop("copy_args")
    if args is not given_args:
        copy_args = None  # (taken from the args given, if any)
    del given_args
    args_held: Table | Loader = args
    if args_ready is not None and args.num_rows:
        copy_args = copy_rows(args, events.select(["kind"]))  # the copies' args, before the text may go
        args_held = args_ready(args) or args
    del args
    events = kinds_by_name(events)

    def nesting() -> tuple[pa.Array, pa.Array, pa.Array, int]:
        return nest(events, runtime_is_op_time=metadata.get("tool") == XPROF_SELF_TIME_TOOL)

    given_steps = held.pop("steps")
    if callable(given_steps):
        given_steps = given_steps()

    def stepping() -> tuple[pa.Table, pa.Array]:
        steps = given_steps if given_steps.num_rows else find_steps(events)  # a reader's own step marks come first
        return steps, assign_steps(events, steps)

    # independent of each other, and mostly Arrow and C work without the GIL: on two threads
    (parent, depth, self_ns, overlapping), (steps, step) = side_by_side(nesting, stepping, "opscope-derive")
    if overlapping:
        _warn(metadata, "events overlap the event they start in partly, on the same thread (not nested); their "
              "shared time is counted once in self times", overlapping)
    events = events.append_column("parent", parent)
    events = events.append_column("depth", depth)
    events = events.append_column("self_ns", self_ns)
    events = events.append_column("step", step)
    stage_done()  # nesting's and step lookup's temporaries (tuned)
    merged, op_self_ns = fold_duplicate_ops(events)
    events = events.append_column("merged", merged)
    events = events.append_column("op_self_ns", op_self_ns)
    events = _renumber(events.select(EVENTS.names).cast(EVENTS))
    return Trace(events=events, steps=steps, args=args_held, metadata=metadata, copy_args=copy_args, **held)


def _warn(metadata: dict[str, Any], problem: str, count: int) -> None:
    """:meth:`Trace.warn` on the metadata of the trace being completed."""
    metadata.setdefault("warnings", []).append({"problem": problem, "count": int(count)})


def _distinct_dictionaries(events: pa.Table) -> pa.Table:
    """Every dictionary column with each value once in its dictionary (a reader may map two categories to one kind).
    Unifying chunks does that for a column of several chunks, not for one of one; grouping on dictionary codes
    (Arrow's group_by on a dictionary column, the analyses' code grouping) counts on it."""
    for i, field in enumerate(events.schema):
        if not pa.types.is_dictionary(field.type):
            continue
        column = events.column(i)
        chunks = []
        for chunk in column.chunks:
            if pc.count_distinct(chunk.dictionary, mode="all").as_py() == len(chunk.dictionary):
                chunks.append(chunk)
                continue
            distinct = pc.dictionary_encode(chunk.dictionary)  # each old code -> the code of its value
            chunks.append(pa.DictionaryArray.from_arrays(pc.take(distinct.indices, chunk.indices),
                                                         distinct.dictionary))
        if any(a is not b for a, b in zip(chunks, column.chunks)):
            events = events.set_column(i, field.name, pa.chunked_array(chunks, field.type))
    return events


def _take_in_place(columns: list, order: pa.Array) -> None:
    """``columns[i] = columns[i].take(order)`` for every column, on two threads (Arrow's take releases the GIL).
    Column by column, each replaced as soon as it is taken: peak memory is three columns, not a second table. A column
    of the reader's many chunks is combined first: a take from one array is faster than from chunks (0.14 s against
    0.21 s for a 1 GB trace's columns, one thread), and the result is one chunk either way."""
    def take(first: int) -> None:
        for i in range(first, len(columns), 2):
            columns[i] = one_array(columns[i]).take(order)

    side_by_side(lambda: take(1), lambda: take(0), "opscope-take")


def _count_long_names(names: pa.ChunkedArray) -> int:
    """Rows whose name is longer than ``LONG_NAME_CHARS``, measured on the distinct names (the dictionary) only:
    after ``unify_dictionaries`` every chunk holds the same one, measured once."""
    total = 0
    measured: tuple[int, ...] = ()
    long = None
    for chunk in names.chunks:
        if not pa.types.is_dictionary(chunk.type):
            total += pc.sum(pc.cast(pc.greater(pc.utf8_length(chunk), LONG_NAME_CHARS), pa.int64())).as_py() or 0
            continue
        dictionary = chunk.dictionary
        key = buffers_key(dictionary)
        if key != measured:
            measured = key
            long = pc.greater(pc.utf8_length(dictionary), LONG_NAME_CHARS)
            long = long if pc.any(long).as_py() else None
        if long is not None:
            total += pc.sum(pc.cast(pc.take(long, chunk.indices), pa.int64())).as_py() or 0
    return total


def _args_at_rows(args: pa.Table, event_ids: pa.ChunkedArray) -> pa.Table:
    """``args`` with each row's ``event_id`` replaced by its event's row in the sorted events (whose ``event_id``
    column is ``event_ids``, the reader's numbers): the numbers :func:`_renumber` gives the events."""
    old = one_array(event_ids)
    if args.num_rows == 0 or old.equals(arange(0, len(old))):
        return args
    where = _positions(one_array(args["event_id"]), old)
    if where.null_count == 0:  # every args row still has its event: the text is kept as it is, not copied
        return pa.table({"event_id": pc.cast(where, pa.int64()), "args": args["args"]})
    keep = pc.is_valid(where)
    return pa.table({"event_id": pc.cast(pc.filter(where, keep), pa.int64()), "args": pc.filter(args["args"], keep)})


def _positions(keys: pa.Array, values: pa.Array) -> pa.Array:
    """Per key, its position in ``values`` (null where it is not there): :func:`index_in`, by inverting ``values``
    where they are distinct non-negative numbers below about twice their count (the reader's event numbers, in
    their sorted order), which reads each value once instead of hashing them all; else ``index_in`` itself."""
    n = len(values)
    if n == 0 or keys.null_count or values.null_count or keys.type != pa.int64() or values.type != pa.int64():
        return index_in(keys, values)
    bounds = pc.min_max(values).as_py()
    key_bounds = pc.min_max(keys).as_py()
    top = bounds["max"]
    if (bounds["min"] < 0 or top >= 2 * n + 1024 or (len(keys) and (key_bounds["min"] < 0 or key_bounds["max"] > top))):
        return index_in(keys, values)
    where = pc.inverse_permutation(values, max_index=top, output_type=pa.int64())
    if where.null_count != top + 1 - n:  # a value twice: index_in gives its first position
        return index_in(keys, values)
    return where if keys.equals(arange(0, top + 1)) else pc.take(where, keys)


def _renumber(events: pa.Table) -> pa.Table:
    """Make ``event_id`` the row index (readers may have dropped rows; the events are sorted): ``args`` got these
    numbers from :func:`_args_at_rows`."""
    new = arange(0, events.num_rows)
    if one_array(events["event_id"]).equals(new):
        return events
    return events.set_column(events.schema.get_field_index("event_id"), "event_id", new)


def kinds_by_name(events: pa.Table) -> pa.Table:
    """Kernels named as :data:`KIND_BY_NAME` says take its kind (``comm``, ``memcpy``, ``memset``), on the kind
    column's dictionary codes."""
    kernels = kind_mask(events, ("kernel",))
    if not pc.any(kernels).as_py():
        return events
    for kind_name, pattern in KIND_BY_NAME:
        hit = pa.chunked_array([
            pc.fill_null(pc.match_substring_regex(c.dictionary, pattern).take(c.indices), False)
            for c in events["name"].chunks], type=pa.bool_())
        hit = pc.and_(kernels, hit)
        if pc.any(hit).as_py():
            events = _set_kind(events, one_array(hit), kind_name)
    return events


def _set_kind(events: pa.Table, rows: pa.Array, kind_name: str) -> pa.Table:
    """``events`` with ``kind`` set to ``kind_name`` where ``rows`` is true."""
    kind = events["kind"]
    if not pa.types.is_dictionary(kind.type):
        marked = pc.if_else(rows, pa.scalar(kind_name), kind.cast(pa.string()))
        return events.set_column(events.schema.get_field_index("kind"), "kind", pc.dictionary_encode(marked))
    # on the codes: the kind joins each chunk's dictionary (once), and the rows take its code
    chunks, start = [], 0
    for chunk in kind.chunks:
        values = chunk.dictionary.to_pylist()
        dictionary = chunk.dictionary if kind_name in values else pa.concat_arrays(
            [chunk.dictionary, pa.array([kind_name], chunk.dictionary.type)])
        code = pa.scalar(values.index(kind_name) if kind_name in values else len(values), chunk.indices.type)
        indices = pc.if_else(rows.slice(start, len(chunk)), code, chunk.indices)
        chunks.append(pa.DictionaryArray.from_arrays(indices, dictionary))
        start += len(chunk)
    return events.set_column(events.schema.get_field_index("kind"), "kind", pa.chunked_array(chunks, kind.type))


def _codes(column: pa.ChunkedArray) -> pa.ChunkedArray:
    return pa.chunked_array([c.indices for c in column.chunks], type=pa.int32()) if column.num_chunks \
        else pa.chunked_array([], type=pa.int32())


def nest(events: pa.Table, runtime_is_op_time: bool = False) -> tuple[pa.Array, pa.Array, pa.Array, int]:
    """Parent row index, depth and self time per event, computed per thread and per layer, and how many events
    overlap partly (start inside an event and end after it: the event they start in is their parent, and the time
    they share is counted once, see :func:`_nest_sorted`).

    GPU and instant events get no parent (null), depth 0 and ``self_ns == dur_ns``. ``events`` must be in
    time order (longest first on ties), as :func:`complete` leaves them. With ``runtime_is_op_time`` (TensorFlow,
    as XProf counts it) a ``runtime`` event directly inside a ``cpu_op`` still gets that op as its parent but takes
    nothing from the op's self time.
    """
    n = events.num_rows
    # Typed arrays, not lists: 8 bytes per row instead of a Python int object per row.
    parent = array("q", [-1]) * n
    depth = array("i", [0]) * n
    self_ns = array("q", _int64_view(events["dur_ns"]))
    keep_self = None
    overlapping = 0
    if runtime_is_op_time:
        # 1 for runtime rows, 2 for op rows: a child of flag 1 under a parent of flag 2 is the parent's own time.
        flags = pc.add(pc.multiply(pc.cast(kind_mask(events, ("runtime",)), pa.int8()), 1),
                       pc.multiply(pc.cast(kind_mask(events, ("cpu_op",)), pa.int8()), 2))
        keep_self = bytes(pc.cast(flags, pa.uint8()).to_pylist())
    codes = [one_array(_codes(events[c])) for c in ("pid", "tid")] if n else []
    native = _native() and n and not any(c.null_count for c in codes)
    for layer in (OP_LAYER, PYTHON_LAYER):
        in_layer = pc.and_(kind_mask(events, layer), pc.is_null(events["stream"]))
        if native:  # each row to its thread's stack in the C walk, without sorting the rows by thread
            mask = one_array(pc.cast(pc.fill_null(in_layer, False), pa.uint8()))
            overlapping += _derive.nest_layer(values_view(mask, "B"), values_view(codes[0], "i"),
                                              values_view(codes[1], "i"), _int64_view(events["ts_ns"]),
                                              _int64_view(events["dur_ns"]), parent,
                                              depth, self_ns, keep_self)
            continue
        rows = pc.cast(true_positions(in_layer), pa.int64())
        if len(rows) == 0:
            continue
        thread = pc.add(pc.multiply(pc.cast(_codes(events["pid"]).take(rows), pa.int64()), 1 << 31),
                        pc.cast(_codes(events["tid"]).take(rows), pa.int64()))
        sub = pa.table({
            "row": rows,
            "thread": thread,
            "ts": events["ts_ns"].take(rows),
            "dur": events["dur_ns"].take(rows),
        })
        # A stable sort by thread keeps each thread's rows in the table's time order.
        sub = sub.take(pc.sort_indices(sub["thread"]))
        row_v, thread_v, ts_v, dur_v = (_int64_view(sub[c]) for c in ("row", "thread", "ts", "dur"))
        overlapping += _nest_walk()(row_v, thread_v, ts_v, dur_v, parent, depth, self_ns, keep_self)
    parent_arr = minus_one_as_null(parent, n)
    depth_arr = pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(depth)])
    self_arr = pc.max_element_wise(pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(self_ns)]), 0)
    return parent_arr, depth_arr, self_arr, overlapping


def _native() -> bool:
    """Whether the C loops are built and not turned off (``OPSCOPE_NATIVE=0``)."""
    return _derive is not None and c_enabled()


def _nest_walk():
    """The C stack walk where it can be used, else :func:`_nest_sorted`."""
    return _derive.nest_sorted if _native() else _nest_sorted


def _int64_view(values: pa.Array | pa.ChunkedArray) -> memoryview:
    """The values of a null-free int64 column as a memoryview (no Python object per value)."""
    return values_view(values, "q")


def _nest_sorted(rows, threads, tss, durs, parent, depth, self_ns, keep_self=None) -> int:
    """Stack walk over one layer's events sorted by thread, start, longest first; returns how many events end after
    the event they start inside (partly overlapping, not nested).

    Every instant of a thread's busy time is one event's self time: the innermost one, the latest started of those
    running then. So an event that runs past the event it starts in (clock jitter, or a writer's overlapping events)
    takes the part past that event's end from the events below it on the stack that were still running, and self
    times on a thread add up to its busy time. ``keep_self`` (per row: 1 runtime, 2 op, else 0) marks where a child
    takes nothing from its parent's self time.
    """
    stack_end: list[int] = []
    stack_row: list[int] = []
    push_end = stack_end.append
    push_row = stack_row.append
    last_thread = None
    overlapping = 0
    for row, thread, ts, dur in zip(rows, threads, tss, durs):
        if thread != last_thread:
            stack_end.clear()
            stack_row.clear()
            last_thread = thread
        elif stack_end:
            while stack_end and stack_end[-1] <= ts:
                stack_end.pop()
                stack_row.pop()
            if stack_row:
                up = stack_row[-1]
                parent[row] = up
                depth[row] = len(stack_row)
                end = stack_end[-1]
                if ts + dur <= end:
                    if keep_self is None or not (keep_self[row] == 1 and keep_self[up] == 2):
                        self_ns[up] -= dur
                else:
                    overlapping += 1
                    _take_overrun(ts, ts + dur, row, stack_end, stack_row, self_ns, keep_self)
        push_end(ts + dur)
        push_row(row)
    return overlapping


def _take_overrun(ts: int, end: int, row: int, stack_end: list[int], stack_row: list[int], self_ns, keep_self) -> None:
    """An event [ts, end) that runs past the top of the stack: each part of it is taken from the self time of the
    latest started stack event still running then (top down; an event that ended below the top owns nothing more)."""
    taken_until = ts
    for i in range(len(stack_end) - 1, -1, -1):
        open_until = stack_end[i]
        if open_until <= taken_until:
            continue
        until = min(open_until, end)
        up = stack_row[i]
        if keep_self is None or not (keep_self[row] == 1 and keep_self[up] == 2):
            self_ns[up] -= until - taken_until
        taken_until = until
        if taken_until >= end:
            break


def fold_duplicate_ops(events: pa.Table) -> tuple[pa.Array, pa.Array]:
    """``merged`` (a same-name only-child op folded into its parent) and the self time after folding.

    The folded child's self time moves to its nearest kept ancestor, as torch's profiler does when it
    removes duplicate nodes before ``key_averages()``.
    """
    n = events.num_rows
    self_ns = one_array(events["self_ns"]) if n else pa.array([], pa.int64())
    none_merged = pa.nulls(n, pa.bool_()).fill_null(False)
    if n == 0:
        return none_merged, self_ns
    is_op = one_array(kind_mask(events, ("cpu_op",)))
    parent = one_array(events["parent"])
    # Compare dictionary codes, not strings: one int32 per row instead of a copy of every name.
    names = events.select(["name"]).unify_dictionaries()["name"]
    codes = one_array(pa.chunked_array([c.indices for c in names.chunks], pa.int32())) \
        if pa.types.is_dictionary(names.type) else one_array(names)
    folded_in_c = _fold_in_c(events, parent, codes, is_op, self_ns)
    if folded_in_c is not None:
        return folded_in_c if folded_in_c[0] is not None else (none_merged, self_ns)
    same = pc.fill_null(pc.and_(is_op, pc.equal(codes, pc.take(codes, parent))), False)
    candidates = true_positions(same).cast(pa.int64())
    if len(candidates) == 0:
        return none_merged, self_ns
    layer = one_array(kind_mask(events, OP_LAYER))
    candidate_parents = pc.take(parent, candidates)
    # children in the op layer of each candidate's parent: a candidate is folded when it is the only one
    counts = pc.value_counts(pc.drop_null(pc.filter(parent, pc.and_(layer, pc.is_in(parent, candidate_parents)))))
    n_children = pc.take(counts.field("counts"), index_in(candidate_parents, counts.field("values")))
    folded = pc.fill_null(pc.equal(n_children, 1), False)
    dup = pc.filter(candidates, folded)
    if len(dup) == 0:
        return none_merged, self_ns
    row_ids = arange(0, n)
    # each row's place among the candidates (where it is one): merged where that candidate was folded
    place = pc.max_element_wise(pc.subtract(pc.cumulative_sum(pc.cast(same, pa.int64())), 1), 0)
    merged = pc.and_(same, pc.take(folded, place))
    kept = _kept_ancestors(merged, parent, row_ids)
    # each folded row's self time goes to its nearest kept ancestor
    moved = pa.table({"target": pc.take(kept, dup), "ns": pc.take(self_ns, dup)}).group_by("target").aggregate(
        [("ns", "sum")])
    extra = pc.fill_null(pc.take(moved["ns_sum"], index_in(row_ids, moved["target"])), 0)
    return merged, pc.add(self_ns, extra)


def _fold_in_c(events: pa.Table, parent: pa.Array, codes: pa.Array, is_op: pa.Array,
               self_ns: pa.Array) -> tuple[pa.Array | None, pa.Array] | None:
    """:func:`fold_duplicate_ops` by ``_derive.fold_ops`` (one pass; ``(None, self_ns)`` when nothing folds), or None
    where it is not built, a column does not suit it (names not dictionary codes, self times with nulls) or it
    declines (a parent after its row): the Arrow definition then runs."""
    n = events.num_rows
    if not _native() or codes.type != pa.int32() or self_ns.null_count or parent.type != pa.int64():
        return None
    layer = one_array(kind_mask(events, OP_LAYER))
    merged, op_self = bytearray(n), array("q", [0]) * n
    folded = _derive.fold_ops(values_view(pc.fill_null(parent, -1), "q"), values_view(pc.fill_null(codes, -1), "i"),
                              values_view(pc.cast(is_op, pa.uint8()), "B"),
                              values_view(pc.cast(layer, pa.uint8()), "B"), values_view(self_ns, "q"), merged, op_self)
    if folded < 0:
        return None
    if folded == 0:
        return None, self_ns
    return (pc.not_equal(pa.Array.from_buffers(pa.uint8(), n, [None, pa.py_buffer(merged)]), 0),
            pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(op_self)]))


def _kept_ancestors(merged: pa.Array, parent: pa.Array, row_ids: pa.Array) -> pa.Array:
    """Per row, the nearest row at or above it that is not folded: pointer doubling, log2(depth) vectorised
    steps. (A chain of n same-name ops nested in each other, as a hostile trace may hold, would cost n^2 walking up
    from every row, and n Python objects walking each chain once.)"""
    up = pc.if_else(merged, parent, row_ids)  # a folded row's parent is never null: it has a same-name parent
    while True:
        further = pc.take(up, up)
        if further.equals(up):
            return up
        up = further


def find_steps(events: pa.Table) -> pa.Table:
    """The ``ProfilerStep#N`` annotations as a steps table, sorted by start. (Kineto writes them as
    user annotations; its 2021 releases wrote them as operators, category "Operator".)"""
    wanted = pc.and_(kind_mask(events, ("user_annotation", "cpu_op")), _name_starts_with(events["name"],
                                                                                        "ProfilerStep#"))
    found = events.select(["name", "pid", "tid", "ts_ns", "dur_ns"]).filter(wanted)
    rows = []
    for name, pid, tid, ts, dur in zip(*(found[c].to_pylist() for c in ("name", "pid", "tid", "ts_ns",
                                                                         "dur_ns"))):
        m = _STEP_NAME.match(name)
        if m:
            rows.append((int(m.group(1)), name, pid, tid, ts, dur))
    rows.sort(key=lambda r: (r[4], r[0]))
    return pa.Table.from_pylist(
        [dict(zip(STEPS.names, r)) for r in rows], schema=STEPS
    )


def _name_starts_with(names: pa.ChunkedArray, prefix: str) -> pa.ChunkedArray:
    """Per row, whether the name starts with ``prefix``: tested once per distinct name (the dictionary), not per row."""
    chunks = []
    for chunk in names.chunks:
        if pa.types.is_dictionary(chunk.type):
            chunks.append(pc.fill_null(pc.starts_with(chunk.dictionary, prefix).take(chunk.indices), False))
        else:
            chunks.append(pc.fill_null(pc.starts_with(chunk, prefix), False))
    return pa.chunked_array(chunks, type=pa.bool_())


def assign_steps(events: pa.Table, steps: pa.Table) -> pa.Array:
    """Step number per event: host events by time, device work by its launch (correlation); device work with a
    correlation id but no launch in the trace belongs to no recorded step."""
    n = events.num_rows
    if steps.num_rows == 0:
        return pa.nulls(n, pa.int64())
    ts = events["ts_ns"]
    step = pa.nulls(n, pa.int64())
    starts = steps["ts_ns"].to_pylist()
    ends = [s + d for s, d in zip(starts, steps["dur_ns"].to_pylist())]
    numbers = steps["step"].to_pylist()
    if _native() and ts.null_count == 0 and None not in numbers and all(a <= b for a, b in pairwise(starts)):
        values, found = array("q", [0]) * n, bytearray(n)
        _derive.step_of(_int64_view(ts), array("q", starts), array("q", ends), array("q", numbers), values, found,
                        len(starts) > _MASK_STEP_LIMIT)
        step = pc.if_else(pc.not_equal(pa.Array.from_buffers(pa.uint8(), n, [None, pa.py_buffer(found)]), 0),
                          pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(values)]),
                          pa.scalar(None, pa.int64()))
    elif len(starts) <= _MASK_STEP_LIMIT:
        for s, e, k in zip(starts, ends, numbers):
            inside = pc.and_(pc.greater_equal(ts, s), pc.less(ts, e))
            step = pc.if_else(inside, pa.scalar(k, pa.int64()), step)
    else:
        import bisect

        values = []
        for t in ts.to_pylist():
            i = bisect.bisect_right(starts, t) - 1
            values.append(numbers[i] if i >= 0 and t < ends[i] else None)
        step = pa.array(values, pa.int64())
    # Device work belongs to the step that launched it, even when it runs after the step's host span.
    is_runtime = kind_mask(events, ("runtime",))
    runtime_corr = pc.filter(events["correlation"], is_runtime)
    runtime_step = pc.filter(step, is_runtime)
    if len(runtime_corr):
        where = index_in(events["correlation"], runtime_corr)
        launched = pc.take(runtime_step, where)
        is_device = pc.is_valid(events["stream"])
        step = pc.if_else(pc.and_(is_device, pc.is_valid(where)), launched, step)
        # Work whose launch is not in the trace was launched before it began, by a step that was not recorded
        # (as Holistic Trace Analysis counts it too); without correlation ids, time is all there is to go by.
        unlaunched = pc.and_(pc.and_(is_device, pc.is_valid(events["correlation"])), pc.is_null(where))
        step = pc.if_else(unlaunched, pa.scalar(None, pa.int64()), step)
    return one_array(step)
