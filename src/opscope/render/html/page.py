"""What an HTML report holds, as plain data: sections of tables, charts, labelled fields and prose.

The section builders (``sections.py``, ``compare.py``) fill a :class:`Page` from the analyses' own reports and
tables; ``document.py`` turns it into one self-contained file. Nothing here is HTML yet: every string is the
trace's text as it is, and the template escapes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeAlias


@dataclass(frozen=True)
class Cell:
    """A table cell: ``text`` as shown, ``value`` as the data formats write it (sorting uses it)."""

    text: str
    value: Any


@dataclass(frozen=True)
class TableBlock:
    key: str
    title: str
    columns: list[str]
    numeric: list[bool]
    rows: list[list[Cell]]
    #: rows in the analysis' table; more than ``len(rows)`` when the report shows only the first ones
    total_rows: int
    legend: str | None = None
    notes: list[str] = field(default_factory=list)
    #: a search box filters the rows
    searchable: bool = False


@dataclass(frozen=True)
class ChartBlock:
    key: str
    title: str
    #: a Vega-Lite or Vega specification (JSON-ready); its data inline
    spec: dict[str, Any]
    #: what the chart shows and of what (the window, the denominator), under it
    caption: str = ""
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class FieldsBlock:
    key: str
    items: list[tuple[str, str]]
    title: str = ""


@dataclass(frozen=True)
class ProseBlock:
    key: str
    text: str
    title: str = ""
    #: "note": a remark about the numbers; "empty": why a part has nothing to show
    tone: str = "note"


@dataclass(frozen=True)
class FindingBlock:
    """One piece of advice: what, how much it would save, how that was estimated, what to change, evidence."""

    key: str
    title: str
    saving: str
    rule: str
    estimate: str
    change: str
    evidence: TableBlock | None


Block: TypeAlias = "TableBlock | ChartBlock | FieldsBlock | ProseBlock | FindingBlock"


@dataclass(frozen=True)
class PageSection:
    id: str
    title: str
    blocks: list[Block]
    #: one line under the title: where the numbers come from (the command that shows them)
    intro: str = ""


@dataclass(frozen=True)
class Page:
    title: str
    #: the traces the report is about, as given
    sources: list[str]
    sections: list[PageSection]
    notes: list[str] = field(default_factory=list)
    kind: str = "trace"  # trace | diff | job
