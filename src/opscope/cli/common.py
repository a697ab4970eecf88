"""What every command shares: its options, loading a trace (progress, recovered-events warning), showing a
report in the chosen format."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.text import Text

from opscope.model.trace import Trace
from opscope.render import RENDERERS, renderer
from opscope.report import Report

if TYPE_CHECKING:
    from rich.progress import Progress

    from opscope.analyses.filters import EventFilter

# Piped output is not cut to 80 columns: names are what people grep for.
out = Console(soft_wrap=False, width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True, soft_wrap=True)  # one-line errors stay one line


def is_document(fmt: str) -> bool:
    """Stdout holds one machine-read document (every format but the terminal's): nothing else may go there."""
    return fmt != "table"


TraceArg = Annotated[Path, typer.Argument(help="Trace file (.json or .json.gz).", show_default=False)]


def _registered_format(value: str) -> str:
    if value not in RENDERERS:
        raise typer.BadParameter(f"{value!r} is not one of {', '.join(RENDERERS)}")
    return value


#: every renderer registered in opscope.render is a --format choice
FormatOpt = Annotated[str, typer.Option("--format", "-f", help="Output format.", metavar="|".join(RENDERERS),
                                        callback=_registered_format)]
LimitOpt = Annotated[int, typer.Option("--limit", "-n", help="Rows to show (0 = all).")]
NoCacheOpt = Annotated[bool, typer.Option("--no-cache", help="Read the file itself; neither use nor write "
                                                             "the Parquet cache.")]
MatchOpt = Annotated[str | None, typer.Option("--match", help="Keep only names matching this regex.")]
ExcludeOpt = Annotated[str | None, typer.Option("--exclude", help="Drop names matching this regex.")]
StepsOpt = Annotated[str | None, typer.Option("--steps", help="Only these steps, e.g. 3 or 2-4,7.")]


def show(report: Report, fmt: str) -> None:
    """Hand a command's report to the renderer of ``fmt``."""
    renderer(fmt)(report, out, err)


def say(text: str) -> None:
    """One line for the person running the command, on stderr (stdout may be a JSON document)."""
    err.print(f"opscope: {text}", highlight=False, markup=False)


def load(path: Path, no_cache: bool = False) -> Trace:
    """Open a trace for a command: a progress bar for big files on a terminal, a warning when the file was
    damaged and what could be read was recovered."""
    from opscope.ingest import open_trace
    from opscope.sysmem import release_free_memory

    _use_system_allocator()
    progress = _progress_for(path)
    if progress is None:
        trace = open_trace(path, use_cache=not no_cache)
    else:
        with progress as bar:
            task = bar.add_task(f"reading {path.name}", total=path.stat().st_size)
            trace = open_trace(path, use_cache=not no_cache,
                               progress=lambda done, total: bar.update(task, completed=done, total=total))
    release_free_memory()
    _warn_recovered(trace)
    return trace


def _use_system_allocator() -> None:
    # Arrow's default allocator keeps freed chunks; the system one returns them, which keeps the
    # peak memory of a one-shot command near the size of the columns.
    import pyarrow as pa

    pa.set_memory_pool(pa.system_memory_pool())


def _progress_for(path: Path) -> Progress | None:
    try:
        big = path.stat().st_size >= 16 << 20
    except OSError:
        return None
    if not big or not err.is_terminal:
        return None
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn

    return Progress("[progress.description]{task.description}", BarColumn(), DownloadColumn(),
                    TimeRemainingColumn(), console=err, transient=True)


def _warn_recovered(trace: Trace) -> None:
    if trace.metadata.get("truncated"):
        for w in trace.warnings:
            if w["problem"].startswith("file is truncated"):
                err.print(Text.assemble(("warning:", "yellow"), f" {trace.metadata.get('source')}: {w['problem']}"),
                          highlight=False)


def split(text: str) -> list[str]:
    """A comma-separated option as a list."""
    return [p.strip() for p in text.split(",") if p.strip()]


def event_filter(kinds: str | None = None, match: str | None = None, exclude: str | None = None,
                 steps: str | None = None) -> EventFilter:
    """The --kinds/--match/--exclude/--steps options as an EventFilter."""
    from opscope.analyses.filters import EventFilter, parse_steps

    return EventFilter(kinds=None if kinds is None else split(kinds), match=match, exclude=exclude,
                       steps=parse_steps(steps))
