"""The Trace: the model's tables plus what we know about where they came from."""

from __future__ import annotations

import threading
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator
from typing import Any, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc

from opscope.model.buffers import true_positions, values_view
from opscope.model.mapped import MappedTable
from opscope.model.schema import TABLE_SCHEMAS, kind_mask
from opscope.runtime import working

#: Kinds whose args :attr:`Trace.copy_args` holds.
COPY_KINDS = ("memcpy", "memset")
#: The schema of :attr:`Trace.replayed` (rows of the events table; null: the capture had none).
REPLAYED = pa.schema([("device_row", pa.int64()), ("op_row", pa.int64()), ("top_row", pa.int64()),
                      ("annotation_row", pa.int64())])

Table: TypeAlias = pa.Table
#: gives a table when first asked (a MappedTable: one read in place, which the trace keeps while it lives)
Loader: TypeAlias = Callable[[], "pa.Table | MappedTable"]


class ColumnLoader:
    """Reads chosen columns of a table on demand (a table file of the cache entry)."""

    def __init__(self, names: list[str], load: Callable[[list[str]], pa.Table], num_rows: int | None = None,
                 verify: Callable[[], None] | None = None) -> None:
        self.names = list(names)
        self.load = load
        #: the table's row count when known without reading a column (the file's footer says it)
        self.num_rows = num_rows
        #: raises when the columns read so far may no longer be what was checked (a file read in place changed)
        self.verify = verify or (lambda: None)


class Trace:
    """Arrow tables (``events``, ``flows``, ``counters``, ``memory``, ``steps``, ``args``) and metadata.

    ``metadata`` holds JSON-able facts: ``source`` (path), ``format``, ``tool``, ``device_properties``,
    ``rank``, ``world_size``, ``process_names``, ``thread_names``, ``header`` (the file's other top-level
    keys) and ``warnings`` (a list of ``{"problem": str, "count": int}``: what the reader could not map).
    Every table but ``events`` may be given as a zero-argument loader instead, and ``events`` as a
    :class:`ColumnLoader`: the cache does that, so that a command reads from disk only the tables, and
    with :meth:`select` only the event columns, it touches.

    A trace is not changed once built: its tables cannot be set (:meth:`replace` gives a new trace with other
    tables, so nothing computed on this one applies to it). It holds no analysis results: those are the memo's
    (:mod:`opscope.model.memo`), in a slot the trace carries for it.
    """

    def __init__(
        self,
        events: pa.Table | ColumnLoader,
        flows: Table | Loader,
        counters: Table | Loader,
        memory: Table | Loader,
        steps: Table | Loader,
        args: Table | Loader,
        metadata: dict[str, Any] | None = None,
        *,
        copy_args: Table | Loader | None = None,
        replayed: pa.Table | None = None,
    ) -> None:
        self._events: pa.Table | None = None
        self._event_loader: ColumnLoader | None = None
        self._event_columns: dict[str, pa.ChunkedArray] = {}
        #: the analyses' memo of this trace (:mod:`opscope.model.memo` keeps it here; the trace never reads it)
        self.memo_slot: Any = None
        # two threads may analyse one trace (advise's rules): a column being read is read once
        self._read_lock = threading.Lock()
        self._copy_lock = threading.Lock()
        if isinstance(events, ColumnLoader):
            self._event_loader = events
        else:
            self._events = events
        self._tables: dict[str, Table | Loader] = {
            "flows": flows, "counters": counters, "memory": memory, "steps": steps, "args": args}
        self._copy_args = copy_args
        self._mapped: list[MappedTable] = []  # the side tables read in place (see _table)
        self.metadata: dict[str, Any] = metadata if metadata is not None else {}
        self._replayed = replayed

    @property
    def replayed(self) -> pa.Table | None:
        """Device events replayed from a captured CUDA/HIP graph, given the ops that launched them at capture
        (:data:`REPLAYED`: ``device_row`` and the rows of the captured op, top-level op and annotation that stand for
        their launch; :mod:`opscope.analyses.capture_merge` makes them). None: no capture was merged."""
        return self._replayed

    @property
    def events(self) -> pa.Table:
        if self._events is None:
            if self._event_loader is None:
                raise RuntimeError("this trace has handed its tables over (Trace.hand_over)")
            self._events = self.select(self._event_loader.names)
        return self._events

    def replace(self, *, events: pa.Table | ColumnLoader | None = None, flows: Table | Loader | None = None,
                counters: Table | Loader | None = None, memory: Table | Loader | None = None,
                steps: Table | Loader | None = None, args: Table | Loader | None = None,
                copy_args: Table | Loader | None = None, replayed: pa.Table | None = None,
                metadata: dict[str, Any] | None = None) -> Trace:
        """A new trace with these tables instead of this one's, and the others (as held: a table not read yet is
        read by the new trace when it needs it) and the metadata (the same dict unless ``metadata`` is given) and
        replayed device events of this one. Its memo starts empty and it has no kept results. ``copy_args`` are this
        trace's unless ``args`` or ``copy_args`` are given."""
        held = self.held_tables()
        given = {"events": events, "flows": flows, "counters": counters, "memory": memory, "steps": steps,
                 "args": args}
        tables = {name: held[name] if value is None else value for name, value in given.items()}
        if copy_args is None and args is None:
            copy_args = self._copy_args
        new = Trace(metadata=self.metadata if metadata is None else metadata, copy_args=copy_args,
                    replayed=self._replayed if replayed is None else replayed, **tables)
        new._mapped = list(self._mapped)  # the maps its tables may be views of: kept, and checked, while it lives
        return new

    def hand_over(self) -> dict[str, Any]:
        """The tables as held (``events``, the side tables, ``copy_args``: tables or loaders), for the maker of the
        next trace from them (:func:`opscope.model.derive.complete`), and this trace lets go of them: a table the
        maker replaces is freed as soon as it is. This trace has no tables after (reading one is an error)."""
        held = self.held_tables()
        held["copy_args"] = self._copy_args
        self._events, self._event_loader, self._event_columns = None, None, {}
        self._tables, self._copy_args = {}, None
        return held

    def held_tables(self) -> dict[str, pa.Table | ColumnLoader | Loader]:
        """The tables as held now: each a table, or what reads it on first use."""
        if not self._tables:
            raise RuntimeError("this trace has handed its tables over (Trace.hand_over)")
        events: pa.Table | ColumnLoader | None = self._events if self._events is not None else self._event_loader
        assert events is not None
        return {"events": events, **self._tables}

    def select(self, names: list[str] | tuple[str, ...]) -> pa.Table:
        """The events table with only these columns; from the cache, only they are read."""
        if self._events is not None or self._event_loader is None:
            return self.events.select(list(names))
        missing = [n for n in names if n not in self._event_columns]
        if missing:
            with self._read_lock:
                missing = [n for n in names if n not in self._event_columns]
                if missing:
                    self._event_columns.update(zip(missing, self._event_loader.load(missing).columns))
        self._event_loader.verify()  # a column read in place may have changed since: not handed out then
        return pa.table({n: self._event_columns[n] for n in names})

    def verify(self) -> None:
        """Raise (TraceError, naming the file) when a table this trace reads in place has changed since it was
        checked: its cache file written or truncated from outside (:meth:`opscope.model.mapped.MappedTable.verify`).
        The trace checks after reading columns, and the memo after each analysis (:mod:`opscope.model.memo`); a
        caller that computes on the columns itself calls this before it trusts the result."""
        if self._event_loader is not None:
            self._event_loader.verify()
        for table in self._mapped:
            table.verify()

    @property
    def num_events(self) -> int:
        """Rows of the events table, without reading its columns when the cache's footer says it."""
        if self._events is None and self._event_loader is not None and self._event_loader.num_rows is not None:
            return self._event_loader.num_rows
        return self.events.num_rows

    def _table(self, name: str) -> pa.Table:
        if not self._tables:
            raise RuntimeError("this trace has handed its tables over (Trace.hand_over)")
        value = self._tables[name]
        if callable(value):
            loaded = value()
            if isinstance(loaded, MappedTable):
                # a table read in place: its file's pages are released while the MappedTable lives (as long as the
                # trace); the table alone would outlive it
                self._mapped.append(loaded)
                loaded = loaded.table
            value = self._tables[name] = loaded
        return value

    flows = property(lambda self: self._table("flows"))
    counters = property(lambda self: self._table("counters"))
    memory = property(lambda self: self._table("memory"))
    steps = property(lambda self: self._table("steps"))
    args = property(lambda self: self._table("args"))

    @property
    def copy_args(self) -> pa.Table:
        """The rows of ``args`` whose event is a copy or a fill (``memcpy``, ``memset``: :data:`COPY_KINDS`), in
        ``event_id`` order: the copies' sizes without reading every event's arguments (the cache keeps them in a
        file of their own; the host events' args are most of the table)."""
        value = self._copy_args
        if callable(value) or value is None:
            with self._copy_lock:
                value = self._copy_args
                if callable(value):
                    value = self._copy_args = value()
                elif value is None:  # picked out of the args on first use, from what was checked
                    with working():
                        value = copy_rows_of(self.args, self)
                    self.verify()
                    self._copy_args = value
        return value

    def args_of(self, event_ids: pa.Array | pa.ChunkedArray) -> pa.Table:
        """The rows of ``args`` whose event is one of ``event_ids``, in the table's order. Where the table is still
        in the cache entry, it is read batch by batch and only those rows are kept: the JSON text of every event
        (a quarter of the trace's JSON) is never held at once, nor kept by the trace."""
        picked = list(self.args_batches_of(event_ids))
        return pa.Table.from_batches(picked) if picked else TABLE_SCHEMAS["args"].empty_table()

    def args_batches_of(self, event_ids: pa.Array | pa.ChunkedArray) -> Iterator[pa.RecordBatch]:
        """:meth:`args_of`'s rows a batch at a time, for a caller that reads each batch's texts and keeps what it
        made of them, not the texts (a 1 GB trace's kernels have 106 MiB of args)."""
        if not self._tables:
            raise RuntimeError("this trace has handed its tables over (Trace.hand_over)")
        held = self._tables["args"]
        wanted = pc.unique(pc.drop_null(event_ids)).cast(pa.int64())
        if not len(wanted):  # no event asked about: nothing read
            return
        batches = getattr(held, "batches", None) if callable(held) else None
        if batches is None:
            table = self.args
            yield from table.filter(pc.is_in(table["event_id"], value_set=wanted)).to_batches()
            return
        wanted = wanted.take(pc.sort_indices(wanted))
        ids = values_view(wanted, "q")
        with working():
            for batch in batches():
                found = batch.column("event_id")
                low, high = pc.min_max(found).values()
                if low.as_py() is None:
                    continue
                # each batch looks for the ids within its own range (the table is in event order: a few of them)
                first, last = bisect_left(ids, low.as_py()), bisect_right(ids, high.as_py())
                if first < last:
                    yield batch.filter(pc.is_in(found, value_set=wanted.slice(first, last - first)))

    def held_args(self) -> Table | Loader:
        """The ``args`` table as held now: the table, or the loader that reads it on first use."""
        return self._tables["args"]

    def tables(self) -> dict[str, pa.Table]:
        return {name: getattr(self, name) for name in TABLE_SCHEMAS}

    @property
    def warnings(self) -> list[dict[str, Any]]:
        return self.metadata.setdefault("warnings", [])

    def warn(self, problem: str, count: int = 1) -> None:
        self.warnings.append({"problem": problem, "count": int(count)})

    def to_polars(self, table: str = "events"):
        """One table as a polars DataFrame (needs the ``polars`` extra)."""
        import polars as pl

        return pl.from_arrow(getattr(self, table))

    def to_pandas(self, table: str = "events"):
        return getattr(self, table).to_pandas()

    def __repr__(self) -> str:
        if not self._tables:
            return f"Trace({self.metadata.get('source')!r}, handed over)"
        return (f"Trace({self.metadata.get('source')!r}, events={self.events.num_rows}, "
                f"steps={self.steps.num_rows}, warnings={len(self.warnings)})")


def captured_copies(trace: Trace) -> int:
    """How many rows of the trace's events are copies of a graph capture's ops and annotations, not events of the
    trace itself (0: none; :mod:`opscope.analyses.capture_merge` counts them in the metadata's ``graph_capture``)."""
    facts = trace.metadata.get("graph_capture")
    return int(facts.get("copied_events", 0)) if isinstance(facts, dict) else 0


def copy_rows_of(args: pa.Table, trace: Trace) -> pa.Table:
    """The rows of ``args`` (``event_id``, ``args``) whose event is of a :data:`COPY_KINDS` kind."""
    if args.num_rows == 0:
        return args
    return copy_rows(args, trace.select(["kind"]))


def copy_rows(args: pa.Table, events: pa.Table) -> pa.Table:
    """:func:`copy_rows_of` given the events' ``kind`` column (``events``: a table holding it, its rows numbered as
    ``args``' ``event_id``)."""
    import pyarrow.compute as pc

    if args.num_rows == 0:
        return args
    is_copy = kind_mask(events, COPY_KINDS)  # event_id is the row index
    ids = args["event_id"]
    low, high = pc.min_max(ids).values()
    if ids.null_count == 0 and low.as_py() >= 0 and high.as_py() < events.num_rows:
        return args.filter(pc.take(is_copy, ids))  # a lookup per row, not a hash of the copies' ids
    rows = true_positions(is_copy).cast(pa.int64())
    return args.filter(pc.is_in(ids, value_set=rows))
