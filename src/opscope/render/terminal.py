"""The terminal: a report's sections as rich tables and grids, trace text always shown as plain text."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from opscope.render.base import ReportRenderer, Terminal
from opscope.report import Column, Report, Section
from opscope.text import one_line, printable
from opscope.units import format_bytes, format_cell, format_plain

_NUMERIC_SUFFIXES = ("_ns", "pct", "calls", "events")
#: Columns whose text can run to thousands of characters (a fused op's inputs): cut on the terminal only,
#: JSON and CSV keep them whole.
_CUT_COLUMNS = ("shapes", "dtypes", "strides")
CUT_AT = 100
_SPARK = "▁▂▃▄▅▆▇█"
BAR_WIDTH = 30


class TerminalRenderer(ReportRenderer):
    """A report's sections as tables and grids on the terminal."""

    name = "table"
    extension = ""
    binary = False

    def render(self, report: Report, out: Terminal) -> None:
        render(report, out.out)


def render(report: Report, out: Console) -> None:
    if report.empty is not None:
        out.print(f"opscope: {printable(report.empty)}", highlight=False, markup=False)
        return
    for heading in (report.title, report.headline):
        if heading:  # one line each (a title often names a file)
            out.print(Text(one_line(heading), style="bold"))
    for section in report.sections:
        if section.terminal:
            print_section(out, section)
    if report.notes and any(s.terminal for s in report.sections):
        out.print()
    for line in report.notes:
        out.print(_text(line, style="dim"))
    if report.legend:
        out.print(_text(report.legend, style="dim"))


def print_section(console: Console, section: Section) -> None:
    # a title is a heading of its own when the section has more than a table (or nothing else at all)
    heading = bool(section.title) and (bool(section.fields or section.text) or section.table is None)
    if heading:
        console.print()
        console.print(_text(section.title, style="bold"))
    if section.table is not None:
        caption = section.caption if heading else section.title
        for title, table in _parts(section, _shown(section)):
            console.print(table_view(table, title or caption, section.limit, section.columns))
        hidden = section.arrow.num_rows - section.limit if section.arrow is not None and section.limit else 0
        if hidden > 0:
            console.print(_text(f"... {hidden} more rows (use --limit 0 for all)", style="dim"))
    if section.fields:
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold")
        grid.add_column()
        for label, value in section.fields:
            grid.add_row(_text(label), _text(value))
        console.print(grid)
        if not heading:
            console.print()
    if section.text:
        console.print(_text(section.text))
    for line in ([section.legend] if section.legend else []) + list(section.said):
        console.print(_text(line, style="dim"))


def _shown(section: Section) -> pa.Table:
    """The section's table as the terminal shows it: drawn sketches, human bytes, indented trees, no columns
    meant for data formats or saying nothing."""
    raw = section.arrow
    assert raw is not None
    table = raw
    for name in raw.column_names:  # sketches and indents read the raw values, before any is turned into text
        hint = section.column(name)
        if hint.sketch == "sparkline":
            table = _set(table, name, _sparklines(raw[name].to_pylist(), _scale(raw, hint)))
        elif hint.sketch == "bar":
            table = _set(table, name, _bars(raw[name].to_pylist(), _scale(raw, hint)))
        elif hint.unit == "bytes" or name == "bytes" or name.endswith("_bytes"):
            table = _set(table, name, [format_bytes(v) for v in raw[name].to_pylist()])
        if hint.indent_by:
            depth = raw[hint.indent_by].to_pylist()
            table = _set(table, name, [("  " * (d or 0)) + (v or "") for v, d in zip(raw[name].to_pylist(), depth)])
    drop = [n for n in table.column_names if section.column(n).show in ("data", "json")
            or (section.column(n).hide_if_zero and not (pc.max(raw[n]).as_py() or 0))]
    return table.drop_columns(drop)


def _parts(section: Section, table: pa.Table) -> list[tuple[str | None, pa.Table]]:
    if not section.parts:
        return [(None, table)]
    named = {c for _, columns in section.parts for c in columns}
    rest = [c for i, c in enumerate(table.column_names) if i == 0 or c not in named]
    return [(title, table.select([c for c in columns or rest if c in table.column_names]))
            for title, columns in section.parts]


def _set(table: pa.Table, name: str, values: list[Any]) -> pa.Table:
    return table.set_column(table.schema.get_field_index(name), name, pa.array(values, pa.string()))


def _scale(table: pa.Table, hint: Column) -> list[Any]:
    return table[hint.scale].to_pylist() if hint.scale else [None] * table.num_rows


def _sparklines(series: list[list[int | None] | None], peaks: list[Any]) -> list[str]:
    """One block character per value, scaled to the row's peak."""
    lines = []
    for values, peak in zip(series, peaks):
        if not peak or peak <= 0 or values is None:
            lines.append("")
            continue
        lines.append("".join(" " if v is None else _SPARK[min(len(_SPARK) - 1, max(0, v * len(_SPARK) // (peak + 1)))]
                             for v in values))
    return lines


def _bars(values: list[int | None], groups: list[Any]) -> list[str]:
    """A bar per value, scaled to the largest value of its group."""
    peaks: dict[Any, int] = {}
    for g, v in zip(groups, values):
        peaks[g] = max(peaks.get(g, 0), v or 0)
    return ["" if not peaks[g] or v is None else "█" * max(0, round(BAR_WIDTH * v / peaks[g]))
            for g, v in zip(groups, values)]


def _text(text: str, style: str = "") -> Text:
    """Trace text as rich Text: never read as markup, its control characters written out."""
    return Text(printable(text), style=style)


def cut(text: str, at: int = CUT_AT) -> str:
    """``text``, or its first ``at`` characters and how many more there are."""
    return text if len(text) <= at + 20 else f"{text[:at]}... (+{len(text) - at:,} chars)"


def table_view(table: pa.Table, title: str | None = None, limit: int | None = None,
               columns: Any = None) -> Table:
    hints = columns or {}
    view = Table(title=escape(printable(title)) if title else None, title_justify="left", header_style="bold")
    for field in table.schema:
        name = field.name
        numeric = pa.types.is_integer(field.type) or pa.types.is_floating(field.type) \
            or pa.types.is_decimal(field.type)
        hint = hints.get(name)
        right = numeric or name.endswith(_NUMERIC_SUFFIXES + ("bytes",)) or (hint is not None and hint.unit == "bytes")
        view.add_column(escape(printable(name)), justify="right" if right else "left",
                        overflow="fold", max_width=80 if name in ("name", "op", "shapes") else None)
    shown = table.slice(0, limit) if limit else table
    plain = {n for n, h in hints.items() if h.unit == "plain"}
    for row in shown.to_pylist():
        # _text(): trace text must never be read as rich markup.
        cells = [format_plain(v) if k in plain else format_cell(k, v) for k, v in row.items()]
        view.add_row(*(_text(cut(c) if k in _CUT_COLUMNS else c) for k, c in zip(row, cells)))
    return view
