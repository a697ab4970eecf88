"""Machine-readable output: JSON (array of row objects) and CSV, times as integer nanoseconds."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from typing import Any

import msgspec
import pyarrow as pa


def rows_of(table: pa.Table | list[dict[str, Any]]) -> list[dict[str, Any]]:
    return table.to_pylist() if isinstance(table, pa.Table) else table


def to_json(table: pa.Table | list[dict[str, Any]]) -> str:
    return msgspec.json.format(msgspec.json.encode(rows_of(table)), indent=2).decode()


def to_csv(table: pa.Table | list[dict[str, Any]], columns: Iterable[str] | None = None) -> str:
    rows = rows_of(table)
    if columns is None:
        columns = table.column_names if isinstance(table, pa.Table) else (list(rows[0]) if rows else [])
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: ("" if v is None else v) for k, v in r.items()})
    return buf.getvalue()
