"""Tables for the HTML report: an analysis' Arrow table (or a Report section) as rows of shown text and raw
values, formatted the way the terminal formats them, cut to a number of rows that keeps the file small."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pyarrow as pa

from opscope.render.html.page import Cell, TableBlock
from opscope.report import Column, Section
from opscope.units import format_bytes, format_cell, format_plain

_NUMERIC_SUFFIXES = ("_ns", "pct", "calls", "events", "bytes")


def table_block(key: str, title: str, table: pa.Table, *, limit: int | None = None, legend: str | None = None,
                notes: Sequence[str] = (), columns: Mapping[str, Column] | None = None,
                searchable: bool = False) -> TableBlock:
    """``table`` shown as the terminal shows it: the columns the terminal (or every format) shows, the first
    ``limit`` rows; ``notes`` say when rows were left out."""
    hints = columns or {}
    names = [n for n in table.column_names if hints.get(n, Column()).show in ("both", "terminal")
             and hints.get(n, Column()).sketch is None]
    if hints:
        names = [n for n in names if not (hints.get(n, Column()).hide_if_zero and _all_zero(table[n]))]
    shown = table.select(names)
    if limit:
        shown = shown.slice(0, limit)
    plain = {n for n, h in hints.items() if h.unit == "plain"}
    rows = [[Cell(format_plain(v) if k in plain else _text(k, v), v) for k, v in row.items()]
            for row in shown.to_pylist()]
    numeric = [_is_numeric(table.schema.field(n)) for n in names]
    said = list(notes)
    if limit and table.num_rows > limit:
        said.append(f"the first {limit:,} of {table.num_rows:,} rows, in the order the analysis sorts them "
                    "(opscope's JSON output has them all)")
    return TableBlock(key, title, names, numeric, rows, table.num_rows, legend, said, searchable)


def section_table(section: Section, key: str | None = None, title: str | None = None, limit: int | None = None,
                  searchable: bool = False) -> TableBlock | None:
    """A Report section's table (None when it has none)."""
    table = section.arrow
    if table is None:
        return None
    return table_block(key or section.key, title if title is not None else (section.title or section.caption or ""),
                       table, limit=limit or section.limit, legend=section.legend, notes=list(section.said),
                       columns=section.columns, searchable=searchable)


def records_table(key: str, title: str, records: Sequence[dict], limit: int | None = None) -> TableBlock | None:
    """Rows that share no Arrow schema (a finding's evidence)."""
    if not records:
        return None
    columns: list[str] = []
    for r in records:
        columns += [k for k in r if k not in columns]
    shown = records[: limit or None]
    rows = [[Cell(_text(c, r.get(c)), r.get(c)) for c in columns] for r in shown]
    numeric = [all(isinstance(r.get(c), int | float) or r.get(c) is None for r in records) for c in columns]
    notes = [f"the first {limit} of {len(records)} rows"] if limit and len(records) > limit else []
    return TableBlock(key, title, columns, numeric, rows, len(records), None, notes)


def _text(column: str, value) -> str:
    if value is None:
        return ""
    if isinstance(value, list | dict):
        return format_plain(str(value))
    if column.endswith("bytes") and isinstance(value, int | float) and not isinstance(value, bool):
        return format_bytes(value)
    return format_cell(column, value)


def _is_numeric(field: pa.Field) -> bool:
    t = field.type
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)


def _all_zero(column: pa.ChunkedArray) -> bool:
    return all(not v for v in column.to_pylist())
