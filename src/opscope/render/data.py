"""What the data formats share: the report's one document (rows and columns) and the lines said on stderr."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from rich.console import Console

from opscope.report import Report, Section
from opscope.text import one_line


def document(report: Report, keep: tuple[str, ...]) -> tuple[list[str], list[dict[str, Any]]]:
    """Columns and rows of the report's data section, cut to its limit, with the columns whose ``show``
    is in ``keep``."""
    section = report.data_section()
    if section is None:
        return [], []
    if section.records is not None:
        records = section.records[: section.limit or None]
        rows = [{k: v for k, v in r.items() if section.column(k).show in keep} for r in records]
        return (list(rows[0]) if rows else []), rows
    table = section.arrow if section.arrow is not None else pa.table({})
    if section.limit:
        table = table.slice(0, section.limit)
    table = table.select([c for c in table.column_names if section.column(c).show in keep])
    return table.column_names, table.to_pylist()


def said(report: Report) -> Iterator[str]:
    """What a person should read beside the document: the headline, why it is empty, the notes."""
    if report.headline:
        yield report.headline
    if report.empty:
        yield report.empty
    section: Section | None = report.data_section()
    yield from section.said if section is not None else ()
    yield from report.notes


def say(err: Console, report: Report) -> None:
    for line in said(report):
        err.print(f"opscope: {one_line(line)}", highlight=False, markup=False)
