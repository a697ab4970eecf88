"""Any one-trace command over a job: its report is computed per rank in the workers and only the report's data
section (cut to its limit) comes back; the ranks' rows are joined into one table with a ``rank`` column."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from opscope.report import Column, Report, Section


@dataclass(frozen=True)
class ReportTask:
    path: str
    cache_dir: str | None
    use_cache: bool
    #: a module-level function ``(trace, **kwargs) -> Report`` (pickled by reference)
    fn: Callable[..., Report]
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass
class RankPart:
    """One rank's share of a command's report: its data section, materialised and cut to its limit."""

    rank: int | None
    world_size: int | None
    table: pa.Table | None
    records: list[dict[str, Any]] | None
    notes: list[str]
    columns: dict[str, Column]
    title: str
    legend: str | None
    headline: str | None
    empty: str | None


def report_rank(task: ReportTask) -> RankPart:
    from opscope.ingest import open_trace
    from opscope.scale.discover import rank_from_name

    path = Path(task.path)
    trace = open_trace(path, use_cache=task.use_cache, cache_dir=Path(task.cache_dir) if task.cache_dir else None)
    report = task.fn(trace, **task.kwargs)
    section = report.data_section()
    rank = trace.metadata.get("rank")
    rank = rank if isinstance(rank, int) else rank_from_name(path)
    world = trace.metadata.get("world_size")
    table = records = None
    if section is not None:
        if section.records is not None:
            records = list(section.records[: section.limit or None])
        elif section.arrow is not None:
            table = section.arrow.slice(0, section.limit) if section.limit else section.arrow
            table = table.combine_chunks()
    notes = list(section.said if section is not None else ()) + list(report.notes)
    return RankPart(rank=rank, world_size=world if isinstance(world, int) else None, table=table, records=records,
                    notes=notes, columns=dict(section.columns) if section is not None else {},
                    title=(section.title if section is not None else "") or "", legend=section.legend if section
                    else None, headline=report.headline, empty=report.empty)


def fan_out(specs: Sequence[str | Path], fn: Callable[..., Report], kwargs: dict[str, Any], *,
            use_cache: bool = True, cache_dir: Path | None = None, dask: str | None = None,
            workers: int | None = None, progress: Callable[[int, int], None] | None = None) -> Report:
    """``fn``'s report for every rank of the job, as one report with a ``rank`` column."""
    from opscope.scale.discover import job_inputs
    from opscope.scale.job import run_per_file
    from opscope.store.keys import cache_root

    inputs = job_inputs([str(s) for s in specs])
    root = cache_dir or cache_root()
    tasks = [ReportTask(str(p), str(root), use_cache, fn, kwargs) for p in inputs.files]
    parts, problems, _ = run_per_file(inputs, report_rank, tasks, dask=dask, workers=workers, progress=progress)
    return combine_parts(parts, problems, ", ".join(str(s) for s in specs))


def combine_parts(parts: list[tuple[Path, RankPart]], problems: list[str], spec: str) -> Report:
    """The ranks' parts as one report: rows with a ``rank`` (and ``file``) column, in rank order."""
    order = sorted(parts, key=lambda p: (p[1].rank is None, p[1].rank if p[1].rank is not None else 0, str(p[0])))
    tables, records = [], []
    notes: dict[str, list[str]] = {}
    for path, part in order:
        label = part.rank if part.rank is not None else -1
        for n in part.notes:
            notes.setdefault(n, []).append(str(part.rank) if part.rank is not None else str(path))
        if part.records is not None:
            records += [{"rank": part.rank, "file": str(path), **r} for r in part.records]
        elif part.table is not None:
            t = part.table
            t = t.add_column(0, "rank", pa.array([label if part.rank is not None else None] * t.num_rows, pa.int64()))
            t = t.add_column(1, "file", pa.array([str(path)] * t.num_rows, pa.string()))
            tables.append(t)
    lines = [n if len(who) == len(order) else f"rank(s) {', '.join(who[:8])}{'...' if len(who) > 8 else ''}: {n}"
             for n, who in notes.items()]
    first = order[0][1] if order else None
    columns = {**(first.columns if first else {}), "file": Column(show="data")}
    if records:
        section = Section("rows", first.title if first else "", None, records=records, terminal=False)
        table = pa.Table.from_pylist([{k: v if k == "rank" else _text(v) for k, v in r.items() if k != "file"}
                                       for r in records])
        shown = Section("rows_terminal", first.title if first else "", table, data=False)
        sections = [section, shown]
    else:
        joined = pa.concat_tables(tables, promote_options="permissive") if tables else pa.table({})
        sections = [Section("rows", first.title if first else "", joined, legend=first.legend if first else None,
                            columns=columns)]
    headline = f"{len(order)} rank(s) of {spec}; each rank's rows with its rank"
    empty = None if order else "no rank could be read"
    return Report(sections=sections, title=f"job {spec}", headline=headline, notes=[*problems, *lines], empty=empty)


def _text(value: Any) -> str | None:
    # summary records mix numbers and text in one field: the terminal's table shows every value as text
    return None if value is None else str(value)
