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
LimitOpt = Annotated[int, typer.Option("--limit", "-n", help="Rows to show (0 = all).")]
NoCacheOpt = Annotated[bool, typer.Option("--no-cache", help="Read the file itself; neither use nor write "
                                                             "the cache.")]
MatchOpt = Annotated[str | None, typer.Option("--match", help="Keep only names matching this regex.")]
ExcludeOpt = Annotated[str | None, typer.Option("--exclude", help="Drop names matching this regex.")]
StepsOpt = Annotated[str | None, typer.Option("--steps", help="Only these steps, e.g. 3 or 2-4,7.")]
#: the commands that write one file (report, export, graph): an existing one is replaced only when asked
ForceOpt = Annotated[bool, typer.Option("--force", help="Replace the output file if it exists.")]
