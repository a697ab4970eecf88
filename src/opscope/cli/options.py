"""The options and arguments more than one command takes, each declared once: the same flag, help text and checks
wherever it appears. Options one command alone takes are declared beside that command.

Importing this module costs typer alone (see common.py): the --format check imports the renderers' registry only
when a value is given.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

TraceArg = Annotated[Path, typer.Argument(help="Trace file (any format opscope reads, plain or .gz).",
                                          show_default=False)]
RecordingArg = Annotated[Path, typer.Argument(
    help="Trace file, or a recording directory from `opscope record` (its first trace).", show_default=False)]
#: a command that also takes a whole job: per rank in parallel, rows with a rank column (see common.per_rank)
TraceOrJobArg = Annotated[Path, typer.Argument(
    help="Trace file (any format opscope reads, plain or .gz), or a job: a directory or quoted glob of rank traces "
         "(each rank in parallel; rows with a rank column).", show_default=False, metavar="TRACE")]


#: the names of the report renderers registered in opscope.render, spelled here so that registering the commands
#: does not import the renderers; a test checks that the two agree
FORMATS = ("table", "json", "csv")


def _registered_format(value: str) -> str:
    from opscope.render import ReportRenderer

    if value not in ReportRenderer.names():
        raise typer.BadParameter(f"{value!r} is not one of {', '.join(ReportRenderer.names())}")
    return value


#: every report renderer registered in opscope.render is a --format choice
FormatOpt = Annotated[str, typer.Option("--format", "-f", help="Output format.", metavar="|".join(FORMATS),
                                        callback=_registered_format)]
class _Asked:
    """What the person running the command asked for beyond the values: whether they gave --limit themselves (a
    command runs once per process; tools that run several in one process get it set again by each)."""

    limit = False


def _note_limit(ctx: typer.Context, param: typer.CallbackParam, value: int | None) -> int | None:
    source = ctx.get_parameter_source(param.name or "limit")
    _Asked.limit = source is not None and source.name != "DEFAULT"
    return value


def limit_asked() -> bool:
    """Whether --limit was given to the command now showing its report (without it JSON and CSV give every row;
    the terminal, the command's default); asked once per command, so the next command in the process starts
    afresh."""
    asked, _Asked.limit = _Asked.limit, False
    return asked


LimitOpt = Annotated[int, typer.Option("--limit", "-n", help="Rows to show (0 = all). Without it the terminal "
                                                             "shows the first rows and JSON/CSV give every row.",
                                       callback=_note_limit)]
class _Capture:
    """The capture traces the command was given (--capture), for whatever opens its traces (common.open_quietly)."""

    given: list[Path] | None = None


def _note_capture(value: list[Path] | None) -> list[Path] | None:
    _Capture.given = list(value) if value else None
    return value


def capture_given() -> list[Path] | None:
    """The paths given to --capture by the command now running (None: none given)."""
    return _Capture.given


def forget_given() -> None:
    """Forget what the last command in this process was given (--limit, --capture): a command that failed before
    its report was shown leaves them set, and a process that runs several (opscope mcp) starts each afresh."""
    _Asked.limit = False
    _Capture.given = None


CaptureOpt = Annotated[list[Path] | None, typer.Option(
    "--capture", callback=_note_capture, metavar="PATH",
    help="Graph-capture trace(s) of a CUDA/HIP-graph run (a file or folder; repeatable): replayed kernels get the "
         "ops recorded at capture. Without it, a capture_traces/ folder beside the trace is used (vLLM, SGLang and "
         "xDiT write one); 'none' turns that off.")]
NoCacheOpt = Annotated[bool, typer.Option("--no-cache", help="Read the file itself; neither use nor write "
                                                             "the cache.")]
MatchOpt = Annotated[str | None, typer.Option("--match", help="Keep only names matching this regex.")]
ExcludeOpt = Annotated[str | None, typer.Option("--exclude", help="Drop names matching this regex.")]
StepsOpt = Annotated[str | None, typer.Option("--steps", help="Only these steps, e.g. 3 or 2-4,7.")]
#: the commands that write one file (report, export, graph): an existing one is replaced only when asked
ForceOpt = Annotated[bool, typer.Option("--force", help="Replace the output file if it exists.")]
PeaksOpt = Annotated[Path | None, typer.Option(
    "--peaks", metavar="FILE", help="The device's peaks from this file (opscope peaks --output FILE writes one) "
                                    "instead of the table's for the device the trace names.")]
