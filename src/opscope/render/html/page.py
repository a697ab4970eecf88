"""What an HTML report holds, as plain data: sections of tables, charts, labelled fields and prose.

``opscope.compose.page`` fills a :class:`Page` from the analyses' own reports (their tables are Report
:class:`~opscope.report.Section` s) and the charts' Vega-Lite specs; the HTML renderer lays it out as one
self-contained file. Nothing here is HTML yet: every string is the trace's text as it is, and the template
escapes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:
    from opscope.report import Section


@dataclass(frozen=True)
class TableBlock:
    """A table as a Report section holds it: its key, title, Arrow table (or records, for rows that share no
    schema: a finding's evidence), column hints, legend, notes and the number of rows to show. The renderer
    formats it as the terminal does."""

    section: Section
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
class TimelineBlock:
    """Threads and streams of a few steps, drawn on a zoomable canvas: ``data`` is the compose layer's compact
    arrays (:func:`opscope.compose.page.timeline.timeline_data`), JSON-ready."""

    key: str
    title: str
    data: dict[str, Any]
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


Block: TypeAlias = "TableBlock | ChartBlock | TimelineBlock | FieldsBlock | ProseBlock | FindingBlock"


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
