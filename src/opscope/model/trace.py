"""The Trace: the model's tables plus what we know about where they came from."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeAlias

import pyarrow as pa

from opscope.model.buffers import true_positions
from opscope.model.mapped import MappedTable
from opscope.model.schema import TABLE_SCHEMAS, kind_mask
from opscope.runtime import working

#: Kinds whose args :attr:`Trace.copy_args` holds.
COPY_KINDS = ("memcpy", "memset")

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
    ) -> None:
        self._events: pa.Table | None = None
        self._event_loader: ColumnLoader | None = None
        self._event_columns: dict[str, pa.ChunkedArray] = {}
        #: the analyses' memo of this trace (:mod:`opscope.model.memo` keeps it here; the trace never reads it)
        self.memo_slot: Any = None
        # two threads may analyse one trace (advise's rules): a column being read is read once
        self._read_lock = threading.Lock()
        self._copy_lock = threading.Lock()
        self.events = events
        self._tables: dict[str, Table | Loader] = {
            "flows": flows, "counters": counters, "memory": memory, "steps": steps, "args": args}
        self._copy_args = copy_args
        self._mapped: list[MappedTable] = []  # the side tables read in place (see _table)
        self.metadata: dict[str, Any] = metadata if metadata is not None else {}

    @property
    def events(self) -> pa.Table:
        if self._events is None and self._event_loader is not None:
            self._events = self.select(self._event_loader.names)
        return self._events

    @events.setter
    def events(self, value: pa.Table | ColumnLoader | None) -> None:
        self._event_columns = {}
        self.memo_slot = None  # no longer the trace analysed (nor the cached one)
        if isinstance(value, ColumnLoader):
            self._events, self._event_loader = None, value
        else:
            self._events, self._event_loader = value, None

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

    def _set(self, name: str, table: pa.Table) -> None:
        self._tables[name] = table
        self.memo_slot = None
        if name == "args":
            self._copy_args = None  # derived from the args given now

    flows = property(lambda self: self._table("flows"), lambda self, t: self._set("flows", t))
    counters = property(lambda self: self._table("counters"), lambda self, t: self._set("counters", t))
    memory = property(lambda self: self._table("memory"), lambda self, t: self._set("memory", t))
    steps = property(lambda self: self._table("steps"), lambda self, t: self._set("steps", t))
    args = property(lambda self: self._table("args"), lambda self, t: self._set("args", t))

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

    @copy_args.setter
    def copy_args(self, table: pa.Table) -> None:
        """The copies' args where the maker of ``args`` has them at hand (``complete``), so they are not picked
        out of ``args`` later."""
        self._copy_args = table

    def offload_args(self, loader: Loader) -> None:
        """Let go of the ``args`` table (the JSON text of every event: the biggest table) for ``loader``, which
        gives the same table again when it is asked for (from the cache entry being written). Unlike setting
        ``args``, the memo and :attr:`copy_args` stay: the table is the same."""
        self._tables["args"] = loader

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
        return (f"Trace({self.metadata.get('source')!r}, events={self.events.num_rows}, "
                f"steps={self.steps.num_rows}, warnings={len(self.warnings)})")


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
