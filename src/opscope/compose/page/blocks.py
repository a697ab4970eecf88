"""A report page's tables, taken from the Report sections of the command that shows the same numbers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from opscope.render.html.page import TableBlock
from opscope.report import Report, Section

if TYPE_CHECKING:
    import pyarrow as pa

#: Rows a table of the report holds at most: the file stays small; the JSON output has every row.
TABLE_ROWS = 300


def part(report: Report, key: str) -> Section | None:
    """The report's section ``key``."""
    return next((s for s in report.sections if s.key == key), None)


def section_table(section: Section, key: str | None = None, title: str | None = None, limit: int | None = None,
                  searchable: bool = False) -> TableBlock | None:
    """A Report section's table (None when it has none) under the page's key and title, its table and notes
    computed here (in the section's thread), not when the page is written."""
    table = section.arrow
    if table is None:
        return None
    shown = Section(key or section.key, title if title is not None else (section.title or section.caption or ""),
                    table, legend=section.legend, notes=list(section.said), limit=limit or section.limit,
                    columns=section.columns)
    return TableBlock(shown, searchable)


def table_block(key: str, title: str, table: pa.Table, *, limit: int | None = None,
                searchable: bool = False) -> TableBlock:
    """An analysis' own table, its first ``limit`` rows shown."""
    return TableBlock(Section(key, title, table, limit=limit), searchable)


def records_table(key: str, title: str, records: list[dict], limit: int | None = None) -> TableBlock | None:
    """Rows that share no Arrow schema (a finding's evidence); None when there are none."""
    if not records:
        return None
    return TableBlock(Section(key, title, records=records, limit=limit))


def tables(report: Report, keys: Sequence[str]) -> list[TableBlock | None]:
    """The tables of the report's sections ``keys`` that it has."""
    out = []
    for key in keys:
        section = part(report, key)
        if section is not None:
            out.append(section_table(section))
    return out
