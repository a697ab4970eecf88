"""The Trace: the model's tables plus what we know about where they came from."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa

from opscope.model.schema import TABLE_SCHEMAS


class Trace:
    """Arrow tables (``events``, ``flows``, ``counters``, ``memory``, ``steps``, ``args``) and metadata.

    ``metadata`` holds JSON-able facts: ``source`` (path), ``format``, ``tool``, ``device_properties``,
    ``rank``, ``world_size``, ``process_names``, ``thread_names``, ``header`` (the file's other top-level
    keys) and ``warnings`` (a list of ``{"problem": str, "count": int}``: what the reader could not map).
    The ``args`` table (full JSON args per event) may be loaded lazily from the cache on first use.
    """

    def __init__(
        self,
        events: pa.Table,
        flows: pa.Table,
        counters: pa.Table,
        memory: pa.Table,
        steps: pa.Table,
        args: pa.Table | Callable[[], pa.Table],
        metadata: dict[str, Any] | None = None,
    ) -> None:
        self.events = events
        self.flows = flows
        self.counters = counters
        self.memory = memory
        self.steps = steps
        self._args = args
        self.metadata: dict[str, Any] = metadata if metadata is not None else {}

    @property
    def args(self) -> pa.Table:
        if callable(self._args):
            self._args = self._args()
        return self._args

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
