"""The one result shape: every command's answer is a :class:`Report` of :class:`Section` s.

Analyses, advise and diff compute; a Report says what they found, as Arrow tables (or records for rows that
share no schema), prose and hints on how to show each column. Renderers (``opscope.render``) take a Report
and nothing else, so a new output format is one renderer module, and no command branches on the format.

Who sees what:
- the terminal shows every section with ``terminal=True``: its title, fields, table, legend and notes, then
  the report's notes and legend;
- a data format (JSON, CSV) writes one document: the first section with ``data=True``, cut to its limit, and
  says the report's ``headline``, the report's notes and that section's notes on stderr.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

if TYPE_CHECKING:  # annotations only: the renderers' registry imports this module before any table exists
    import pyarrow as pa

Rows = list[dict[str, Any]]
#: a table, or how to compute it: renderers compute only what they show (JSON of `gpu` needs no idle causes)
TableSource: TypeAlias = "pa.Table | Callable[[], pa.Table] | None"
NotesSource: TypeAlias = "Sequence[str] | Callable[[], Sequence[str]]"


@dataclass(frozen=True)
class Column:
    """How to show one column. Data formats keep raw values (integers, lists) unless ``show`` says otherwise."""

    #: "bytes": KiB/MiB/GiB text on the terminal (``*_ns`` and ``*pct`` columns are recognised by name);
    #: "plain": the value as it is (digits grouped, floats without exponent), never a unit guessed from the
    #: name: for columns whose meaning the code does not know (query results; ``ts_ns`` is a timestamp).
    unit: Literal["bytes", "plain"] | None = None
    #: where the column appears: everywhere; only on the terminal (a sketch); only in data formats (a path, a
    #: depth); only in JSON (nested values that a CSV cell cannot hold).
    show: Literal["both", "terminal", "data", "json"] = "both"
    #: the terminal draws the value instead of printing it: a list of numbers as a sparkline scaled to the
    #: number in ``scale`` of the same row; a number as a bar scaled to the largest value among the rows
    #: with the same ``scale`` value.
    sketch: Literal["sparkline", "bar"] | None = None
    scale: str | None = None
    #: the terminal indents the text two spaces per level given by this (integer) column: a tree.
    indent_by: str | None = None
    #: the terminal leaves the column out when no row has a non-zero value in it.
    hide_if_zero: bool = False


@dataclass(frozen=True)
class Section:
    """One part of a result: a table (or records, or labelled fields) with what it means."""

    key: str
    #: the table's caption; a heading of its own when the section also has fields or text (then ``caption`` is
    #: the table's)
    title: str = ""
    table: TableSource = None
    _: KW_ONLY
    caption: str | None = None
    #: rows that do not fit one Arrow schema (a finding with its evidence rows): data formats only
    records: Rows | None = None
    #: a whole JSON document of several named tables (a job view): what JSON writes instead of the rows;
    #: CSV writes the section's table
    document: Mapping[str, Any] | None = None
    #: labelled lines shown as a grid on the terminal (an overview, a finding's estimate)
    fields: Sequence[tuple[str, str]] = ()
    #: prose shown as it is (a rule's explanation)
    text: str | None = None
    #: what the columns mean: the terminal shows it under the table; data formats document it in --help
    legend: str | None = None
    #: what to know about this result (clipped events, inferred links, why it is empty): everywhere
    notes: NotesSource = ()
    #: rows to show (None: all)
    limit: int | None = None
    columns: Mapping[str, Column] = field(default_factory=dict)
    #: the terminal shows the table in parts (title, columns), e.g. two narrower tables of one wide one; a part
    #: with no columns gets the first column and every column no other part names
    parts: Sequence[tuple[str, Sequence[str]]] = ()
    terminal: bool = True
    data: bool = True

    @cached_property
    def arrow(self) -> pa.Table | None:
        """The table, computed on first use."""
        return self.table() if callable(self.table) else self.table

    @cached_property
    def said(self) -> Sequence[str]:
        """The notes, computed on first use."""
        return self.notes() if callable(self.notes) else self.notes

    def column(self, name: str) -> Column:
        return self.columns.get(name, _PLAIN)


_PLAIN = Column()


@dataclass(frozen=True)
class Report:
    """A command's whole answer."""

    sections: Sequence[Section] = ()
    #: a heading for the terminal (the file a report is about)
    title: str | None = None
    #: the one-line conclusion: first on the terminal, on stderr with data formats
    headline: str | None = None
    #: what to know about the whole result: after the sections, and on stderr with data formats
    notes: Sequence[str] = ()
    #: how to read or go further (a command to try): terminal only
    legend: str | None = None
    #: why there is nothing to show: the terminal prints only this; data formats write the (empty) data
    #: section and say it on stderr
    empty: str | None = None

    def data_section(self) -> Section | None:
        return next((s for s in self.sections if s.data), None)

    def every_row(self) -> Report:
        """This report with no section cut to a limit."""
        return replace(self, sections=[replace(s, limit=None) if s.limit else s for s in self.sections])

    def then(self, other: Report) -> Report:
        """This report followed on the terminal by ``other`` (its title as a heading); the data document stays
        this report's."""
        heading = [Section("heading", other.title, data=False)] if other.title else []
        tail = [replace(s, data=False) for s in other.sections if s.terminal]
        legend = "\n".join(t for t in (self.legend, other.legend) if t) or None
        return replace(self, sections=[*self.sections, *heading, *tail], notes=[*self.notes, *other.notes],
                       legend=legend)


def single(table: pa.Table, title: str, limit: int | None = None, legend: str | None = None,
           notes: Sequence[str] = (), columns: Mapping[str, Column] | None = None, key: str = "rows") -> Report:
    """The common case: one table that is both what the terminal shows and the data document."""
    return Report(sections=[Section(key, title, table, legend=legend, notes=notes, limit=limit or None,
                                    columns=columns or {})])
