"""Tables for the HTML report: a Report section's Arrow table (or records) as rows of shown text and raw values,
formatted the way the terminal formats them, cut to the number of rows the section shows."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from opscope.render.html.page import TableBlock
from opscope.report import Column, Section
from opscope.units import format_bytes, format_cell, format_plain


@dataclass(frozen=True)
class Cell:
    """A table cell: ``text`` as shown, ``value`` as the data formats write it (sorting uses it)."""

    text: str
    value: Any


@dataclass(frozen=True)
class TableView:
    """What the template draws of a table."""

    key: str
    title: str
    columns: list[str]
    numeric: list[bool]
    rows: list[list[Cell]]
    #: rows in the analysis' table; more than ``len(rows)`` when the report shows only the first ones
    total_rows: int
    legend: str | None = None
    notes: Sequence[str] = ()
    searchable: bool = False


def table_view(block: TableBlock) -> TableView:
    """The block's section as the template draws it."""
    section = block.section
    if section.records is not None:
        return _records_view(section, block.searchable)
    return _table_view(section, block.searchable)


def _table_view(section: Section, searchable: bool) -> TableView:
    """The section's table shown as the terminal shows it: the columns the terminal (or every format) shows, the
    first ``limit`` rows; the notes say when rows were left out."""
    table = section.arrow if section.arrow is not None else pa.table({})
    hints = section.columns
    names = [n for n in table.column_names if hints.get(n, Column()).show in ("both", "terminal")
             and hints.get(n, Column()).sketch is None]
    if hints:
        names = [n for n in names if not (hints.get(n, Column()).hide_if_zero and _all_zero(table[n]))]
    shown = table.select(names)
    limit = section.limit
    if limit:
        shown = shown.slice(0, limit)
    plain = {n for n, h in hints.items() if h.unit == "plain"}
    rows = [[Cell(format_plain(v) if k in plain else _text(k, v), v) for k, v in row.items()]
            for row in shown.to_pylist()]
    numeric = [_is_numeric(table.schema.field(n)) for n in names]
    said = list(section.said)
    if limit and table.num_rows > limit:
        said.append(f"the first {limit:,} of {table.num_rows:,} rows, in the order the analysis sorts them "
                    "(opscope's JSON output has them all)")
    return TableView(section.key, section.title, names, numeric, rows, table.num_rows, section.legend, said,
                     searchable)


def _records_view(section: Section, searchable: bool) -> TableView:
    """Rows that share no Arrow schema (a finding's evidence): every key of any row is a column."""
    records = section.records or []
    columns: list[str] = []
    for r in records:
        columns += [k for k in r if k not in columns]
    limit = section.limit
    shown = records[: limit or None]
    rows = [[Cell(_text(c, r.get(c)), r.get(c)) for c in columns] for r in shown]
    numeric = [all(isinstance(r.get(c), int | float) or r.get(c) is None for r in records) for c in columns]
    notes = list(section.said)
    if limit and len(records) > limit:
        notes.append(f"the first {limit} of {len(records)} rows")
    return TableView(section.key, section.title, columns, numeric, rows, len(records), section.legend, notes,
                     searchable)


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
