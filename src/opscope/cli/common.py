"""What every command does alike: loading a trace (progress, recovered-events warning), showing a report in the
chosen format, writing a document to a file, saying a line on stderr. The options they share are in options.py.

Importing this module (and so registering every command) costs typer alone: pyarrow, rich, the model and the
renderers are imported on first use, so that ``opscope --help`` starts in a fraction of a second.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress

    from opscope.analyses.filters import EventFilter
    from opscope.model.trace import Trace
    from opscope.render.base import FileRenderer
    from opscope.report import Report

D = TypeVar("D")


def stdout() -> Console:
    """The console commands show their tables and documents on (``out``), made on first use."""
    if "out" not in _consoles:
        from rich.console import Console

        # Piped output is not cut to 80 columns: names are what people grep for.
        _consoles["out"] = Console(soft_wrap=False, width=None if sys.stdout.isatty() else 200)
    return _consoles["out"]


def stderr() -> Console:
    """The console of the lines for the person running the command (``err``), made on first use."""
    if "err" not in _consoles:
        from rich.console import Console

        _consoles["err"] = Console(stderr=True, soft_wrap=True)  # one-line errors stay one line
    return _consoles["err"]


# rich costs as much to import as typer, and --help needs neither: the consoles are made on first use.
_consoles: dict[str, Console] = {}


@contextmanager
def consoles_on(out: IO[str], err: IO[str]) -> Iterator[None]:
    """Inside, commands show their documents on ``out`` and say their lines on ``err`` instead of the process's
    stdout and stderr (the consoles are those of a pipe: no colour, no progress bar): for a process that runs
    commands and hands their output on (opscope mcp). The process's own streams are left alone."""
    from rich.console import Console

    saved = dict(_consoles)
    # never a terminal, whatever the environment says (FORCE_COLOR): plain text, no progress bar
    _consoles["out"] = Console(file=out, soft_wrap=False, width=200, force_terminal=False)
    _consoles["err"] = Console(file=err, soft_wrap=True, force_terminal=False)
    try:
        yield
    finally:
        _consoles.clear()
        _consoles.update(saved)


def __getattr__(name: str) -> Any:
    # ``common.out`` and ``common.err``, as before they were made lazily
    if name == "out":
        return stdout()
    if name == "err":
        return stderr()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def is_document(fmt: str) -> bool:
    """Stdout holds one machine-read document (every format but the terminal's): nothing else may go there."""
    return fmt != "table"


def show(report: Report, fmt: str) -> None:
    """Hand a command's report to the renderer of ``fmt``: a data format gets every row unless --limit was given
    (the command's default limit is the terminal's)."""
    from opscope.cli.options import limit_asked
    from opscope.render import ReportRenderer, Terminal

    if not limit_asked() and fmt != "table":
        report = report.every_row()
    ReportRenderer.named(fmt)().render(report, Terminal(stdout(), stderr()))


def write_document(renderer: FileRenderer[D], document: D, output: Path, force: bool) -> int:
    """Write ``document`` to ``output`` with ``renderer`` (the file appears whole or not at all, never over an
    existing one unless ``force``); return its size in bytes."""
    from opscope.outfile import write_file

    return write_file(output, lambda stream: renderer.render(document, stream), force)


def say(text: str) -> None:
    """One line for the person running the command, on stderr (stdout may be a JSON document); control characters
    and newlines (from a trace, a file name or a file written elsewhere) are spelled out."""
    from opscope.text import one_line

    stderr().print(f"opscope: {one_line(text)}", highlight=False, markup=False)


def load(path: Path, no_cache: bool = False, inflation_note: bool = True) -> Trace:
    """Open a trace for a command: a progress bar on a terminal when parsing it is slow (see show_progress), a
    warning when the file was damaged and what could be read was recovered, and (unless the command's report
    says it itself: ``inflation_note=False``) a line when the trace is a recording whose steps the profiler
    slowed beyond the noise, so that no command shows its times without saying they are inflated."""
    trace = open_quietly(path, no_cache)
    announce(trace, path, inflation_note)
    return trace


def open_quietly(path: Path, no_cache: bool = False) -> Trace:
    """:func:`load` without its lines on stderr, for a command that opens several traces: it calls
    :func:`announce` once all are open, so a file that fails to open is the run's only line."""
    from opscope.ingest import open_trace
    from opscope.scale.discover import is_job_spec

    if is_job_spec(path):
        from opscope.errors import UsageError

        raise UsageError(f"{path} names a job (a directory or glob of rank traces) and this command reads one trace: "
                         "give it one rank's file; opscope job, summary, ops, kernels, steps, gpu, memory, scope, "
                         "code and query take the whole job")
    progress = _progress_for(path)
    try:
        trace = open_trace(path, use_cache=not no_cache, progress=progress, write_behind=True)
    finally:
        if progress is not None:
            progress.close()
    from opscope.analyses.capture_merge import with_capture
    from opscope.cli.options import capture_given

    return with_capture(trace, path, capture_given(),
                        lambda capture_path: open_trace(capture_path, use_cache=not no_cache, write_behind=True))


def announce(trace: Trace, path: Path, inflation_note: bool = True) -> None:
    """What :func:`load` says about an open trace: recovered events, a rebuilt cache entry, inflated steps, the graph
    capture merged with it."""
    from opscope.analyses.capture_merge import capture_note

    _warn_recovered(trace)
    note = capture_note(trace)
    if note:
        say(note)
    if inflation_note:
        _say_inflation(path)


def _say_inflation(path: Path) -> None:
    from opscope.analyses.recording import find_run_info, step_inflation

    inflation = step_inflation(find_run_info(path))
    if inflation is not None and inflation.inflated:
        say(f"{path}: {inflation.line()}")


#: Content (decompressed) this big gets a bar from the start: parsing it takes seconds.
PROGRESS_AT_BYTES = 16 << 20
#: Smaller content gets one once reading has taken this long (a loaded machine, a slow disk).
PROGRESS_AFTER_S = 1.0
#: Content below this never gets one: it is read in well under a second.
PROGRESS_NEVER_BELOW = 1 << 20


def show_progress(content_bytes: int, elapsed_s: float) -> bool:
    """Whether reading a trace of ``content_bytes`` (decompressed) that has run ``elapsed_s`` shows a bar.

    By content, not size on disk: a 3 MB .gz holds 54 MB of JSON and took 8.5 s on a loaded machine."""
    if content_bytes < PROGRESS_NEVER_BELOW:
        return False
    return content_bytes >= PROGRESS_AT_BYTES or elapsed_s >= PROGRESS_AFTER_S


def content_size(path: Path) -> int:
    """The file's size once decompressed: a gzip file's ISIZE trailer (its last 4 bytes, the size modulo
    2**32), else its size on disk. An ISIZE below the compressed size means the content wrapped past 4 GiB."""
    size = path.stat().st_size
    with open(path, "rb") as fh:
        if fh.read(2) != b"\x1f\x8b" or size < 18:
            return size
        fh.seek(-4, 2)
        isize = int.from_bytes(fh.read(4), "little")
    return isize if isize >= size else isize + (1 << 32)


class _ReadProgress:
    """The reader's ``progress(done, total)`` callback: draws a bar on stderr once :func:`show_progress` says so
    (never for a trace read from the cache: the reader is not called then)."""

    def __init__(self, path: Path, content_bytes: int) -> None:
        self.path, self.content_bytes = path, content_bytes
        self.started = time.monotonic()
        self.bar: Progress | None = None
        self.task: Any = None

    def __call__(self, done: int, total: int) -> None:
        if self.bar is None:
            if not show_progress(self.content_bytes, time.monotonic() - self.started):
                return
            from rich.markup import escape
            from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn

            from opscope.text import one_line

            self.bar = Progress("[progress.description]{task.description}", BarColumn(), DownloadColumn(),
                                TimeRemainingColumn(), console=stderr(), transient=True)
            self.bar.start()
            # the description is read as markup: the file's name is escaped, its control characters spelled out
            self.task = self.bar.add_task(escape(one_line(f"reading {self.path.name}")), total=total)
        self.bar.update(self.task, completed=done, total=total)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def _stderr_is_tty() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed
        return False


def _progress_for(path: Path) -> _ReadProgress | None:
    # not a terminal: no bar, and no need to import rich to ask (unless the environment may force one, as rich reads it)
    if not _stderr_is_tty() and not os.environ.get("FORCE_COLOR") and not os.environ.get("TTY_COMPATIBLE"):
        return None
    if not stderr().is_terminal:
        return None
    try:
        return _ReadProgress(path, content_size(path))
    except OSError:
        return None


def _warn_recovered(trace: Trace) -> None:
    rebuilt = trace.metadata.get("cache_rebuilt")
    if not rebuilt and not trace.metadata.get("truncated"):
        return  # the common case: nothing to say, and rich (~30 ms to import) not needed for it
    from rich.text import Text

    from opscope.text import one_line

    err = stderr()
    if rebuilt:
        err.print(Text.assemble(("warning:", "yellow"), one_line(f" {trace.metadata.get('source')}: {rebuilt}; rebuilt "
                                                                 "from the trace")), highlight=False)
    if trace.metadata.get("truncated"):
        for w in trace.warnings:
            if w["problem"].startswith("file is truncated"):
                err.print(Text.assemble(("warning:", "yellow"),
                                        one_line(f" {trace.metadata.get('source')}: {w['problem']}")), highlight=False)


def split(text: str) -> list[str]:
    """A comma-separated option as a list, each item once (``--by shapes,shapes`` groups by shapes)."""
    return list(dict.fromkeys(p.strip() for p in text.split(",") if p.strip()))


def event_filter(kinds: str | None = None, match: str | None = None, exclude: str | None = None,
                 steps: str | None = None) -> EventFilter:
    """The --kinds/--match/--exclude/--steps options as an EventFilter."""
    from opscope.analyses.filters import EventFilter, parse_steps

    return EventFilter(kinds=None if kinds is None else split(kinds), match=match, exclude=exclude,
                       steps=parse_steps(steps))


def per_rank(spec: Path, fn: Any, no_cache: bool = False, **kwargs: Any) -> Report | None:
    """When ``spec`` names a job (a directory of rank traces or a glob) rather than one trace: ``fn``'s report
    (``fn(trace, **kwargs)``) for every rank, computed in parallel, as one table with a ``rank`` column; else
    None. The executor is a local pool unless $OPSCOPE_DASK names a Dask scheduler (or local:N);
    $OPSCOPE_WORKERS sets the pool's size."""
    from opscope.scale.discover import is_job_spec

    if not is_job_spec(spec):
        return None
    from opscope.cli.options import capture_given

    if capture_given():
        from opscope.errors import UsageError

        raise UsageError(f"--capture goes with one trace, and {spec} names a job: give one rank's trace and its "
                         "capture traces")
    from opscope.cli.job import TaskProgress, executor_from_env
    from opscope.scale.fanout import fan_out

    dask, workers = executor_from_env()
    progress = TaskProgress("reading ranks")
    try:
        return fan_out([spec], fn, kwargs, use_cache=not no_cache, dask=dask, workers=workers, progress=progress)
    finally:
        progress.close()
